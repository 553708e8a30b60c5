import * as Layer from "effect/Layer"
import type { Backend } from "../services/Backend.js"
import { Settings, type SettingsShape } from "../services/Settings.js"
import * as ComputerRegistry from "./ComputerRegistry.js"
import * as AuditLog from "./AuditLog.js"
import * as FileTransfer from "./FileTransfer.js"
import * as Previews from "./preview/Previews.js"
import * as ProcessOwner from "./server/ProcessOwner.js"
import * as ProcessSupervisor from "./ProcessSupervisor.js"
import * as TerminalHolds from "./terminal/TerminalHolds.js"
import * as Terminals from "./terminal/Terminals.js"

/**
 * The runtime (Processes, Terminals, Computers, Files and Previews, with their listener when --preview-port is set) over a backend, with the Settings it was built from
 * and the audit log (`--audit-log`; in memory only without it), which the backend may use too.
 * `instanceId` names this server on the computers it creates (random when absent).
 */
export const layer = <E, R>(settings: SettingsShape, backend: Layer.Layer<Backend, E, R>, instanceId?: string) =>
  Layer.mergeAll(Terminals.layer.pipe(Layer.provideMerge(ProcessSupervisor.layer)), FileTransfer.layer, Previews.layer).pipe(
    Layer.provideMerge(TerminalHolds.layer),
    Layer.provideMerge(ComputerRegistry.layer),
    Layer.provideMerge(ProcessOwner.layer(instanceId)),
    Layer.provideMerge(backend),
    Layer.provideMerge(AuditLog.layer),
    Layer.provideMerge(Layer.succeed(Settings, settings))
  )
