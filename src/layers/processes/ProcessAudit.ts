/**
 * The audit trail of processes (`process.started`, `process.ended`): who started what, where, and
 * how it ended. The audit log is optional (a library runtime without one records nothing).
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { AuditLogShape } from "../../services/AuditLog.js"
import type { ProcessHandle } from "../../services/Processes.js"

export interface StartedProcess {
  readonly session: string
  readonly computer: string
  /** The handle (`p1`, …). */
  readonly pid: string
  readonly command: string
  readonly argv: ReadonlyArray<string>
  readonly cwd: string
  readonly tty: boolean
  /** argv went through the shell (`command` is what the agent wrote). */
  readonly shell: boolean
}

const sessionOf = (session: string) => (session === "" ? undefined : session)

export interface ProcessAudit {
  /** Recorded once it runs, before its actor exists, so that its end (which may come at once) always follows it. */
  readonly started: (request: StartedProcess) => Effect.Effect<void>
  /** The spawn failed: the process never ran. */
  readonly failed: (request: StartedProcess, why: string) => Effect.Effect<void>
  readonly ended: (process: ProcessHandle, session: string) => Effect.Effect<void>
}

/** The recorder of a runtime; a no-op without an audit log. */
export const make = (audit: Option.Option<AuditLogShape>): ProcessAudit => {
  if (Option.isNone(audit)) return { started: () => Effect.void, failed: () => Effect.void, ended: () => Effect.void }
  const log = audit.value
  return {
    started: (request) =>
      log.record({
        type: "process.started",
        session: sessionOf(request.session),
        computer: request.computer,
        pid: request.pid,
        ...(request.shell ? { command: request.command } : { argv: request.argv }),
        cwd: request.cwd,
        tty: request.tty
      }),
    failed: (request, why) =>
      log.record({
        type: "process.ended",
        session: sessionOf(request.session),
        computer: request.computer,
        pid: request.pid,
        exitCode: null,
        durationMs: 0,
        stdoutBytes: 0,
        stderrBytes: 0,
        reason: `not started: ${why}`
      }),
    ended: (process, session) =>
      Effect.gen(function*() {
        const info = yield* process.info
        const totals = yield* process.totals
        const began = Date.parse(info.createdAt)
        const ended = info.endedAt === undefined ? began : Date.parse(info.endedAt)
        yield* log.record({
          type: "process.ended",
          session: sessionOf(session),
          computer: process.computerId,
          pid: process.id,
          exitCode: info.exitCode ?? null,
          signal: info.signal,
          durationMs: Number.isFinite(ended - began) ? Math.max(0, ended - began) : 0,
          stdoutBytes: totals.stdout,
          stderrBytes: totals.stderr,
          reason: info.reason
        })
      })
  }
}
