/**
 * Lease renewal or keep-alive: while its actor holds a computer, the provider extends the
 * computer's life every `everyMs` of the Clock. A failed renewal is logged and tried again next time.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import type { Instance, Renewal } from "../services/Backend.js"
import * as Spans from "../services/Spans.js"

export const keep = (
  renewal: Renewal,
  computer: {
    /** The instance to renew now, if the computer runs. */
    readonly current: () => Instance | undefined
    /** The provider's answer, for the instance it renewed (the actor writes it into its state). */
    readonly renewed: (before: Instance, after: Instance) => Effect.Effect<void>
    readonly traced: () => Spans.Attributes
    readonly label: () => string
  }
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    const current = computer.current()
    if (current === undefined) return
    const now = yield* Clock.currentTimeMillis
    yield* renewal.renew(current, now + renewal.leaseMs).pipe(
      Effect.tap((renewed) => computer.renewed(current, renewed)),
      Spans.lifecycle("renew", computer.traced, { root: true }),
      Effect.catchAll((error) => Effect.logWarning(`${computer.label()}: cannot renew its lease: ${error.message}`))
    )
  }).pipe(
    Effect.repeat(Schedule.spaced(Duration.millis(renewal.everyMs))),
    Effect.delay(Duration.millis(renewal.everyMs)),
    Effect.forkScoped,
    Effect.asVoid
  )
