/**
 * A warm pool: computers prepared ahead (created, started, connected: the agent running) and handed
 * out on the next `computer_create` or first call of a session that needs a new temporary computer,
 * then refilled in the background with bounded concurrency. A pool member is an ordinary temporary
 * computer of this server (its labels say so, plus the pool's mark), so the reaper removes it after
 * a crash like any other; handing it out gives it its real id at the provider (`Backend.adopt`).
 * Permanent computers are always made fresh: their identity must be found again from the
 * provider's labels alone, which a pooled computer cannot carry.
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import type { ComputerActor } from "../actors/ComputerActor.js"

/** A prepared computer and the scope it lives in. */
export interface Member {
  readonly actor: ComputerActor
  readonly scope: Scope.CloseableScope
}

export interface PoolStatus {
  /** Computers the pool keeps ready. */
  readonly size: number
  readonly ready: number
  /** Being prepared now. */
  readonly starting: number
  /** Handed out since the server started. */
  readonly handedOut: number
}

export interface WarmPool {
  /** A ready member, taken out of the pool at once (none when it is empty), so a caller can claim an id before yielding. */
  readonly take: () => Option.Option<Member>
  readonly status: Effect.Effect<PoolStatus>
}

/**
 * Keeps `size` members ready, preparing at most `concurrency` at once. `open` makes a member (a
 * computer in its own scope, created in the pool's name); a member that fails or is lost is dropped
 * and replaced, with a backoff while creation keeps failing.
 *
 * The refill waits until hand-outs pause for `quiet` (at most `quiet` × 10 after the first): making
 * a computer is the heaviest thing the engine and the server do, and a burst of hand-outs (ten
 * `computer_create` at once) would otherwise share the CPU with it — each hand-out's first command
 * waited behind the refill's container creation.
 */
export const make = (options: {
  readonly size: number
  readonly concurrency: number
  readonly open: Effect.Effect<Member>
  readonly quiet?: Duration.DurationInput | undefined
}): Effect.Effect<WarmPool, never, Scope.Scope> =>
  Effect.gen(function*() {
    const ready: Array<Member> = []
    let starting = 0
    let handedOut = 0
    const wake = yield* Queue.sliding<void>(1)
    const slots = yield* Effect.makeSemaphore(options.concurrency)

    yield* Effect.addFinalizer(() =>
      Effect.forEach(ready.splice(0), (member) => Scope.close(member.scope, Exit.void), { concurrency: "unbounded", discard: true })
    )

    /** Prepares one member; answers whether it became ready. */
    const prepare = slots.withPermits(1)(Effect.gen(function*() {
      const member = yield* options.open
      // Its readiness may also end by interruption (a shutdown while it is made): never ours to rethrow.
      const made = yield* Effect.exit(member.actor.ready)
      if (Exit.isFailure(made)) {
        if (!Cause.isInterruptedOnly(made.cause)) {
          yield* Effect.logWarning(`warm pool: cannot prepare a computer: ${Cause.squash(made.cause)}`)
        }
        yield* Scope.close(member.scope, Exit.void)
        return false
      }
      ready.push(member)
      return true
    })).pipe(Effect.ensuring(Effect.sync(() => starting--)))

    const missing = () => options.size - ready.length - starting

    /** After hand-outs: until none for `quiet`, bounded to ten pauses. */
    const quiet = Duration.decode(options.quiet ?? 0)
    let seen = 0
    const pause = Effect.gen(function*() {
      for (let waits = 0; waits < 10 && handedOut !== seen && Duration.toMillis(quiet) > 0; waits++) {
        seen = handedOut
        yield* Effect.sleep(quiet)
      }
      seen = handedOut
    })

    // Refill: start what is missing; while creation fails, back off (bounded, 1 s to 30 s).
    yield* Effect.gen(function*() {
      let failures = 0
      while (true) {
        yield* pause
        const wanted = missing()
        if (wanted > 0) {
          starting += wanted
          const results = yield* Effect.forEach(Array.from({ length: wanted }), () => prepare, { concurrency: "unbounded" })
          failures = results.every((ok) => ok) ? 0 : failures + 1
          if (failures > 0) yield* Effect.sleep(Duration.millis(Math.min(30_000, 1000 * 2 ** (failures - 1))))
          continue
        }
        yield* Queue.take(wake)
      }
    }).pipe(Effect.forkScoped)

    // Members lost while waiting are dropped (and replaced).
    yield* Effect.gen(function*() {
      for (const member of [...ready]) {
        if ((yield* member.actor.state) !== "running") {
          ready.splice(ready.indexOf(member), 1)
          yield* Scope.close(member.scope, Exit.void)
          yield* Queue.offer(wake, undefined)
        }
      }
    }).pipe(Effect.repeat(Schedule.spaced(Duration.seconds(5))), Effect.forkScoped)

    const take = () => {
      const member = ready.shift()
      if (member === undefined) return Option.none<Member>()
      handedOut++
      // A sliding queue of one: never blocks, never grows.
      Queue.unsafeOffer(wake, undefined)
      return Option.some(member)
    }

    return {
      take,
      status: Effect.sync(() => ({ size: options.size, ready: ready.length, starting, handedOut }))
    }
  })
