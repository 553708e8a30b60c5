/**
 * The Fly Machines backend: a computer is one Fly Machine of the configured app, driven through
 * the Machines REST API (FlyApi.ts, @effect/platform HttpClient) — never flyctl.
 *
 * This module reads the settings and assembles the provider: its calls are in FlyProvider.ts, a
 * running computer's processes in FlyConnection.ts (one exec budget per machine, spent in rounds:
 * FlyRound.ts, FlyScripts.ts), loss in FlyWatcher.ts. The kernel owns every lifecycle: it creates
 * or attaches, renews the lease of the machines it holds (`renewal`: the `kilntainers-expires`
 * metadata, every third of the lease), and reaps temporary machines whose lease expired.
 *
 * restart = `POST …/restart` (the root filesystem is kept); factory reset = the kernel's remove
 * (destroy, and wait until the name is free) and create from the recorded image. Machines cannot
 * be renamed without a restart, so there is no `adopt` (no warm pool).
 *
 * Network: Fly machines always have network access; `network: false` cannot be enforced here
 * (networkControl: false) and is logged as such.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import type { HttpClient } from "@effect/platform"
import type * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { ProviderError } from "../../../domain/Errors.js"
import { type Capabilities, capabilitiesWithout } from "../../../services/Backend.js"
import { Backend } from "../../../services/Backend.js"
import type { FlySettings } from "../../../services/Settings.js"
import * as FlyApi from "./FlyApi.js"
import type { ConnectionTuning } from "./FlyConnection.js"
import { flyError, NAME, toProviderError } from "./FlyError.js"
import * as FlyHeld from "./FlyHeld.js"
import * as FlyMetadata from "./FlyMetadata.js"
import * as FlyProvider from "./FlyProvider.js"
import * as FlyWatcher from "./FlyWatcher.js"
import * as RequestBudget from "./RequestBudget.js"

export interface FlyTuning extends ConnectionTuning {
  /** Longest wait for one API answer (default 30 s); exec and wait calls add their own duration. */
  readonly requestTimeoutMs: number
  /** Retries of a call after 429, 5xx or a transport failure (default 5). */
  readonly maxRetries: number
  /** First retry delay, doubling with jitter (default 250 ms). */
  readonly retryBaseMs: number
  /** The longest Retry-After honoured (default 30 s). */
  readonly maxRetryAfterMs: number
  /** Budget for a machine to reach `started` / `destroyed` (default 180 s). */
  readonly startTimeoutMs: number
  /** `timeout` of one `/wait` call, seconds (default and API maximum 60). */
  readonly waitTimeoutSeconds: number
  /** The shared watcher's period (default 30 s). */
  readonly watchIntervalMs: number
  /** Lease of the machines (default 10 minutes), renewed by the kernel every third of it. */
  readonly leaseTtlMs: number
}

/** The Fly settings (`--fly-*`), with the app and token the startup checks made sure of. */
export interface FlyBackendOptions extends Omit<FlySettings, "app" | "token" | "rateLimit"> {
  readonly app: string
  readonly token: Redacted.Redacted<string>
  /** Fly machines always have network; false is logged as not enforceable. */
  readonly network: boolean
  readonly rateLimit?: RequestBudget.Limit | undefined
  /** Timings and retry budgets (tests shorten them). */
  readonly tuning?: Partial<FlyTuning> | undefined
}

export const DEFAULT_IMAGE = "debian:bookworm-slim"
export const DEFAULT_API_URL = "https://api.machines.dev"
export const HOME = FlyProvider.HOME
export { machineName } from "./FlyMetadata.js"

export const DEFAULT_TUNING: FlyTuning = {
  requestTimeoutMs: 30_000,
  maxRetries: 5,
  retryBaseMs: 250,
  maxRetryAfterMs: 30_000,
  startTimeoutMs: 180_000,
  waitTimeoutSeconds: 60,
  watchIntervalMs: 30_000,
  leaseTtlMs: 10 * 60_000,
  pollMinMs: 50,
  pollMaxMs: 2000,
  startWaitMs: 200,
  execTimeoutSeconds: 30,
  roundInputBytes: 768 * 1024,
  roundOutputBytes: 2 * 1024 * 1024,
  gatherMs: 10,
  retainBytes: FlyHeld.RETAIN_BYTES
}

/** The capabilities of the Fly backend (see the modules for how each one works). */
export const capabilities: Capabilities = capabilitiesWithout({ pty: false, networkControl: false, checkpoints: false })

