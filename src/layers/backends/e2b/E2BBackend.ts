/**
 * The E2B backend: a computer is one E2B sandbox, driven with the official `e2b` SDK (v2). A
 * stateless provider; the kernel owns lifecycles, renewal scheduling and reaping.
 *
 * The folder, one concept per module:
 *   E2BBackend.ts    the options, the capabilities and the provider as the `Backend` service
 *   E2BProvider.ts   the control-plane calls (find, inspect, create, attach, suspend, remove, renew)
 *   E2BCheckpoints.ts checkpoints and forks: E2B's snapshots
 *   E2BConnection.ts `connect`: the SDK handle of a running sandbox, and the watch for its loss
 *   E2BAgent.ts      the sandbox's kt-agent, the home of its processes, reached through envd
 *   E2BError.ts      a failed call as a ProviderError, with E2B's wording
 *   RuntimeCap.ts    the plan's maximum runtime: end of life, renewals, the lost reasons
 *   EnvdProcess.ts   a process through envd; ProcessScript.ts the script envd runs;
 *                    EnvdVersion.ts what old envd lacks
 *
 * How the kernel's steps map to E2B:
 *   restart   E2B has no restart: pause with a filesystem snapshot and resume — a cold boot that
 *             keeps the files (processes, the agent and memory are gone: the next connection starts
 *             another agent, a new boot) and starts a new runtime period.
 *   processes held by the sandbox's agent (E2BAgent.ts): a permanent computer's run on after the
 *             server; a sandbox paused with its memory (outside kilntainers) comes back with its agent
 *             and processes, one paused without (ours) with neither.
 *   suspend   a permanent computer released by its last holder is paused, and resumed by `start`;
 *             one whose agent holds a running process runs on until E2B's own timeout pauses it.
 *   renewal   the sandbox's timeout, extended every `keepAliveIntervalMs`, never past the end of
 *             the plan's runtime (Instance.endsAt, which the kernel shows to the agent).
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import { type ProviderError, Unsupported } from "../../../domain/Errors.js"
import { Backend, type Capabilities, type Instance, capabilitiesWithout } from "../../../services/Backend.js"
import * as NativeBinaries from "../agent/NativeBinaries.js"
import * as E2BCheckpoints from "./E2BCheckpoints.js"
import * as E2BConnection from "./E2BConnection.js"
import { BACKEND, e2bError } from "./E2BError.js"
import * as E2BProvider from "./E2BProvider.js"
import * as RuntimeCap from "./RuntimeCap.js"
import type { E2BNetwork } from "../../egress/CloudEgress.js"

export interface E2BBackendOptions {
  /** --e2b-api-key / E2B_API_KEY (never logged). */
  readonly apiKey: Redacted.Redacted<string>
  /** --e2b-template, default "base". */
  readonly template: string
  /** --e2b-sandbox-timeout: the lifetime the keep-alive renews, seconds (default 3600); at most the maximum runtime. */
  readonly sandboxTimeoutSec: number
  /**
   * --e2b-max-runtime: the plan's maximum continuous runtime of a sandbox, seconds. Default 3600,
   * E2B's Base plan; Pro allows 86400 (24 h).
   */
  readonly maxRuntimeSec?: number | undefined
  /** --e2b-metadata k=v: added to ours. */
  readonly metadata: Readonly<Record<string, string>>
  /** --e2b-env k=v: sandbox-wide environment. */
  readonly envs: Readonly<Record<string, string>>
  /** The egress allowlist and header rules, enforced by E2B (CloudEgress.ts). */
  readonly network?: E2BNetwork | undefined
  /** The SDK's apiUrl (tests: the fake). */
  readonly apiUrl: string | undefined
  /** The SDK's sandboxUrl (tests: the fake's envd). */
  readonly sandboxUrl: string | undefined
  readonly domain: string | undefined
  /** HOME and default working directory inside the sandbox; E2B templates use /home/user. */
  readonly home?: string | undefined
  /** Per-request timeout of control-plane and envd calls (the SDK's requestTimeoutMs); default 30 s. */
  readonly requestTimeoutMs?: number | undefined
  /** How often the kernel renews the lifetime; default a third of the timeout, at most 5 min. */
  readonly keepAliveIntervalMs?: number | undefined
  /** How often a connection asks E2B whether its sandbox still runs; default the keep-alive interval. */
  readonly watchIntervalMs?: number | undefined
  /**
   * Where process output is read: "auto" (default) the SDK's process client when it has one, else
   * the public API; "public" forces the public API (tests of the fallback).
   */
  readonly outputApi?: "auto" | "rpc" | "public" | undefined
  /** How long a pause waits out a sandbox that is changing state (409); default 30 s. */
  readonly conflictWaitMs?: number | undefined
  /**
   * Who holds a sandbox's processes: "agent" (default) its kt-agent (E2BAgent.ts), for any server;
   * "envd" envd commands held by the server that started them (a sandbox made before agents, and
   * tests of envd's own process API).
   */
  readonly processes?: "agent" | "envd" | undefined
  /** --retain-bytes: output the agent keeps per stream; default the agent's (32 MiB). */
  readonly retainBytes?: number | undefined
  /** --max-finished: finished processes the agent keeps; default the agent's. */
  readonly maxFinished?: number | undefined
}

export const DEFAULT_HOME = "/home/user"
const DEFAULT_REQUEST_TIMEOUT_MS = 30_000

/**
 * What works on E2B. restart: pause + resume (filesystem kept, a cold boot); files: the runtime
 * reads and writes files with processes, whose output is exact bytes; networkControl: not offered;
 * checkpoints: E2B's snapshots (E2BCheckpoints.ts); heldProcesses: the sandbox's agent (E2BAgent.ts).
 */
