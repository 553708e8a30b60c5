import * as Context from "effect/Context"
import type { Owner } from "../domain/ComputerMetadata.js"

/** Who this server is, as recorded on the computers it creates and read by the reaper. */
export class ServerIdentity extends Context.Tag("kilntainers/services/ServerIdentity")<ServerIdentity, {
  /** A random id per server process. */
  readonly instanceId: string
  /** This server process (host name, pid, start time). */
  readonly owner: Owner
  /** Whether the server process that owns a computer still runs (same host only; other hosts: assumed alive). */
  readonly alive: (owner: Owner) => boolean
}>() {}
