/**
 * `Backend.connect` on E2B: the SDK's handle of one running sandbox and a watch on it, in the
 * Scope the kernel holds for one generation of the computer.
 *
 *   spawn  a process through the sandbox's agent (E2BAgent.ts), which holds it, its record and its
 *          output (`held`), for any server; a sandbox made before agents (no key in its metadata),
 *          or one whose agent cannot start, runs each process as an envd command (EnvdProcess.ts),
 *          held by this server and ended with it
 *   lost   completes when the sandbox is gone or paused other than through the kernel, or its agent
 *          ends while the sandbox runs on (a reconnect starts another: a new boot). The watch
 *          asks E2B every `watchEveryMs`, once just after the end of the plan's runtime (`endsAt`),
 *          whenever a start fails, and a few times when a process's stream breaks. At the end of the runtime E2B
 *          deletes a temporary sandbox and pauses a permanent one; the reason then says so (a
 *          restart resumes a permanent one, with its files and a new period).
 *   (close) notes in `busy` whether the agent still holds a running process, for `suspend`.
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
import { type ProviderError, SpawnFailed } from "../../../domain/Errors.js"
import type { BackendProcess, Connection, Instance, SpawnSpec } from "../../../services/Backend.js"
import * as AgentProcesses from "../agent/AgentProcesses.js"
import * as E2BAgent from "./E2BAgent.js"
import { BACKEND, e2bError } from "./E2BError.js"
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
  /** --e2b-env: what envd adds to every command, added to the agent's processes likewise. */
  readonly envs: Readonly<Record<string, string>>
  /** The agent's bytes; none: every process is an envd command (no agent binary, or agents turned off). */
  readonly agentBinary: Effect.Effect<Uint8Array, ProviderError> | undefined
  /** The agent's options (--retain, --max-finished). */
  readonly agentArgs: ReadonlyArray<string>
  /**
   * Sandboxes whose agent held a running process when their last connection here closed: the
   * backend's `suspend` leaves those running (a pause would end the processes), until E2B's timeout.
   */
  readonly busy: Set<string>
}

/** How long after `endsAt` the watch looks whether E2B has ended the sandbox. */
export const END_GRACE_MS = 2000
/** How many times a broken stream has the sandbox looked at. */
const SETTLE_LOOKS = 5

export const connect = (options: ConnectOptions) => (target: Instance): Effect.Effect<Connection, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const { provider } = options
    const { agentKey, envdVersion, instance, sandbox, templateId } = yield* provider.attach(target.providerId, false)
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

    const execContext: Omit<EnvdProcess.ExecContext, "outputApi"> = {
      sandbox,
      envdVersion,
      requestTimeoutMs: options.requestTimeoutMs,
      scrub: options.scrub,
      gone,
      onDropped: Effect.asVoid(settle)
    }
    const envdSpawn = (spec: SpawnSpec) =>
      EnvdProcess.exec({ ...execContext, outputApi: options.outputApi }, spec).pipe(Effect.tapErrorTag("SpawnFailed", () => checkSoon))

    /**
     * The agent, when the sandbox has a key and the server the binary. One that cannot start leaves
     * the sandbox to envd commands (said in the log), unless the sandbox itself is gone.
     */
    const agentDied = yield* Deferred.make<string>()
    const agent = agentKey === undefined || options.agentBinary === undefined
      ? Option.none()
      : yield* E2BAgent.open({ ...execContext, home: options.home, binary: options.agentBinary, args: options.agentArgs }, agentKey, {
        onLost: (reason) => Deferred.unsafeDone(agentDied, Effect.succeed(reason))
      }).pipe(
        Effect.map(Option.some),
        Effect.catchAll((error) =>
          Effect.gen(function*() {
            const now = yield* provider.inspect(id).pipe(Effect.orElseSucceed(() => Option.none<Instance>()))
            const detail = error instanceof SpawnFailed ? error.reason : error.detail
            if (Option.isNone(now) || now.value.state !== "running") {
              return yield* e2bError("start the sandbox's agent", "NotFound", `sandbox ${id} is not running: ${detail}`)
            }
            yield* Effect.logWarning(`e2b backend: sandbox ${id}: cannot start its agent (${detail}); its processes run as envd commands and end with this server`)
            return Option.none()
          })
        )
      )
    // Before the agent is let go (finalizers run last-added first): does it hold a running process?
    if (Option.isSome(agent)) {
      const client = agent.value
      yield* Effect.addFinalizer(() =>
        client.list.pipe(
          Effect.timeout("5 seconds"),
          Effect.match({
            onFailure: () => options.busy.delete(id),
            onSuccess: (records) => (records.some((record) => record.exit === undefined) ? options.busy.add(id) : options.busy.delete(id))
          })
        )
      )
    }
    // The agent's connection (an envd command) ends with the sandbox too: the sandbox says which.
    yield* Deferred.await(agentDied).pipe(
      Effect.flatMap((reason) =>
        Effect.zipRight(
          settle,
          Deferred.succeed(lost, `its agent in sandbox ${id} ended: ${reason}; connecting again starts another (processes it held are lost)`)
        )
      ),
      Effect.forkScoped
    )
    const env = E2BAgent.sandboxEnv(options.envs, id, templateId)
    const spawn = (spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope> =>
      Option.isNone(agent)
        ? envdSpawn(spec)
        : Effect.gen(function*() {
          if (yield* gone) return yield* e2bError("start the process", "NotFound", `sandbox ${id} is gone`)
          return yield* AgentProcesses.spawn(BACKEND, agent.value, { ...spec, env: { ...env, ...spec.env } })
        })

    const connection: Connection = {
      home: options.home,
      spawn,
      lost: Deferred.await(lost),
      publicUrl: (port) => Effect.sync(() => `https://${sandbox.getHost(port)}/`),
      ...(Option.isNone(agent) ? {} : {
        held: AgentProcesses.held(BACKEND, agent.value),
        lease: (step: string) => AgentProcesses.lease(BACKEND, agent.value, target.metadata.id, step)
      })
    }
    return connection
  }).pipe(Effect.withSpan("E2BBackend.connect"))
