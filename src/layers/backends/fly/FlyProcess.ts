/**
 * One process of a Fly computer, followed through its directory: what we know of it (offsets,
 * pid, whether it exited), how a round's report turns into its events, and the BackendProcess
 * handed to the runtime, whose stdin writes, EOF and signals are operations of the computer's
 * next round (FlyConnection.ts).
 *
 * Output reaches the runtime through the process's ProcessEvents (the one bounded constructor of
 * an event stream). When its reader falls behind, ProcessEvents says `hold`: the connection then
 * leaves the process out of its reports, so a slow reader holds back its own process and no other
 * (the output waits in the machine's files); reading again wakes the connection.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { ProviderError } from "../../../domain/Errors.js"
import { Unsupported } from "../../../domain/Errors.js"
import { normalizeSignal, signalName, signalNumber } from "../../../domain/Signals.js"
import type { BackendProcess, ExitInfo, ProcessEvent, SpawnSpec } from "../../../services/Backend.js"
import { ProcessEvents } from "../ProcessEvents.js"
import { flyError, NAME } from "./FlyError.js"
import type * as Round from "./FlyRound.js"

/** The fly backend's own limit on a spec (after `specProblem`): the Machines exec API has no TTY. */
export const noTerminals = (spec: SpawnSpec): string | undefined =>
  spec.tty === undefined ? undefined : "the fly backend has no terminals (the Machines exec API has no TTY); run it without tty"

/** Most stdin bytes sent in one operation (base64 grows it by a third). */
export const WRITE_CHUNK = 512 * 1024

export interface Followed {
  readonly dir: string
  /** Its handle in the machine (known from the round that started it, or given when attached). */
  handle: number | undefined
  /** Names this server's stdin writes apart from another server's (the round keeps the last id). */
  readonly writer: string
  readonly events: ProcessEvents
  outOffset: number
  errOffset: number
  pid: number | null
  /** The process group; known once the supervisor started the runner. */
  pgid: number | undefined
  exited: boolean
  ended: boolean
  stdinClosed: boolean
  writes: number
  /** Held back because its reader is behind. */
  held: boolean
  /** The reader caught up after a hold: its next read wakes the connection. */
  released: boolean
  readonly delivered: Set<number>
  lastSignal: string | undefined
}

export const make = (dir: string, writer: string, from: { readonly stdout: number; readonly stderr: number } = { stdout: 0, stderr: 0 }, handle?: number): Followed => {
  const events = new ProcessEvents()
  const process: Followed = {
    dir,
    handle,
    writer,
    events,
    outOffset: from.stdout,
    errOffset: from.stderr,
    pid: null,
    pgid: undefined,
    exited: false,
    ended: false,
    stdinClosed: false,
    writes: 0,
    held: false,
    released: false,
    delivered: new Set(),
    lastSignal: undefined
  }
  events.hold = (hold) => {
    process.held = hold
    if (!hold) process.released = true
  }
  return process
}

/** Whether a report of the process can be taken now (its reader is not behind). */
export const hasRoom = (process: Followed): boolean => !process.held

const decodeStatus = (delivered: ReadonlySet<number>, status: number): ExitInfo =>
  status > 128 && delivered.has(status - 128)
    ? { exitCode: null, signal: signalName(status - 128) ?? `SIG${status - 128}` }
    : { exitCode: status, signal: null }

/**
 * How a process ended as a report shows it, or undefined while it runs: its status (a signal when
 * one was sent to it, by this server or another), else its runner's status (killed with its
 * group), else — the runner vanished without its supervisor noticing — SIGKILL.
 */
export const exitOf = (report: Round.Report, delivered: ReadonlySet<number> = new Set(), lastSignal?: string): ExitInfo | undefined => {
  const sent = new Set(delivered)
  for (const name of report.signals) {
    const n = signalNumber(`SIG${name}`)
    if (n !== undefined) sent.add(n)
  }
  if (report.status !== undefined) return decodeStatus(sent, report.status)
  if (report.runnerStatus !== undefined) {
    return { exitCode: null, signal: report.runnerStatus > 128 ? (signalName(report.runnerStatus - 128) ?? "SIGKILL") : "SIGKILL" }
  }
  if (!report.runnerAlive && report.fail === undefined && report.pgid !== undefined) return { exitCode: null, signal: lastSignal ?? "SIGKILL" }
  return undefined
}

/** What a report means for a process. */
export interface Observation {
  readonly events: ReadonlyArray<ProcessEvent>
  /** All output read, the process and every holder of its output gone: the stream ends. */
  readonly end: boolean
  /** New output arrived. */
  readonly active: boolean
  /** The runner has started (or the process could not start: `fail`). */
  readonly started: boolean
  readonly fail: string | undefined
}

/**
 * Applies a report: new output, then Exit once the output is read to the end, then the end. The
 * status comes from the runner when it recorded one, else from the runner's own status (killed
 * with its group), else — the runner vanished without its supervisor noticing — SIGKILL.
 */
