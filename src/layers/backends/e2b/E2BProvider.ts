/**
 * The E2B provider: one small effect per control-plane call, through the official `e2b` SDK (v2),
 * each failure wrapped once (E2BError.ts). No state: a sandbox is named by its id, and what
 * identifies it as ours is its metadata (ComputerMetadata's labels, dashed style).
 *
 *   find     our sandboxes by metadata (running and paused), all pages
 *   inspect  one sandbox as E2B has it now, none when it is gone
 *   create   a running sandbox from the template in the metadata; a permanent one pauses at its
 *            timeout instead of dying, keeping its files only (`keepMemory: false`: E2B's default
 *            is a memory snapshot, whose resume would bring back the processes the kernel has
 *            ended). A create whose answer is lost is found again by its nonce and killed, so
 *            nothing is left running unseen. E2B's refusal of header rules (a team feature,
 *            envd ≥ 0.5.13) is told in --egress-header's words (E2BError.headerRulesRefusal). Its
 *            metadata carries the key of its agent (E2BAgent.ts), made here.
 *   attach   `Sandbox.connect`: the SDK's handle of a running sandbox, resuming a paused one. To
 *            start one, a running sandbox past the end of its runtime (it cannot be extended) is
 *            paused and resumed, which keeps its files and starts a new period.
 *   suspend  pause with a filesystem snapshot; a 409 (changing state, or already paused) is
 *            resolved by asking for the state, never taken for done
 *   remove   kill; a sandbox that is already gone is removed
 *   (checkpoints: E2BCheckpoints.ts, E2B's snapshots; a fork is `create` from a snapshot)
 *   renew    extend the timeout, never past the end of the plan's runtime (RuntimeCap.ts)
 *
 * E2B's own timeout is the lease: metadata cannot change after create, so the kernel's `expires`
 * is not written; `find` reports the sandbox's current end (`endAt`) as `expires` instead, which
 * a live server keeps pushing back and E2B itself enforces.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import { Sandbox } from "e2b"
import type { SandboxInfo } from "e2b"
import { randomUUID } from "node:crypto"
import { type ComputerMetadata, fromLabels, labelKey, type LabelStyle, selector, toLabels } from "../../../domain/ComputerMetadata.js"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Instance, Query } from "../../../services/Backend.js"
import { newKey } from "../agent/AgentHandshake.js"
import { AGENT_KEY_METADATA } from "./E2BAgent.js"
import { e2bError, fromSdk, headerRulesRefusal, isRuntimeCap, isTransient } from "./E2BError.js"
import * as RuntimeCap from "./RuntimeCap.js"
import type { E2BNetwork } from "../../egress/CloudEgress.js"

/** E2B metadata keys: `kilntainers-computer-id`, as Fly and Modal. */
export const LABEL_STYLE: LabelStyle = "dashed"

/** The SDK's connection options. */
export interface Connection {
  readonly apiKey: string
  readonly requestTimeoutMs: number
  readonly apiUrl?: string
  readonly sandboxUrl?: string
  readonly domain?: string
}

/** The SDK's `network` option (mutable arrays, as its types want them). */
const networkOption = (network: E2BNetwork) => ({
  allowOut: [...network.allowOut],
  denyOut: [...network.denyOut],
  ...(network.rules === undefined
    ? {}
    : { rules: Object.fromEntries(Object.entries(network.rules).map(([host, rules]) => [host, rules.map((rule) => ({ transform: { headers: { ...rule.transform.headers } } }))])) })
})

export interface ProviderConfig {
  readonly connection: Connection
  /** Lifetime asked for at create, connect and renewal; at most the plan's maximum runtime. */
  readonly timeoutMs: number
  /** The plan's maximum continuous runtime (--e2b-max-runtime). */
  readonly maxRuntimeSec: number
  /** Sandbox-wide environment (--e2b-env). */
  readonly envs: Readonly<Record<string, string>>
  /** The egress allowlist and header rules (--allow-host, --egress-header; CloudEgress.ts). */
  readonly network?: E2BNetwork | undefined
  /** Extra metadata (--e2b-metadata); ours win on a clash. */
  readonly extraMetadata: Readonly<Record<string, string>>
  /** Removes the API key from provider text. */
  readonly scrub: (text: string) => string
  /** How long `suspend` waits out a sandbox that is changing state. */
  readonly conflictWaitMs?: number | undefined
}

/** A running sandbox: the SDK's handle (envd access) and what envd it has. */
export interface Attached {
  readonly sandbox: Sandbox
  readonly instance: Instance
  readonly envdVersion: string
  /** What it boots from (E2B_TEMPLATE_ID inside). */
  readonly templateId: string
  /** The key of its agent (E2BAgent.ts); undefined: made by a version without one. */
  readonly agentKey: string | undefined
}