/** The memory a guest may have per CPU, by CPU kind (Fly's docs, Machine Sizing: General Rules). */
export const MEMORY_PER_CPU_MB = { shared: { min: 256, max: 2048 }, performance: { min: 2048, max: 8192 } } as const

/** A reason why the settings cannot work, or undefined. */
export const invalidOptions = (options: FlyBackendOptions): string | undefined => {
  if (options.app.trim() === "") return "no Fly app: set --fly-app or FLY_APP_NAME"
  if (!(Number.isInteger(options.cpus) && options.cpus >= 1)) return `invalid CPU count ${options.cpus} (an integer ≥ 1)`
  if (!(Number.isInteger(options.memoryMb) && options.memoryMb >= 256 && options.memoryMb % 256 === 0)) {
    return `invalid memory ${options.memoryMb} MB: Fly wants a multiple of 256 MB (256, 512, 768, 1024, …)`
  }
  const perCpu = MEMORY_PER_CPU_MB[options.cpuKind]
  if (options.memoryMb < perCpu.min * options.cpus || options.memoryMb > perCpu.max * options.cpus) {
    const cpus = `${options.cpus} CPU${options.cpus === 1 ? "" : "s"}`
    return `a ${options.cpuKind} CPU needs ${perCpu.min}–${perCpu.max} MB of memory per CPU (${cpus}: ` +
      `${perCpu.min * options.cpus}–${perCpu.max * options.cpus} MB), got ${options.memoryMb} MB: set --fly-memory`
  }
  if (options.rootfsSizeGb !== undefined && !(Number.isInteger(options.rootfsSizeGb) && options.rootfsSizeGb >= 1)) {
    return `invalid rootfs size ${options.rootfsSizeGb} GB (an integer ≥ 1)`
  }
  const limit = options.rateLimit
  if (limit !== undefined && !(limit.perSecond > 0 && Number.isInteger(limit.burst) && limit.burst >= 1)) {
    return `invalid rate limit ${limit.perSecond}/s, burst ${limit.burst} (a rate > 0 and a burst ≥ 1)`
  }
  return undefined
}

/** The Fly provider; needs an HttpClient. Fails when the settings are wrong or the app's machines cannot be listed. */
export const make = (options: FlyBackendOptions): Effect.Effect<Backend["Type"], ProviderError, HttpClient.HttpClient | Scope.Scope> =>
  Effect.gen(function*() {
    const tuning: FlyTuning = { ...DEFAULT_TUNING, ...options.tuning }
    const invalid = invalidOptions(options)
    if (invalid !== undefined) return yield* flyError("use these settings", "Invalid", invalid)
    const budget = yield* RequestBudget.make({ perAction: options.rateLimit ?? RequestBudget.FLY_LIMITS.perAction, get: RequestBudget.FLY_LIMITS.get })
    const api = yield* FlyApi.make({ ...options, ...tuning, budget })
    // The token and the app are checked at startup: one list call.
    yield* api.list(FlyMetadata.filter({})).pipe(Effect.mapError((error) => toProviderError(error, `list the machines of app ${options.app}`)))
    const watcher = yield* FlyWatcher.make(api, tuning.watchIntervalMs)
    const provider = FlyProvider.make({
      api,
      app: options.app,
      previewPorts: options.previewPorts ?? [],
      budget,
      watcher,
      region: options.region,
      guest: { cpu_kind: options.cpuKind, cpus: options.cpus, memory_mb: options.memoryMb },
      rootfsSizeGb: options.rootfsSizeGb,
      startTimeoutMs: tuning.startTimeoutMs,
      waitTimeoutSeconds: tuning.waitTimeoutSeconds,
      connection: tuning
    })
    if (!options.network) {
      yield* Effect.logInfo("fly backend: Fly machines always have network access; --network off cannot be enforced on this backend")
    }
    return Backend.of({
      name: NAME,
      capabilities,
      labelStyle: FlyMetadata.STYLE,
      image: options.image,
      find: provider.find,
      create: provider.create,
      start: provider.start,
      connect: provider.connect,
      restart: provider.restart,
      remove: provider.remove,
      renewal: { everyMs: tuning.leaseTtlMs / 3, leaseMs: tuning.leaseTtlMs, renew: provider.renew }
    })
  })

/** The Fly backend as a Layer (its watcher lives as long as the layer). */
export const layer = (options: FlyBackendOptions): Layer.Layer<Backend, ProviderError> =>
  Layer.scoped(Backend, make(options)).pipe(Layer.provide(NodeHttpClient.layerUndici))