export const observe = (process: Followed, report: Round.Report): Observation => {
  if (report.pid !== undefined) process.pid = report.pid
  if (report.pgid !== undefined) process.pgid = report.pgid
  if (report.handle !== undefined) process.handle = report.handle
  const events: Array<ProcessEvent> = []
  // Bytes that fell out of the machine's retention before this reader got them are counted, not lost silently.
  if (report.out.byteLength > 0) {
    const skipped = Math.max(0, report.outStart - process.outOffset)
    events.push({ _tag: "Stdout", data: report.out, skipped })
    process.outOffset += skipped + report.out.byteLength
  }
  if (report.err.byteLength > 0) {
    const skipped = Math.max(0, report.errStart - process.errOffset)
    events.push({ _tag: "Stderr", data: report.err, skipped })
    process.errOffset += skipped + report.err.byteLength
  }
  const active = events.length > 0
  const started = report.pgid !== undefined || report.fail !== undefined || report.status !== undefined
  const drained = process.outOffset >= report.outSize && process.errOffset >= report.errSize
  if (!process.exited && drained && started) {
    const exit = exitOf(report, process.delivered, process.lastSignal)
    if (exit !== undefined) {
      process.exited = true
      events.push({ _tag: "Exit", exit })
    }
  }
  const end = process.exited && drained && !report.groupAlive
  return { events, end, active, started, fail: report.fail }
}

/** Delivers an observation to the process's reader (never waits for it); ends the stream when it is over. */
export const deliver = (process: Followed, observation: Observation) =>
  Effect.sync(() => {
    if (process.ended) return
    for (const event of observation.events) {
      if (event._tag === "Stdout") process.events.data(event.data, event.skipped)
      else if (event._tag === "Stderr") process.events.stderr(event.data, event.skipped)
      else process.events.exit(event.exit)
    }
    if (observation.end) finish(process)
  })

/** Ends the process's stream (after an Exit; SIGKILL when none was seen): lost, restarted, closed. */
export const finish = (process: Followed, exit: ExitInfo = { exitCode: null, signal: "SIGKILL" }) => {
  if (process.ended) return
  process.ended = true
  if (!process.exited) {
    process.exited = true
    process.events.exit(exit)
  }
  process.events.end()
}

/** The connection stops following the process (it runs on in the machine) and its stream ends. */
export const letGo = (followed: Map<string, Followed>, process: Followed) => {
  if (followed.get(process.dir) === process) followed.delete(process.dir)
  finish(process)
}

/** What a process needs from its connection. */
export interface Operations {
  /** Runs the op in the next round (taking a token at once when there is one) and waits for it. */
  readonly submit: (op: Round.Op) => Effect.Effect<void, ProviderError>
  /** Queues the op for the next round without waiting for it (unless too much is queued); a failure goes to `onFailure`. */
  readonly queue: (op: Round.Op, onFailure: (error: ProviderError) => void) => Effect.Effect<void, ProviderError>
  /** Nudges the connection: a held-back process has room again. */
  readonly wake: Effect.Effect<void>
  /** The connection is still the one the process was started in (not restarted, lost or closed). */
  readonly current: () => boolean
}

/** The runtime's handle on a followed process. */
export const handle = (process: Followed, operations: Operations): BackendProcess => {
  /** A queued stdin operation that failed; the process's next operation reports it. */
  let failure: ProviderError | undefined
  const onFailure = (error: ProviderError) => {
    failure ??= error
  }
  const stillThere = (what: string) =>
    Effect.suspend(() => {
      if (failure !== undefined) return Effect.fail(failure)
      return process.exited || process.ended || !operations.current()
        ? Effect.fail(flyError(what, "NotFound", "the process has ended"))
        : Effect.void
    })
  const write = (data: Uint8Array) =>
    Effect.gen(function*() {
      yield* stillThere("write to stdin")
      if (process.stdinClosed) return yield* flyError("write to stdin", "Invalid", "it is closed")
      for (let at = 0; at < data.byteLength; at += WRITE_CHUNK) {
        const chunk = data.subarray(at, Math.min(data.byteLength, at + WRITE_CHUNK))
        // Copied: the caller may reuse its buffer once write returns, and the round may run later.
        yield* operations.queue({ _tag: "Write", dir: process.dir, wid: `${process.writer}-${++process.writes}`, data: Uint8Array.from(chunk) }, onFailure)
      }
    })
  const closeStdin = Effect.gen(function*() {
    if (failure !== undefined) return yield* Effect.fail(failure)
    if (process.stdinClosed || process.exited || process.ended || !operations.current()) return
    process.stdinClosed = true
    yield* operations.queue({ _tag: "Close", dir: process.dir }, onFailure)
  })
  const signal = (name: string) =>
    Effect.gen(function*() {
      const canonical = normalizeSignal(name)
      if (Either.isLeft(canonical)) return yield* flyError(`send ${name}`, "Invalid", canonical.left)
      if (process.exited || process.ended || !operations.current()) return
      const n = signalNumber(canonical.right)
      if (n !== undefined) process.delivered.add(n)
      process.lastSignal = canonical.right
      yield* operations.submit({ _tag: "Signal", dir: process.dir, signal: canonical.right })
    })
  // A read after a hold wakes the connection, which reports the process again.
  const pull = Effect.flatMap(process.events.pull, (chunk) =>
    Effect.suspend(() => {
      if (!process.released) return Effect.succeed(chunk)
      process.released = false
      return Effect.as(operations.wake, chunk)
    }))
  return {
    get pid() {
      return process.pid
    },
    get handle() {
      return process.handle
    },
    pull,
    write,
    closeStdin,
    signal,
    resize: () => Effect.fail(new Unsupported({ backend: NAME, feature: "resize (no terminals: the Machines exec API has no TTY)" }))
  }
}