export const capabilities: Capabilities = capabilitiesWithout({ networkControl: false })

/** The E2B provider, after the startup checks: valid limits, and an API that answers and takes the key. */
export const make = (options: E2BBackendOptions): Effect.Effect<Backend["Type"], ProviderError> =>
  Effect.gen(function*() {
    const maxRuntimeSec = options.maxRuntimeSec ?? RuntimeCap.BASE_PLAN_MAX_RUNTIME_SEC
    if (!Number.isInteger(maxRuntimeSec) || maxRuntimeSec < 1) {
      return yield* e2bError("use --e2b-max-runtime", "Invalid", `it must be a positive whole number of seconds (got ${maxRuntimeSec})`)
    }
    if (options.sandboxTimeoutSec > maxRuntimeSec) {
      // E2B refuses a longer timeout with a 400; the default timeout is the Base plan's maximum.
      yield* Effect.logInfo(
        `e2b backend: --e2b-sandbox-timeout ${options.sandboxTimeoutSec} s is above --e2b-max-runtime ${maxRuntimeSec} s; using ${maxRuntimeSec} s`
      )
    }
    const timeoutMs = Math.min(options.sandboxTimeoutSec, maxRuntimeSec) * 1000
    const requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS
    const keepAliveMs = options.keepAliveIntervalMs ?? Math.max(1000, Math.min(Math.floor(timeoutMs / 3), 5 * 60_000))
    const secret = Redacted.value(options.apiKey)
    const secrets = [secret, ...Object.values(options.network?.rules ?? {}).flatMap((rules) => rules.flatMap((rule) => Object.values(rule.transform.headers)))]
      .filter((value) => value.length >= 4)
    /** Never let the key (or a header rule's value) into a message, whatever the SDK or the service put there. */
    const scrub = (text: string) => secrets.reduce((out, value) => out.split(value).join("<redacted>"), text)
    const connection: E2BProvider.Connection = {
      apiKey: secret,
      requestTimeoutMs,
      ...(options.apiUrl !== undefined ? { apiUrl: options.apiUrl } : {}),
      ...(options.sandboxUrl !== undefined ? { sandboxUrl: options.sandboxUrl } : {}),
      ...(options.domain !== undefined ? { domain: options.domain } : {})
    }
    const provider = E2BProvider.make({
      connection,
      timeoutMs,
      maxRuntimeSec,
      envs: options.envs,
      network: options.network,
      extraMetadata: options.metadata,
      scrub,
      conflictWaitMs: options.conflictWaitMs
    })

    // The startup check: E2B answers and takes the key (the reaper's own pass runs in the background).
    yield* provider.check
    // E2B sandboxes are x86-64 Linux VMs, whatever machine the server runs on. Without the binary
    // (a platform with no prebuilt helper and no compiler) processes are envd commands, as before.
    const agentBinary = options.processes === "envd"
      ? undefined
      : yield* NativeBinaries.locate(BACKEND, "linux-x64").pipe(
        Effect.map((binaries) => Effect.succeed(binaries.agentBytes)),
        Effect.catchAll((error) =>
          Effect.as(Effect.logWarning(`e2b backend: no agent for the sandboxes (${error.detail}); their processes end with the server`), undefined)
        )
      )
    const agentArgs = [
      ...(options.retainBytes === undefined ? [] : ["--retain", String(options.retainBytes)]),
      ...(options.maxFinished === undefined ? [] : ["--max-finished", String(options.maxFinished)])
    ]

    /**
     * A permanent computer released by its last holder here is paused, unless its agent holds a
     * running process: a pause (a cold boot) would end it. Then it runs on, as on every other backend,
     * until E2B's timeout (--e2b-sandbox-timeout, no longer renewed) pauses it.
     */
    const busy = new Set<string>()
    const suspend = (instance: Instance) =>
      busy.delete(instance.providerId)
        ? Effect.logInfo(`e2b backend: sandbox ${instance.providerId} holds running processes: left running until its E2B timeout`)
        : provider.suspend(instance.providerId)

    /** E2B has no restart: a pause and a resume, which keeps the files and starts a new period. */
    const restart = (instance: Instance) =>
      provider.suspend(instance.providerId).pipe(
        Effect.mapError((error): ProviderError | Unsupported =>
          error.reason === "Invalid" || error.reason === "Denied"
            ? new Unsupported({ backend: BACKEND, feature: `restart (E2B refuses the pause: ${error.detail})` })
            : error
        ),
        Effect.andThen(provider.attach(instance.providerId, true)),
        Effect.map((attached) => attached.instance)
      )

    return Backend.of({
      name: BACKEND,
      capabilities,
      labelStyle: E2BProvider.LABEL_STYLE,
      image: options.template,
      find: provider.find,
      create: (metadata) => provider.create(metadata),
      start: (instance) => Effect.map(provider.attach(instance.providerId, true), (attached) => attached.instance),
      connect: E2BConnection.connect({
        provider,
        home: options.home ?? DEFAULT_HOME,
        maxRuntimeSec,
        watchEveryMs: options.watchIntervalMs ?? keepAliveMs,
        requestTimeoutMs,
        outputApi: options.outputApi ?? "auto",
        scrub,
        envs: options.envs,
        agentBinary,
        agentArgs,
        busy
      }),
      restart,
      remove: (instance) => provider.remove(instance.providerId),
      suspend,
      renewal: { everyMs: keepAliveMs, leaseMs: timeoutMs, renew: provider.renew },
      checkpoints: E2BCheckpoints.make({ connection, scrub, create: provider.create })
    })
  })

/** The E2B backend as a Layer: fails when E2B cannot be reached or refuses the API key. */
export const layer = (options: E2BBackendOptions): Layer.Layer<Backend, ProviderError> => Layer.effect(Backend, make(options))
