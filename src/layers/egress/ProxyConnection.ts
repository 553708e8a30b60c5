/**
 * One connection of a computer to the egress proxy, as the proxy's parts share it: which computer
 * it belongs to, the fibers of its requests, the activity counter its idle check reads, and where an
 * allowed request goes once the policy has decided.
 */
import * as Effect from "effect/Effect"
import type { Duplex } from "node:stream"
import type { EgressEvent } from "../../services/AuditLog.js"
import type * as EgressPolicy from "./EgressPolicy.js"
import type * as HostPattern from "./HostPattern.js"

export interface Connection {
  readonly computer: string
  readonly socket: Duplex
  readonly run: <A, E>(effect: Effect.Effect<A, E>) => unknown
  /** Bumped by every chunk either way: the idle check compares it. */
  activity: number
  requests: number
}

/** Where an allowed request goes. */
export interface Destination {
  readonly target: HostPattern.Authority
  readonly address: string
  readonly decision: Extract<EgressPolicy.Decision, { readonly _tag: "Allowed" }>
  /** Over TLS to the upstream: an intercepted CONNECT. */
  readonly tls: boolean
}

/** An egress audit event of a connection: its computer is added when it is recorded. */
export type EgressRecord = Omit<EgressEvent, "type" | "computer">

/** Counts every chunk of `stream` as activity of the connection, and its bytes with `count`. */
export const watch = (connection: Connection, stream: NodeJS.EventEmitter, count?: (bytes: number) => void) =>
  stream.on("data", (chunk: Buffer) => {
    connection.activity++
    count?.(chunk.length)
  })

/** Resolves when the stream has closed (at once if it already has). */
export const closed = (stream: Duplex) =>
  Effect.async<void>((resume) => {
    if (stream.closed || stream.destroyed) return resume(Effect.void)
    const done = () => resume(Effect.void)
    stream.once("close", done)
    return Effect.sync(() => stream.off("close", done))
  })

/** A request target as the audit log keeps it: at most 512 characters. */
export const auditPath = (path: string) => (path.length > 512 ? `${path.slice(0, 512)}…` : path)
