import { Effect, Layer, Logger, Runtime } from "effect"
import type { SettingsShape } from "../services/Settings.js"
import * as DockerBackend from "./backends/DockerBackend.js"
import * as HostBackend from "./backends/HostBackend.js"
import * as KilntainersRuntime from "./Runtime.js"

const hostLayer = (settings: SettingsShape) =>
  HostBackend.layer({
    stateDir: settings.stateDir,
    network: settings.network,
    sandbox: settings.unsafeNoSandbox ? "none" : "bwrap",
    bwrap: settings.bwrapPath
  })

const dockerLayer = (settings: SettingsShape, instanceId: string, log: (line: string) => void) =>
  DockerBackend.layer({
    engine: settings.engine,
    dockerHost: settings.dockerHost,
    image: settings.image,
    cpu: settings.cpu,
    memory: settings.memory,
    pidsLimit: settings.pidsLimit,
    network: settings.network,
    runFlags: settings.dockerRunFlags,
    instanceId,
    onPullProgress: (line) => log(`pull ${settings.image}: ${line}`)
  })

/**
 * The backend the settings ask for. `auto` picks docker when an engine answers, else host, and
 * says which on stderr.
 */
export const backendLayer = (settings: SettingsShape, instanceId: string) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    let backend = settings.backend
    if (backend === "auto") {
      const reachable = yield* DockerBackend.ping({ engine: settings.engine, dockerHost: settings.dockerHost })
      backend = reachable ? "docker" : "host"
      yield* Effect.logInfo(
        reachable
          ? `backend: docker (a ${settings.engine} engine answered; --backend host to use the host sandbox instead)`
          : `backend: host (no ${settings.engine} engine answered; --backend docker to insist)`
      )
    }
    // Pull progress goes to the log (stderr), never to stdout.
    const log = Runtime.runSync(yield* Effect.runtime<never>())
    return backend === "docker"
      ? dockerLayer(settings, instanceId, (line) => log(Effect.logInfo(line)))
      : hostLayer(settings)
  }))

/** Everything a server needs: the runtime over the configured backend. */
export const layer = (settings: SettingsShape, instanceId: string) => KilntainersRuntime.layer(settings, backendLayer(settings, instanceId))

/** Logs go to stderr only: in stdio mode stdout carries the MCP protocol and nothing else. */
export const stderrLogger = Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true, colors: false }))
