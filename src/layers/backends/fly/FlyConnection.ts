/**
 * A connection to one running Fly machine: the scoped state a computer needs while it runs —
 * its followed processes and the one loop that spends the machine's exec budget.
 *
 * Every exec call of a computer is a ROUND (FlyRound.ts, FlyScripts.ts): the operations queued
 * since the last round (starts, stdin, EOF, signals, cleanups) and a report of every followed
 * process, in one call. Operations wake the loop and take a token at once when the budget has
 * one; output polling takes a token only while one more stays in the bucket (reserve 1), on a
 * backoff schedule (pollMinMs after activity, doubling to pollMaxMs when quiet). So a computer
 * never makes more exec calls than its budget allows, however many processes, writes and
 * signals it has, and an interactive operation rarely waits behind a poll.
 *
 * A round can fail after it ran (its answer lost: a timeout, a proxy's 5xx). One that timed out is
 * sent again, at most ROUND_RETRIES times: every op is idempotent (a start or a write carries its
 * own id, a close or a cleanup repeats harmlessly; a signal may be delivered twice, as a retried
 * kill(1) would). One that fails for good fails its ops, and each start in it gets a cleanup in
 * the next round: the supervisor may have started the process, which must not run on untracked.
 *
 * `lost` completes when the machine went away other than through us: a round that fails on a
 * machine the provider no longer has started (asked, never inferred from the exec's status), the
 * supervisor gone, a different boot of the machine (restarted outside kilntainers), or the
 * provider's watcher (FlyWatcher.ts) seeing it stopped or destroyed. Restart, reset and removal
 * are the kernel's: it ends the processes and closes this connection first.
 */
import type * as Scope from "effect/Scope"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import { randomBytes } from "node:crypto"
import { type ProviderError, SpawnFailed } from "../../../domain/Errors.js"
import { type BackendProcess, checkSpec, type Connection, type SpawnSpec, throughEnv } from "../../../services/Backend.js"
import type { FlyApi } from "./FlyApi.js"
import { flyError, NAME } from "./FlyError.js"
import * as FlyHeld from "./FlyHeld.js"
import * as FlyProcess from "./FlyProcess.js"
import * as Round from "./FlyRound.js"
import * as Scripts from "./FlyScripts.js"
import * as FlySupervisor from "./FlySupervisor.js"
import type { RequestBudget } from "./RequestBudget.js"

export interface ConnectionTuning {
  /** Output polling: the delay after activity, and the longest when quiet. */
  readonly pollMinMs: number
  readonly pollMaxMs: number
  /** How long a round that starts, closes or signals processes waits for them to end, or for an answer to stdin (one round for a short command). */
  readonly startWaitMs: number
  /** A process not started this long after its round is reported as failed to start. */
  readonly startTimeoutMs: number
  /** `timeout` of an exec call, seconds. */
  readonly execTimeoutSeconds: number
  /** Most bytes of starts and stdin sent in one round, and of output read back per stream in one round (split between processes). */
  readonly roundInputBytes: number
  readonly roundOutputBytes: number
  /** How long a round waits for more operations once one arrived (stdin, then EOF: one round). */
  readonly gatherMs: number
  /** Bytes of each stream the machine keeps (FlyHeld.retention: a quarter head, the rest tail). */
  readonly retainBytes: number
}

export interface ConnectionOptions {
  readonly api: FlyApi
  readonly budget: RequestBudget
  readonly machineId: string
  readonly computerId: string
  /**
   * A temporary machine is removed or restarted next (the kernel releases a temporary computer by
   * removing it), so closing its connection costs no cleanup call for failed starts.
   */
  readonly disposable: boolean
  readonly home: string
  readonly tuning: ConnectionTuning
  /** Asks the provider about the machine: a sentence when it is gone or stopped. */
  readonly check: Effect.Effect<Option.Option<string>>
  /** Has the machine watched while the connection lives; `gone` is told what happened to it. */
  readonly watch: (machineId: string, gone: (why: string) => Effect.Effect<void>) => Effect.Effect<void, never, Scope.Scope>
}

interface Pending {
  readonly op: Round.Op
  /** Absent for cleanups that ride along with the next round. */
  readonly reply: Deferred.Deferred<void, ProviderError> | undefined
  /** A process that starts with this op: followed from the round that starts it. */
  readonly process?: FlyProcess.Followed
}

interface Starting {
  readonly started: Deferred.Deferred<void, string>
  deadline: number
}

const INBOX = 256
/** How many times a round that timed out is sent again before its ops fail. */
export const ROUND_RETRIES = 2

