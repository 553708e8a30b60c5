/**
 * `Backend.connect` on E2B: the SDK's handle of one running sandbox and a watch on it, in the
 * Scope the kernel holds for one generation of the computer.
 *
 *   spawn  a process through envd (EnvdProcess.ts)
 *   lost   completes when the sandbox is gone or paused other than through the kernel. The watch
 *          asks E2B every `watchEveryMs`, once just after the end of the plan's runtime (`endsAt`),
 *          whenever a start fails, and a few times when a process's stream breaks. At the end of the runtime E2B
 *          deletes a temporary sandbox and pauses a permanent one; the reason then says so (a
 *          restart resumes a permanent one, with its files and a new period).
 *   publicUrl  E2B's own host of a port (`sandbox.getHost`, computed by the SDK without a request:
 *          `https://<port>-<sandboxId>.<domain>`), public while the sandbox runs: preview URLs.
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Connection, Instance } from "../../../services/Backend.js"
import type { E2BProvider } from "./E2BProvider.js"
import * as EnvdProcess from "./EnvdProcess.js"
import * as RuntimeCap from "./RuntimeCap.js"

export interface ConnectOptions {
  readonly provider: E2BProvider
  readonly home: string
  readonly maxRuntimeSec: number
  /** How often the watch asks E2B whether the sandbox still runs. */
  readonly watchEveryMs: number
  readonly requestTimeoutMs: number
  readonly outputApi: EnvdProcess.ExecContext["outputApi"]
  readonly scrub: (text: string) => string
}

/** How long after `endsAt` the watch looks whether E2B has ended the sandbox. */
export const END_GRACE_MS = 2000
/** How many times a broken stream has the sandbox looked at. */
const SETTLE_LOOKS = 5

export const connect = (options: ConnectOptions) => (target: Instance): Effect.Effect<Connection, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const { provider } = options
    const { envdVersion, instance, sandbox } = yield* provider.attach(target.providerId, false)
    const id = instance.providerId
    const endsAt = instance.endsAt
    const scope = yield* Effect.scope
    const lost = yield* Deferred.make<string>()
    const gone = Deferred.isDone(lost)

    /** Is the sandbox still there and running? */
    const check = Effect.gen(function*() {
      if (yield* gone) return
      const now = yield* Clock.currentTimeMillis
      const atEnd = endsAt !== undefined && now >= endsAt - END_GRACE_MS
      const seen = yield* provider.inspect(id).pipe(Effect.either)
      if (seen._tag === "Left") return yield* Effect.logDebug(`e2b backend: sandbox ${id}: ${seen.left.message}`)
      if (Option.isNone(seen.right)) {
        yield* Deferred.succeed(
          lost,
          atEnd ? RuntimeCap.endReason(id, "gone", options.maxRuntimeSec) : `its sandbox ${id} is gone (killed outside kilntainers or past its timeout)`
        )
      } else if (seen.right.value.state === "paused") {
        yield* Deferred.succeed(
          lost,
          atEnd
            ? RuntimeCap.endReason(id, "paused", options.maxRuntimeSec)
            : `its sandbox ${id} was paused outside kilntainers; computer_restart resumes it`
        )
      }
    })
    /**
     * After a broken stream: E2B still reports a sandbox that it is pausing or killing as running,
     * so a few more looks, a second apart, until it has settled.
     */
    const settle = check.pipe(
      Effect.zipRight(gone),
      Effect.repeat({ schedule: Schedule.spaced(Duration.seconds(1)), times: SETTLE_LOOKS - 1, until: (isGone) => isGone })
    )
    /** A check in the background: the caller (a failing spawn) does not wait for it. */
    const checkSoon = Effect.asVoid(Effect.forkIn(check, scope))

    /** Every `watchEveryMs`, and once just after the end of the runtime. */
    const nextDelay = Effect.map(Clock.currentTimeMillis, (now) => {
      const untilEnd = endsAt === undefined ? Number.POSITIVE_INFINITY : endsAt + END_GRACE_MS - now
      return Duration.millis(untilEnd > 0 ? Math.min(options.watchEveryMs, untilEnd) : options.watchEveryMs)
    })
    yield* Effect.gen(function*() {
      while (!(yield* gone)) {
        yield* Effect.sleep(yield* nextDelay)
        yield* check
      }
    }).pipe(Effect.forkScoped)

    const connection: Connection = {
      home: options.home,
      spawn: (spec) =>
        EnvdProcess.exec({
          sandbox,
          envdVersion,
          requestTimeoutMs: options.requestTimeoutMs,
          outputApi: options.outputApi,
          scrub: options.scrub,
          gone,
          onDropped: Effect.asVoid(settle)
        }, spec).pipe(Effect.tapErrorTag("SpawnFailed", () => checkSoon)),
      lost: Deferred.await(lost),
      publicUrl: (port) => Effect.sync(() => `https://${sandbox.getHost(port)}/`)
    }
    return connection
  }).pipe(Effect.withSpan("E2BBackend.connect"))
