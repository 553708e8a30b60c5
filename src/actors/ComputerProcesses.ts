/**
 * The processes of one computer, as its actor keeps them: a FiberMap of their lifetimes (a process
 * belongs to its computer, never to the request that started it), the live ones, and the few that
 * ended lately (a loss noticed moments after their end explains it). Where the computer holds its
 * processes (Connection.held), a process is named by the computer's handle (`p<handle>`), and the
 * ones this server did not start (another server's, or this one's before it restarted) are
 * followed on demand (`follow`), under the same handles.
 */
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberMap from "effect/FiberMap"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import { type ProviderError, SpawnFailed } from "../domain/Errors.js"
import type { Connection, HeldProcess, HeldProcesses } from "../services/Backend.js"
import type { FollowOptions, ProcessRequest } from "../services/Computers.js"
import type { ProcessHandle } from "../services/Processes.js"
import * as Spans from "../services/Spans.js"
import * as ProcessActor from "./ProcessActor.js"
import { HELD_WINDOW } from "./ProcessOutput.js"

/** A loss noticed this soon after a process ended explains its end; at most this many are kept. */
const RECENT_MS = 5_000
const RECENT_KEPT = 64
/**
 * Resumes once the work already under way has run (the next turn of the event loop): a process's
 * end is answered to the calls waiting for it first, then its lifetime is wound up (its watch let
 * go, its scope closed, its entry moved to the recent ones), which no answer waits for.
 */
const afterReplies = Effect.async<void>((resume) => {
  const immediate = setImmediate(() => resume(Effect.void))
  return Effect.sync(() => clearImmediate(immediate))
})
/** How long an attached terminal may take to replay what its computer held before it answers. */
const REPLAY_BOUND = Duration.seconds(10)

export interface ComputerProcesses {
  /** Starts a process on the connection; answers once it runs (its lifetime is the FiberMap's). */
  readonly spawn: (target: Connection, request: ProcessRequest) => Effect.Effect<ProcessHandle, SpawnFailed | ProviderError>
  /** SIGTERM to every live process, a bounded grace, then the rest are killed; `ps` says why. */
  readonly endAll: (reason: string) => Effect.Effect<void>
  /**
   * The computer leaves this server: its processes end (`endAll`), unless the computer holds them
   * (`keep`: a permanent computer's agent), then they are let go without a signal and run on after
   * this server; its records of them end here, saying why.
   */
  readonly release: (reason: string, keep: boolean) => Effect.Effect<void>
  /** Ends every process now, because the computer was lost; those that ended lately learn why too. */
  readonly lost: (reason: string) => Effect.Effect<void>
  /** How many still run. */
  readonly running: Effect.Effect<number>
  /**
   * The processes the computer holds that this server does not follow yet, followed from now on
   * (none where the computer does not hold its processes).
   */
  readonly follow: (target: Connection, options: FollowOptions) => Effect.Effect<ReadonlyArray<ProcessHandle>, ProviderError>
  /** The computer's record of process `pN`, if it holds its processes (read on demand: tasks answered by any replica). */
  readonly heldRecord: (target: Connection, processId: string) => Effect.Effect<HeldProcess | undefined, ProviderError>
}