/** Prepares the machine (home, supervisor) and follows its processes until the Scope closes. */
export const connect = (options: ConnectionOptions): Effect.Effect<Connection, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const { api, budget, machineId, tuning } = options
    const connectionScope = yield* Effect.scope
    const prepared = yield* FlySupervisor.prepare(options)
    const tag = randomBytes(6).toString("hex")
    let counter = 0
    const followed = new Map<string, FlyProcess.Followed>()
    const starting = new Map<string, Starting>()
    const inbox = yield* Queue.bounded<Pending>(INBOX)
    const wakeSignal = yield* Queue.sliding<void>(1)
    const closed = yield* Deferred.make<string>()
    const lost = yield* Deferred.make<string>()
    let carry: Array<Pending> = []
    const kept = FlyHeld.retention(tuning.retainBytes)
    /** Why the connection ended; undefined while it runs. */
    let ended: string | undefined

    const wake = Queue.offer(wakeSignal, undefined).pipe(Effect.asVoid)
    /** An operation that cannot be done because the connection ended. */
    const gone = (why: string) => flyError(`reach machine ${machineId}`, "Unavailable", why)
    const unanswered = (why: string) =>
      Effect.gen(function*() {
        const all = [...carry, ...(yield* Queue.takeAll(inbox))]
        carry = []
        yield* Effect.forEach(all, (pending) => (pending.reply ? Deferred.fail(pending.reply, gone(why)) : Effect.void), { discard: true })
        for (const { started } of starting.values()) yield* Deferred.fail(started, why)
        starting.clear()
      })
    const endAll = Effect.sync(() => {
      for (const process of followed.values()) FlyProcess.finish(process)
      followed.clear()
    })
    /** The connection ends: every process ends, every waiting operation fails with `why`. */
    const close = (why: string) =>
      Effect.gen(function*() {
        if (ended !== undefined) return
        ended = why
        yield* Deferred.succeed(closed, why)
        yield* endAll
        yield* unanswered(why)
      })
    const markLost = (reason: string) =>
      Effect.gen(function*() {
        if (ended !== undefined) return
        yield* close(`computer ${options.computerId} is gone: ${reason}`)
        yield* Deferred.succeed(lost, reason)
      })

    /** Queues an op for the next round (taking a token at once) and wakes the loop. */
    const enqueue = (op: Round.Op, process?: FlyProcess.Followed) =>
      Effect.gen(function*() {
        const reply = yield* Deferred.make<void, ProviderError>()
        yield* Queue.offer(inbox, { op, reply, ...(process === undefined ? {} : { process }) })
        yield* wake
        return reply
      })
    // Whatever happens to the connection meanwhile, the caller gets an answer.
    const answer = (reply: Deferred.Deferred<void, ProviderError>) =>
      Effect.raceFirst(Deferred.await(reply), Effect.flatMap(Deferred.await(closed), (why) => Effect.fail(gone(why))))
    /** Runs an op in the next round and waits for it. */
    const submit = (op: Round.Op, process?: FlyProcess.Followed) => Effect.flatMap(enqueue(op, process), answer)
    /**
     * Queues stdin or EOF without waiting for its round (as a pipe takes bytes before the process
     * reads them), so stdin + EOF cost one round; past `roundInputBytes` queued, writers wait.
     * A failure reaches the process's next operation.
     */
    let queuedBytes = 0
    const queue = (op: Round.Op, onFailure: (error: ProviderError) => void) =>
      Effect.gen(function*() {
        const bytes = Round.opInputBytes(op)
        queuedBytes += bytes
        const reply = yield* enqueue(op)
        const done = Deferred.await(reply).pipe(
          Effect.tapError((error) => Effect.sync(() => onFailure(error))),
          Effect.ensuring(Effect.sync(() => (queuedBytes -= bytes)))
        )
        if (queuedBytes > tuning.roundInputBytes) return yield* answer(reply).pipe(Effect.ensuring(Effect.sync(() => (queuedBytes -= bytes))))
        yield* Effect.forkIn(Effect.ignore(done), connectionScope)
      })
    const post = (op: Round.Op) => Queue.offer(inbox, { op, reply: undefined }).pipe(Effect.asVoid)
    const current = () => ended === undefined

    // ---- one round ------------------------------------------------------------------------------
    const round = (chosen: ReadonlyArray<Pending>) =>
      Effect.gen(function*() {
        for (const pending of chosen) if (pending.process) followed.set(pending.process.dir, pending.process)
        const targets = [...followed.values()].filter((process) => !process.ended && FlyProcess.hasRoom(process))
        // Each stream of each process reads up to its share of the round's output (a 64 KiB floor, so none starves).
        const cap = Math.max(64 * 1024, Math.floor(tuning.roundOutputBytes / Math.max(1, targets.length)))
        const settles = chosen.some((pending) => pending.op._tag !== "Cleanup")
        const result = yield* FlySupervisor.round(
          options,
          chosen.map((pending) => pending.op),
          targets.map((process) => ({ dir: process.dir, outOffset: process.outOffset, errOffset: process.errOffset })),
          { cap, waitTicks: settles ? Math.round(tuning.startWaitMs / 10) : 0, ...kept },
          true
        )
        return { result, targets }
      })

    const dispatch = (chosen: ReadonlyArray<Pending>, result: Round.RoundResult, targets: ReadonlyArray<FlyProcess.Followed>) =>
      Effect.gen(function*() {
        const supervisor = result.supervisor
        if (!supervisor.alive) {
          return yield* markLost(
            `the kilntainers supervisor in machine ${machineId} is not running any more, so its processes cannot be followed` +
              (prepared.legacy ? " (this machine was made by an older kilntainers and its supervisor was started from an exec: factory-reset the computer)" : "")
          )
        }
        if (supervisor.boot !== prepared.boot) return yield* markLost(`machine ${machineId} restarted outside kilntainers; its processes ended`)
        yield* Effect.forEach(chosen, (pending, index) => {
          const failed = result.ops[index]
          if (pending.reply === undefined) return Effect.void
          return failed === undefined
            ? Deferred.succeed(pending.reply, undefined)
            : Deferred.fail(pending.reply, flyError(Round.describe(pending.op), "Failed", failed))
        }, { discard: true })
        const now = yield* Clock.currentTimeMillis
        let active = false
        for (const [index, process] of targets.entries()) {
          const observation = FlyProcess.observe(process, result.reports[index]!)
          if (observation.active) active = true
          const start = starting.get(process.dir)
          if (start !== undefined) {
            if (observation.fail !== undefined || (!observation.started && now > start.deadline)) {
              starting.delete(process.dir)
              followed.delete(process.dir)
              process.ended = true
              yield* Deferred.fail(start.started, observation.fail ?? `it did not start within ${Math.round(tuning.startTimeoutMs / 1000)} s`)
              yield* post({ _tag: "Cleanup", dir: process.dir })
              continue
            }
            if (!observation.started) continue
            starting.delete(process.dir)
            yield* Deferred.succeed(start.started, undefined)
          }
          yield* FlyProcess.deliver(process, observation)
          if (process.ended) followed.delete(process.dir)
        }
        return active
      })

    // ---- the loop ----------------------------------------------------------------------------------
    const loop = Effect.gen(function*() {
      const key = api.execBudget(machineId)
      let delay = tuning.pollMinMs
      let quiet = false
      let retries = 0
      while (current()) {
        carry.push(...(yield* Queue.takeAll(inbox)))
        if (carry.length === 0) {
          // Processes whose reader is behind wait for it (reading wakes us), not for a poll.
          const pollable = [...followed.values()].some((process) => !process.ended && FlyProcess.hasRoom(process))
          if (!pollable) {
            yield* Queue.take(wakeSignal)
            delay = tuning.pollMinMs
            continue
          }
          const woken = yield* Queue.take(wakeSignal).pipe(Effect.timeout(Duration.millis(delay)), Effect.option)
          if (Option.isSome(woken)) {
            delay = tuning.pollMinMs
            carry.push(...(yield* Queue.takeAll(inbox)))
          }
        }
        if (carry.some((pending) => pending.reply !== undefined)) {
          // Operations that come together (stdin, then EOF) go together.
          yield* Effect.sleep(Duration.millis(tuning.gatherMs))
          carry.push(...(yield* Queue.takeAll(inbox)))
          yield* budget.take(key)
        } else {
          // A quiet computer's polls leave a token for the next operation; after activity they do not wait for one.
          const got = yield* Effect.raceFirst(
            budget.take(key, { reserve: quiet ? 1 : 0 }).pipe(Effect.as(true)),
            Queue.take(wakeSignal).pipe(Effect.as(false))
          )
          if (!got) continue
        }
        // In order, up to the input cap (one op at least, so a large write still goes through).
        let bytes = 0
        let count = 0
        while (count < carry.length && (count === 0 || bytes + Round.opInputBytes(carry[count]!.op) <= tuning.roundInputBytes)) {
          bytes += Round.opInputBytes(carry[count]!.op)
          count++
        }
        const chosen = carry.slice(0, count)
        carry = carry.slice(count)
        if (chosen.length === 0 && ![...followed.values()].some((process) => !process.ended && FlyProcess.hasRoom(process))) continue
        // A round cut short by the connection closing: its lazy cleanups go back for the finalizer's last round.
        const outcome = yield* Effect.either(round(chosen)).pipe(
          Effect.onInterrupt(() => Effect.sync(() => {
            carry = [...chosen, ...carry]
          }))
        )
        if (Either.isLeft(outcome)) {
          const error = outcome.left
          if (error.reason === "Timeout" && retries < ROUND_RETRIES) {
            // Its answer, not necessarily its work, was lost: the same ops again (idempotent).
            retries++
            carry = [...chosen, ...carry]
            yield* Effect.logDebug(`fly backend: computer ${options.computerId}: ${error.message}; sending the round again`)
            continue
          }
          retries = 0
          yield* Effect.forEach(chosen, (pending) => (pending.reply ? Deferred.fail(pending.reply, error) : Effect.void), { discard: true })
          for (const pending of chosen) {
            if (pending.op._tag === "Start") carry.push({ op: { _tag: "Cleanup", dir: pending.op.dir }, reply: undefined })
            const start = pending.process && starting.get(pending.process.dir)
            if (start !== undefined && pending.process) {
              starting.delete(pending.process.dir)
              followed.delete(pending.process.dir)
              pending.process.ended = true
              yield* Deferred.fail(start.started, error.message)
            }
          }
          const why = yield* options.check
          if (Option.isSome(why)) return yield* markLost(why.value)
          yield* Effect.logDebug(`fly backend: computer ${options.computerId}: ${error.message}`)
          delay = tuning.pollMaxMs
          continue
        }
        retries = 0
        const active = yield* dispatch(chosen, outcome.right.result, outcome.right.targets)
        quiet = !active && chosen.every((pending) => pending.reply === undefined)
        delay = active ? tuning.pollMinMs : Math.min(Math.max(delay, tuning.pollMinMs, 1) * 2, tuning.pollMaxMs)
      }
    }).pipe(
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause) ? Effect.void : markLost(`internal error while following its processes: ${Cause.pretty(cause).slice(0, 500)}`)
      )
    )

    // Runs after the loop is interrupted (added first): what still runs runs on in the machine (it
    // holds its processes, for any server); the cleanups of failed starts go out; every stream ends.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        if (current() && !options.disposable) {
          const ops = [...carry, ...(yield* Queue.takeAll(inbox))].flatMap((pending) => (pending.reply === undefined ? [pending.op] : []))
          if (ops.length > 0) {
            yield* FlySupervisor.round(options, ops, [], { cap: 0, waitTicks: 0, headBytes: 0, tailBytes: 0 }, false).pipe(
              Effect.interruptible,
              Effect.timeout(Duration.seconds(tuning.execTimeoutSeconds + 5)),
              Effect.catchAll((error) => Effect.logDebug(`fly backend: cannot clean up in machine ${machineId}: ${String(error)}`))
            )
          }
        }
        yield* close(`the connection to machine ${machineId} was closed`)
      })
    )
    yield* Effect.forkScoped(loop)

    yield* options.watch(machineId, markLost)

    const spawn = (spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope> =>
      Effect.gen(function*() {
        const command = spec.argv.join(" ")
        if (ended !== undefined) return yield* gone(ended)
        yield* checkSpec(spec, FlyProcess.noTerminals, throughEnv(NAME))
        const dir = `${Scripts.PROCESS_ROOT}/${tag}-${++counter}`
        const process = FlyProcess.make(dir, tag)
        const started = yield* Deferred.make<void, string>()
        const now = yield* Clock.currentTimeMillis
        starting.set(dir, { started, deadline: now + tuning.startTimeoutMs })
        // The machine holds the process: the Scope's end lets go of it (it runs on, its record and
        // output stay for any server); only one that never started is cleaned up.
        let failed = false
        yield* Effect.addFinalizer(() =>
          Effect.suspend(() => {
            starting.delete(dir)
            FlyProcess.letGo(followed, process)
            return failed && current() ? post({ _tag: "Cleanup", dir }) : Effect.void
          })
        )
        yield* submit({ _tag: "Start", dir, spec: Round.startSpec(spec), meta: FlyHeld.meta(spec.label ?? command, spec.cwd) }, process).pipe(
          Effect.tapError(() => Effect.sync(() => (failed = true)))
        )
        const verdict = yield* Effect.either(Deferred.await(started))
        if (Either.isLeft(verdict)) {
          failed = true
          process.ended = true
          return yield* new SpawnFailed({ command, reason: verdict.left })
        }
        return FlyProcess.handle(process, operations)
      })

    const operations: FlyProcess.Operations = { submit: (op) => submit(op), queue, wake, current }
    const held = FlyHeld.make({
      api,
      machineId,
      boot: prepared.boot,
      retainBytes: tuning.retainBytes,
      execTimeoutSeconds: tuning.execTimeoutSeconds,
      followed,
      writer: tag,
      operations,
      closed: () => (ended === undefined ? undefined : gone(ended))
    })

    return { home: options.home, spawn, lost: Deferred.await(lost), held }
  })
