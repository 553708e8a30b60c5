import { Logger } from "effect"
import type { SettingsShape } from "../services/Settings.js"
import * as HostBackend from "./backends/HostBackend.js"
import * as Runtime from "./Runtime.js"

/** The backend chosen by the settings. */
export const backendLayer = (settings: SettingsShape) =>
  HostBackend.layer({
    stateDir: settings.stateDir,
    network: settings.network,
    sandbox: settings.unsafeNoSandbox ? "none" : "bwrap",
    bwrap: settings.bwrapPath
  })

/** Everything a server needs: runtime, host-or-configured backend. */
export const layer = (settings: SettingsShape) => Runtime.layer(settings, backendLayer(settings))

/** Logs go to stderr only: in stdio mode stdout carries the MCP protocol and nothing else. */
export const stderrLogger = Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true, colors: false }))
