import { Layer } from "effect"
import type { Backend } from "../services/Backend.js"
import { Settings, type SettingsShape } from "../services/Settings.js"
import * as ComputerRegistry from "./ComputerRegistry.js"
import * as FileTransfer from "./FileTransfer.js"
import * as ProcessSupervisor from "./ProcessSupervisor.js"

/** The runtime (Processes, Computers and Files) over a backend, with the Settings it was built from. */
export const layer = <E, R>(settings: SettingsShape, backend: Layer.Layer<Backend, E, R>) =>
  Layer.merge(ProcessSupervisor.layer, FileTransfer.layer).pipe(
    Layer.provideMerge(ComputerRegistry.layer),
    Layer.provideMerge(backend),
    Layer.provideMerge(Layer.succeed(Settings, settings))
  )
