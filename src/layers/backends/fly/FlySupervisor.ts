/**
 * Talking to the supervisor of a machine (FlyScripts.ts). Meeting it: the home directory exists
 * and the supervisor runs; which boot of the machine it is (a later round that sees another boot
 * knows the machine restarted without us) and whether it had to be started from an exec (a machine
 * made by an older kilntainers, whose main process is not the supervisor). And one ROUND exec.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schedule from "effect/Schedule"
import type { ProviderError } from "../../../domain/Errors.js"
import type { FlyApi } from "./FlyApi.js"
import { flyError, toProviderError } from "./FlyError.js"
import * as Round from "./FlyRound.js"
import * as Scripts from "./FlyScripts.js"

export interface Prepared {
  readonly boot: string
  /** The supervisor was started from an exec: it lives only as long as flyd lets an exec's leftovers live. */
  readonly legacy: boolean
}

/** Home and supervisor; asked again while the machine settles after a start. */
export const prepare = (options: {
  readonly api: FlyApi
  readonly machineId: string
  readonly computerId: string
  readonly home: string
  readonly tuning: { readonly execTimeoutSeconds: number }
}): Effect.Effect<Prepared, ProviderError> =>
  Effect.gen(function*() {
    const answer = yield* options.api.exec(options.machineId, ["/bin/sh", "-c", Scripts.PREPARE, "kt", options.home], {
      timeoutSeconds: options.tuning.execTimeoutSeconds,
      stdin: Scripts.SUPERVISOR
    }).pipe(
      // Right after a start the machine may not take exec calls yet: asked again, for about 10 s.
      Effect.retry({
        schedule: Schedule.spaced(Duration.millis(500)).pipe(Schedule.intersect(Schedule.recurs(20))),
        while: (error) => error.reason === "Conflict" || error.reason === "Invalid" || error.reason === "NotFound" || error.reason === "Unavailable"
      }),
      Effect.mapError((error) => toProviderError(error, `prepare machine ${options.machineId}`))
    )
    const line = (answer.stdout ?? "").trim()
    const said = /^([OL]) (\S+) (\S+)$/.exec(line)
    if (answer.exit_code !== 0 || !said) {
      return yield* flyError(
        `prepare machine ${options.machineId}`,
        "Failed",
        (answer.stderr ?? "").trim() || line || `exit code ${answer.exit_code}`
      )
    }
    if (said[3] !== Scripts.SUPERVISOR_VERSION) {
      return yield* flyError(
        `prepare machine ${options.machineId}`,
        "Protocol",
        `it runs kilntainers supervisor protocol ${said[3]}, this server speaks ${Scripts.SUPERVISOR_VERSION}: restart the computer (or factory-reset it)`
      )
    }
    const legacy = said[1] === "L"
    if (legacy) {
      yield* Effect.logWarning(
        `fly backend: machine ${options.machineId} (computer ${options.computerId}) was made without the kilntainers supervisor as its main process (an older kilntainers); it was started from an exec. If Fly ends it with that exec, the computer is reported lost: factory-reset it to get the supervisor as the machine's main process.`
      )
    }
    return { boot: said[2]!, legacy }
  })

/** One ROUND exec (FlyRound.ts): its ops and reports, sent and decoded. `taken`: the caller took its exec token. */
export const round = (
  target: { readonly api: FlyApi; readonly machineId: string; readonly tuning: { readonly execTimeoutSeconds: number } },
  ops: ReadonlyArray<Round.Op>,
  reports: ReadonlyArray<Round.ReportRequest>,
  options: Parameters<typeof Round.encode>[2],
  taken: boolean
): Effect.Effect<Round.RoundResult, ProviderError> =>
  Effect.gen(function*() {
    const { args, stdin } = Round.encode(ops, reports, options)
    const answer = yield* target.api.exec(target.machineId, ["/bin/sh", "-c", Scripts.ROUND, "kt", ...args], {
      timeoutSeconds: target.tuning.execTimeoutSeconds,
      stdin,
      taken
    }).pipe(Effect.mapError((error) => toProviderError(error)))
    const operation = `follow the processes of machine ${target.machineId}`
    if (answer.exit_code !== 0) {
      return yield* flyError(operation, "Failed", `a round failed: ${(answer.stderr ?? "").trim() || `exit code ${answer.exit_code}`}`)
    }
    const decoded = Round.decode(answer.stdout ?? "", ops.length, reports.length)
    if (Either.isLeft(decoded)) return yield* flyError(operation, "Protocol", `unexpected answer: ${decoded.left}`)
    return decoded.right
  })