export const make = (options: {
  readonly computerId: () => string
  readonly backend: string
  readonly killGraceMs: number
}): Effect.Effect<ComputerProcesses, never, Scope.Scope> =>
  Effect.gen(function*() {
    const live = new Map<string, ProcessHandle>()
    const recent: Array<{ readonly process: ProcessHandle; readonly endedAt: number }> = []
    const supervisor = yield* FiberMap.make<string>()
    /** Why the processes being stopped now are stopped (their spans end before their exit is recorded). */
    let stopping: string | undefined
    /** The handles this server follows or followed, in the computer's agent `boot`. */
    let boot: string | undefined
    const followed = new Set<number>()
    const followedIn = (held: HeldProcesses) => {
      if (held.boot !== boot) {
        boot = held.boot
        followed.clear()
      }
      return followed
    }

    const stopAll = (reason: string) =>
      Effect.suspend(() => {
        stopping = reason
        return FiberMap.clear(supervisor)
      }).pipe(Effect.ensuring(Effect.sync(() => {
        stopping = undefined
      })))

    const endAll = (reason: string) =>
      Effect.gen(function*() {
        yield* Effect.forEach([...live.values()], (actor) =>
          actor.noteReason(reason).pipe(
            Effect.zipRight(actor.signal("SIGTERM")),
            Effect.ignore,
            Effect.zipRight(actor.exited)
          ), { concurrency: "unbounded", discard: true }).pipe(
            Effect.timeout(Duration.millis(options.killGraceMs)),
            Effect.interruptible,
            Effect.ignore
          )
        yield* stopAll(reason)
      })

    const lost = (reason: string) =>
      Effect.gen(function*() {
        const why = `computer lost: ${reason}`
        yield* Effect.forEach([...live.values()], (actor) => actor.noteReason(why), { discard: true })
        const now = yield* Clock.currentTimeMillis
        yield* Effect.forEach(
          recent.filter((ended) => now - ended.endedAt <= RECENT_MS),
          (ended) => ended.process.explainEnd(why),
          { discard: true }
        )
        yield* stopAll(why)
      })

    const forget = (id: string) =>
      Effect.flatMap(Clock.currentTimeMillis, (endedAt) =>
        Effect.sync(() => {
          const actor = live.get(id)
          live.delete(id)
          if (actor === undefined) return
          // Older ones can explain nothing: let them (and their output logs) go, not wait for 64 more.
          while (recent.length > 0 && (recent.length >= RECENT_KEPT || endedAt - recent[0]!.endedAt > RECENT_MS)) recent.shift()
          recent.push({ process: actor, endedAt })
        }))

    const spawn = (target: Connection, request: ProcessRequest) =>
      Effect.gen(function*() {
        const computerId = options.computerId()
        const started = yield* Deferred.make<ProcessHandle, SpawnFailed | ProviderError>()
        // The process's span runs from spawn to exit; output of children that outlive it may follow.
        const untilExit = Effect.gen(function*() {
          const held = target.held
          const process = yield* target.spawn(request.spec)
          // `follow` must not follow this one too.
          if (held !== undefined && process.handle !== undefined) followedIn(held).add(process.handle)
          const handle = process.handle
          const id = held === undefined || handle === undefined ? request.id : `p${handle}`
          if (id !== request.id) yield* Spans.annotate(() => ({ [Spans.Attr.processId]: id }))
          yield* request.onStart?.(id) ?? Effect.void
          const actor = yield* ProcessActor.make(process, {
            id,
            computerId,
            command: request.command,
            cwd: request.spec.cwd,
            tty: request.spec.tty,
            // Where the computer keeps the output, the actor keeps only windows in front of it.
            headBytes: held === undefined ? request.headBytes : Math.min(request.headBytes, HELD_WINDOW.headBytes),
            tailBytes: held === undefined ? request.tailBytes : Math.min(request.tailBytes, HELD_WINDOW.tailBytes),
            mailboxCapacity: request.mailboxCapacity,
            outputLimit: request.outputLimit,
            onExit: request.onExit,
            store: held === undefined || handle === undefined
              ? undefined
              : (stream, from, most) => held.read(handle, stream, from, most),
            why: held === undefined || handle === undefined ? undefined : recordedWhy(held, handle)
          })
          live.set(request.id, actor)
          yield* Deferred.succeed(started, actor)
          yield* actor.exited
          yield* Spans.processEnded(yield* actor.info, yield* actor.totals)
          return actor
        }).pipe(Spans.process({ id: request.id, computerId, backend: options.backend, command: request.command, spec: request.spec }, () => stopping))
        // Stopped before it started (a restart, delete or loss while the provider was spawning it):
        // the caller learns why, rather than inheriting the interruption.
        const notStarted = (cause: Cause.Cause<SpawnFailed | ProviderError>) =>
          Cause.isInterruptedOnly(cause)
            ? Cause.fail(new SpawnFailed({ command: request.command, reason: `${stopping ?? `computer ${computerId} stopped`} before it started` }))
            : cause
        const lifetime = Effect.flatMap(untilExit, (actor) => Effect.zipRight(afterReplies, actor.closed)).pipe(
          Effect.scoped,
          Effect.onExit((exit) =>
            Effect.zipRight(forget(request.id), Exit.isFailure(exit) ? Deferred.failCause(started, notStarted(exit.cause)) : Effect.void)
          )
        )
        yield* FiberMap.run(supervisor, request.id, lifetime)
        return yield* Deferred.await(started)
      })

    /** The computer's record of its process `pN`, read on demand. */
    const recordOf = (held: HeldProcesses, processId: string) =>
      Effect.map(held.list, (records) => records.find((record) => `p${record.handle}` === processId))

    /** Why a process ends, as the computer records it for every server. */
    const recordedWhy = (held: HeldProcesses, handle: number) => ({
      tell: (text: string) => held.note(handle, text),
      ask: recordOf(held, `p${handle}`).pipe(
        Effect.map((record) => (record === undefined || record.note === "" ? undefined : record.note)),
        Effect.orElseSucceed(() => undefined)
      )
    })

    const replayed = (actor: ProcessActor.ProcessActor, bytes: number) =>
      actor.totals.pipe(
        Effect.repeat({ schedule: Schedule.spaced(Duration.millis(10)), until: (totals) => totals.stdout >= bytes }),
        Effect.timeout(REPLAY_BOUND),
        Effect.ignore
      )

    /** Follows one process the computer holds, as an actor in the FiberMap; answers once it does. */
    const adopt = (held: HeldProcesses, record: HeldProcess, follow: FollowOptions) =>
      Effect.gen(function*() {
        const key = `${held.boot}/${record.handle}`
        const started = yield* Deferred.make<ProcessHandle, ProviderError>()
        // A terminal's screen is rebuilt from its retained output; a pipe's earlier bytes stay in the store.
        const from = record.tty ? { stdout: 0, stderr: 0 } : record.totals
        const lifetime = Effect.gen(function*() {
          const attached = yield* held.attach(record.handle, from)
          const now = attached.held
          const actor = yield* ProcessActor.make(attached.process, {
            id: `p${record.handle}`,
            computerId: options.computerId(),
            command: now.command,
            cwd: now.cwd,
            tty: now.tty ? now.size : undefined,
            headBytes: HELD_WINDOW.headBytes,
            tailBytes: HELD_WINDOW.tailBytes,
            mailboxCapacity: follow.mailboxCapacity,
            onExit: follow.onExit,
            store: (stream, at, most) => held.read(record.handle, stream, at, most),
            why: recordedWhy(held, record.handle),
            adopted: { startedAt: now.startedAt, endedAt: now.endedAt, from }
          })
          if (now.note !== "") yield* actor.noteReason(now.note)
          // A terminal answers once its screen has what the computer held when it was attached
          // (bounded: a stalled replay gives the screen as far as it got).
          if (record.tty) yield* replayed(actor, now.totals.stdout)
          live.set(key, actor)
          yield* Deferred.succeed(started, actor)
          yield* actor.closed
        }).pipe(
          Effect.scoped,
          Effect.onExit((exit) => Effect.zipRight(forget(key), Exit.isFailure(exit) ? Deferred.failCause(started, exit.cause) : Effect.void))
        )
        yield* FiberMap.run(supervisor, key, lifetime)
        return yield* Deferred.await(started)
      })

    const follow = (target: Connection, options: FollowOptions) =>
      Effect.gen(function*() {
        const held = target.held
        if (held === undefined) return []
        const records = yield* held.list
        const known = followedIn(held)
        // A spawn under way may have its handle, not yet known here: the connection follows it already.
        const fresh = records.filter((record) => !known.has(record.handle) && !held.following(record.handle))
        for (const record of fresh) known.add(record.handle)
        // One that cannot be attached (it went meanwhile, or a step stopped it) is tried again by a
        // later call; the caller's call goes on either way.
        const adopted = yield* Effect.forEach(fresh, (record) => Effect.exit(adopt(held, record, options)), { concurrency: 8 })
        adopted.forEach((result, i) => {
          if (Exit.isFailure(result)) known.delete(fresh[i]!.handle)
        })
        return adopted.flatMap((result) => (Exit.isSuccess(result) ? [result.value] : []))
      })

    const running = Effect.suspend(() => Effect.forEach([...live.values()], (actor) => actor.status)).pipe(
      Effect.map((statuses) => statuses.filter((status) => status === "running").length)
    )

    const release = (reason: string, keep: boolean) => {
      if (!keep) return endAll(reason)
      const why = `${reason}; it runs on in the computer`
      return Effect.zipRight(Effect.forEach([...live.values()], (actor) => actor.noteReason(why), { discard: true }), stopAll(why))
    }

    const heldRecord = (target: Connection, processId: string) =>
      target.held === undefined ? Effect.succeed(undefined) : recordOf(target.held, processId)

    return { spawn, endAll, release, lost, running, follow, heldRecord }
  })