const LIST_PAGE = 100
/** A key as the agent takes it (64 hex digits); anything else is no key. */
const validKey = (value: string | undefined) => (value !== undefined && /^[0-9a-f]{64}$/.test(value) ? value : undefined)
const iso = (millis: number) => new Date(millis).toISOString()

export const make = (config: ProviderConfig) => {
  const { connection } = config

  const call = <A>(operation: string, f: (signal: AbortSignal) => Promise<A>): Effect.Effect<A, ProviderError> =>
    Effect.tryPromise({
      try: f,
      catch: (error) => fromSdk({ operation, plane: "api", requestTimeoutMs: connection.requestTimeoutMs, scrub: config.scrub }, error)
    })

  /** An idempotent call: transient failures are tried again, twice. */
  const retried = <A>(operation: string, f: (signal: AbortSignal) => Promise<A>) =>
    call(operation, f).pipe(Effect.retry({ schedule: Schedule.exponential("200 millis"), times: 2, while: isTransient }))

  const toInstance = (info: SandboxInfo): Instance | undefined => {
    const metadata = fromLabels(LABEL_STYLE, info.metadata, { image: info.templateId, created: info.startedAt.toISOString() })
    if (Option.isNone(metadata)) return undefined
    const running = info.state === "running"
    return {
      providerId: info.sandboxId,
      metadata: running ? { ...metadata.value, expires: info.endAt.toISOString() } : metadata.value,
      state: info.state,
      ...(running ? { endsAt: RuntimeCap.endsAt(info.startedAt.getTime(), config.maxRuntimeSec) } : {})
    }
  }

  const find = (query: Query & { readonly nonce?: string | undefined }) =>
    retried("list sandboxes", async (signal) => {
      const metadata = {
        ...selector(LABEL_STYLE, query),
        ...(query.nonce === undefined ? {} : { [labelKey(LABEL_STYLE, "nonce")]: query.nonce })
      }
      const paginator = Sandbox.list({ ...connection, query: { metadata, state: ["running", "paused"] }, limit: LIST_PAGE })
      const all: Array<SandboxInfo> = []
      while (paginator.hasNext) all.push(...(await paginator.nextItems({ signal })))
      return all
    }).pipe(Effect.map((infos) => infos.flatMap((info) => toInstance(info) ?? [])))

  /** One small call that needs the service and the key: the startup check. */
  const check = retried("list sandboxes", (signal) => Sandbox.list({ ...connection, limit: 1 }).nextItems({ signal })).pipe(Effect.asVoid)

  /** What E2B says about a sandbox now (none when it is gone). */
  const inspect = (providerId: string): Effect.Effect<Option.Option<Instance>, ProviderError> =>
    retried("read the sandbox", (signal) => Sandbox.getInfo(providerId, { ...connection, signal })).pipe(
      Effect.map((info) => Option.fromNullable(toInstance(info))),
      Effect.catchIf((error) => error.reason === "NotFound", () => Effect.succeedNone)
    )

  const remove = (providerId: string) =>
    retried("kill the sandbox", (signal) => Sandbox.kill(providerId, { ...connection, signal })).pipe(
      Effect.catchIf((error) => error.reason === "NotFound", () => Effect.succeed(false)),
      Effect.asVoid
    )

  /** `template`: what the sandbox boots from, the metadata's image unless a fork's snapshot (E2BCheckpoints.ts). */
  const create = (metadata: ComputerMetadata, template: string = metadata.image) =>
    Effect.gen(function*() {
      // Before the call: the period can only have started later, so this end is never too late.
      const before = yield* Clock.currentTimeMillis
      const { expires: _lease, ...kept } = metadata
      const labeled = { ...kept, nonce: kept.nonce ?? randomUUID() }
      // Runs as a finalizer: interruptible, so the timeout can cut it.
      const cleanup = find({ nonce: labeled.nonce }).pipe(
        Effect.flatMap((found) => Effect.forEach(found, (instance) => remove(instance.providerId), { discard: true })),
        Effect.interruptible,
        Effect.timeout("20 seconds"),
        Effect.catchAllCause(() => Effect.void)
      )
      const sandbox = yield* call("create the sandbox", (signal) =>
        Sandbox.create(template, {
          ...connection,
          signal,
          timeoutMs: config.timeoutMs,
          // The agent's key with the rest: E2B keeps metadata from the guest (E2BAgent.ts).
          metadata: { ...config.extraMetadata, ...toLabels(LABEL_STYLE, labeled), [AGENT_KEY_METADATA]: newKey() },
          envs: { ...config.envs },
          ...(config.network === undefined ? {} : { network: networkOption(config.network) }),
          ...(labeled.temporary ? {} : { lifecycle: { onTimeout: { action: "pause" as const, keepMemory: false } } })
        })).pipe(
          Effect.mapError((error) => (config.network?.rules === undefined ? error : headerRulesRefusal(error) ?? error)),
          Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : cleanup))
        )
      const instance: Instance = {
        providerId: sandbox.sandboxId,
        metadata: { ...labeled, expires: iso(before + config.timeoutMs) },
        state: "running",
        endsAt: RuntimeCap.endsAt(before, config.maxRuntimeSec)
      }
      return instance
    })

  /**
   * Pause, keeping the filesystem (a cold boot on resume). The SDK answers `false` for every 409:
   * already paused (done) or changing state (not done: try again until it settles).
   */
  const suspend = (providerId: string) => {
    const operation = "pause the sandbox"
    const attempt = retried(operation, (signal) => Sandbox.pause(providerId, { ...connection, signal, keepMemory: false })).pipe(
      Effect.flatMap((paused) =>
        paused ? Effect.void : inspect(providerId).pipe(
          Effect.flatMap((now) =>
            Option.isSome(now) && now.value.state === "paused"
              ? Effect.void
              : Option.isNone(now)
              ? Effect.fail(e2bError(operation, "NotFound", `sandbox ${providerId} is gone`))
              : Effect.fail(e2bError(operation, "Conflict", `E2B answered 409: sandbox ${providerId} is changing state`))
          )
        )
      )
    )
    const waitMs = config.conflictWaitMs ?? 30_000
    return attempt.pipe(
      Effect.retry({
        schedule: Schedule.spaced("500 millis").pipe(Schedule.upTo(Duration.millis(waitMs))),
        while: (error) => error.reason === "Conflict"
      }),
      Effect.mapError((error) =>
        error.reason === "Conflict"
          ? e2bError(operation, "Conflict", `sandbox ${providerId} kept changing state for ${Math.round(waitMs / 1000)} s; it was not paused`)
          : error
      )
    )
  }

  /**
   * The SDK's handle of a running sandbox (a paused one is resumed), with what E2B says about it.
   * `resumeAtCap`: a running sandbox at the end of its runtime is paused and resumed (a new period,
   * a cold boot) rather than refused.
   */
  const attach = (providerId: string, resumeAtCap: boolean): Effect.Effect<Attached, ProviderError> => {
    const connect = retried("connect to the sandbox", (signal) =>
      Sandbox.connect(providerId, { ...connection, signal, timeoutMs: config.timeoutMs })).pipe(
        Effect.retry({ schedule: Schedule.spaced("500 millis"), times: 6, while: (error) => error.reason === "Conflict" })
      )
    return connect.pipe(
      Effect.catchIf((error) => resumeAtCap && isRuntimeCap(error), () => suspend(providerId).pipe(Effect.andThen(connect))),
      Effect.flatMap((sandbox) =>
        retried("read the sandbox", (signal) => sandbox.getInfo({ signal })).pipe(
          Effect.flatMap((info) => {
            const instance = toInstance(info)
            return instance === undefined
              ? Effect.fail(e2bError("read the sandbox", "Failed", `sandbox ${info.sandboxId} does not carry our metadata`))
              : Effect.succeed({
                sandbox,
                instance,
                envdVersion: info.envdVersion,
                templateId: info.templateId,
                agentKey: validKey(info.metadata[AGENT_KEY_METADATA])
              })
          })
        )
      )
    )
  }

  /**
   * Extends the lifetime until `until`, but never past the end of the runtime. Fails (Quota) at or
   * past the end without asking E2B, which would refuse with a 400.
   */
  const renew = (instance: Instance, until: number) =>
    Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const ask = RuntimeCap.renewalMs(now, instance.endsAt ?? Number.POSITIVE_INFINITY, until - now)
      const operation = "extend the sandbox's timeout"
      if (ask < 1000) {
        const end = instance.endsAt === undefined ? "now" : `at ${iso(instance.endsAt)}`
        return yield* e2bError(operation, "Quota", `the sandbox is at the end of the maximum runtime of the E2B plan (it ends ${end})`)
      }
      yield* retried(operation, (signal) => Sandbox.setTimeout(instance.providerId, ask, { ...connection, signal }))
      const renewed: Instance = { ...instance, metadata: { ...instance.metadata, expires: iso(now + ask) } }
      return renewed
    })

  return { check, find, inspect, create, attach, suspend, remove, renew }
}

export type E2BProvider = ReturnType<typeof make>
