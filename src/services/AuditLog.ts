/**
 * The audit trail (`--audit-log PATH`): what happened to computers, processes, files and the
 * network, for a person reviewing an agent's work afterwards. Recording never fails and never waits
 * for the disk; secrets of the server are redacted before anything is kept.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"

/** Who asked: the MCP session, when there is one (library callers have none). */
interface Attribution {
  readonly session?: string | undefined
  readonly computer: string
}

export interface ProcessStarted extends Attribution {
  readonly type: "process.started"
  readonly pid: string
  /** The command string (through the shell) or the argv. */
  readonly command?: string | undefined
  readonly argv?: ReadonlyArray<string> | undefined
  readonly cwd?: string | undefined
  readonly tty?: boolean | undefined
}

export interface ProcessEnded extends Attribution {
  readonly type: "process.ended"
  readonly pid: string
  readonly exitCode: number | null
  readonly signal?: string | undefined
  readonly durationMs: number
  readonly stdoutBytes: number
  readonly stderrBytes: number
  /** Why it ended when we ended it: timeout, killed, computer restarted or deleted. */
  readonly reason?: string | undefined
}

export interface FileWritten extends Attribution {
  readonly type: "file.written"
  readonly path: string
  readonly bytes: number
  /** Appended to the file rather than replacing it. */
  readonly append?: boolean | undefined
}

export interface ComputerEvent extends Attribution {
  readonly type: "computer"
  readonly event: "created" | "attached" | "recovered" | "adopted" | "restarted" | "reset" | "deleted" | "lost" | "released"
  readonly backend?: string | undefined
  readonly detail?: string | undefined
}

export interface EgressEvent {
  readonly type: "egress"
  readonly computer: string
  readonly host: string
  readonly port: number
  /** CONNECT for a tunnel, the request's method for plain HTTP and intercepted requests. */
  readonly method: string
  readonly decision: "allowed" | "denied"
  /** The allow rule that matched, or why it was denied. */
  readonly rule: string
  /** Requests to an intercepted host: the path, and the names of the headers injected (never their values). */
  readonly path?: string | undefined
  readonly injected?: ReadonlyArray<string> | undefined
  readonly intercepted?: boolean | undefined
  readonly address?: string | undefined
  readonly status?: number | undefined
  readonly bytesUp: number
  readonly bytesDown: number
  readonly durationMs?: number | undefined
  readonly error?: string | undefined
}

/** A preview URL made, revoked or ended, or a request on the preview origin refused. */
export interface PreviewEvent extends Attribution {
  readonly type: "preview"
  readonly event: "exposed" | "unexposed" | "expired" | "refused"
  readonly preview?: string | undefined
  readonly port?: number | undefined
  /** Why a request was refused. */
  readonly reason?: string | undefined
}

export type AuditEvent = ProcessStarted | ProcessEnded | FileWritten | ComputerEvent | EgressEvent | PreviewEvent

/** An event as kept and written: with its time (ISO 8601, from the Clock) and redacted. */
export type AuditEntry = AuditEvent & { readonly time: string }

export interface AuditLogShape {
  /** Keeps the event (redacted) and queues it for the file; never fails, never waits. */
  readonly record: (event: AuditEvent) => Effect.Effect<void>
  /** The most recent entries (oldest first) of these computers (all when undefined), at most `limit`. */
  readonly recent: (computers: ReadonlySet<string> | undefined, limit: number) => Effect.Effect<ReadonlyArray<AuditEntry>>
}

export class AuditLog extends Context.Tag("kilntainers/services/AuditLog")<AuditLog, AuditLogShape>() {}
