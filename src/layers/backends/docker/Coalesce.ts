/**
 * One read shared by callers that ask at once: at most one runs at a time, and a caller gets the
 * answer of a run that started after it asked (never an older one), so what it did before asking is
 * seen. Ten `computer_create` calls at once each list the engine's containers: with this, the engine
 * answers two listings instead of ten that it would serve one after another anyway.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"

export const coalesce = <A, E>(run: Effect.Effect<A, E>): Effect.Effect<Effect.Effect<A, E>> =>
  Effect.map(Effect.makeSemaphore(1), (lock) => {
    /** Runs started so far, and the outcome of the last one. */
    let started = 0
    let latest: Exit.Exit<A, E> | undefined
    return Effect.suspend(() => {
      const seen = started
      return lock.withPermits(1)(Effect.suspend(() => {
        // A run numbered after `seen` started after this caller asked.
        if (started > seen && latest !== undefined) return latest
        started++
        latest = undefined
        return Effect.onExit(run, (exit) =>
          Effect.sync(() => {
            // An interrupted run answers nobody else: the next caller runs again.
            if (Exit.isSuccess(exit) || !Cause.isInterruptedOnly(exit.cause)) latest = exit
          }))
      }))
    })
  })
