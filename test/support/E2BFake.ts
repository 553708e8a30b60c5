/**
 * A local fake of the E2B service for the real, unmodified `e2b` SDK: one plain HTTP/1.1 server
 * that answers both the control-plane REST API (`apiUrl`) and the envd data plane (`sandboxUrl`,
 * E2BFakeEnvd.ts). When `sandboxUrl` is set the SDK sends every envd request to that one URL and
 * names the sandbox in the `E2b-Sandbox-Id` header, so requests are routed by path: envd paths
 * (`/process.Process/…`, `/health`, `/files`) by that header, everything else is the REST API.
 *
 * Control plane (header `X-API-Key`, 401 without the right key, 404 for unknown sandboxes):
 *   POST   /sandboxes, /v2/sandboxes              create {templateID, metadata, envVars, timeout, autoPause,
 *                                                  autoPauseMemory, network}
 *   GET    /sandboxes, /v2/sandboxes              list (?metadata=k%3Dv%26…, ?state=running,paused, limit,
 *                                                  nextToken; the next page token in `x-next-token`)
 *   GET    /sandboxes/{id}                        detail
 *   DELETE /sandboxes/{id}                        kill
 *   POST   /sandboxes/{id}/timeout {timeout}      set the remaining lifetime (seconds)
 *   POST   /sandboxes/{id}/pause {memory}         pause
 *   POST   /v2/sandboxes/{id}/connect {timeout}   connect; resumes a paused sandbox (201)
 *   POST   /sandboxes/{id}/resume {timeout}       v1 resume
 *   POST   /sandboxes/{id}/snapshots, DELETE /templates/{id}   snapshots (E2BFakeSnapshots.ts)
 *
 * The contract it enforces, as e2b-dev/infra's API does (handlers/sandbox_create.go,
 * sandbox_connect.go, sandbox_timeout.go, sandbox_pause.go, orchestrator/keep_alive.go):
 *   - the plan's maximum runtime (`maxRuntimeSec`, default 3600, the Base plan): a create or
 *     connect timeout above it is 400 "Timeout cannot be greater than N hours"; every renewal is
 *     capped at the start of the running period plus the maximum, and refused past it with 400
 *     "Max instance length exceeded"; resuming a paused sandbox starts a new period;
 *   - at the end of its lifetime a sandbox is killed, or paused when created with autoPause;
 *   - a pause takes `pauseDelayMs`, a resume `resumeDelayMs`: meanwhile the sandbox is changing
 *     state, and a pause or a timeout answers 409, while a connect waits for the change; a pause
 *     of a paused sandbox is 409 too; a paused sandbox's timeout is 404 (it is not running);
 *   - the envd version of each template (`templates`; default 0.5.20, a current template), with the
 *     rules of old envd (E2BFakeEnvd.ts);
 *   - `network` checked as infra checks it (E2BFakeNetwork.ts): header rules need the team's
 *     feature flag (`teamFeatures`, off by default, as on E2B), envd ≥ 0.5.13, ≤ 10 exact domains;
 *   - a pause keeps memory unless asked not to (`memory: false`; at the end of the lifetime
 *     `autoPauseMemory: false`), as infra's default full snapshot does: the sandbox's processes are
 *     kept and come back on resume. `autoPauseMemory: false` without `autoPause` is a 400.
 *
 * Processes really run. Each sandbox is a computer of the host provider (HostBackend.ts, one
 * bubblewrap sandbox per E2B sandbox, used through the provider contract: create, connect,
 * remove): its workspace is /home/agent, /usr read-only from the host, its own pid namespace,
 * private /tmp, no network; TTY processes get a terminal from the host backend's agent. A pause
 * without memory closes the sandbox's connection, which ends its processes, and keeps its files (a
 * cold boot on resume; /tmp, a tmpfs, starts empty); a pause with memory keeps the connection and
 * its processes (they run on where the real VM is frozen: nothing reaches them while it is paused)
 * and a resume gives them back; kill removes the workspace. Killing or pausing a sandbox drops its
 * open envd connections first, as a vanished VM would.
 *
 * Faults: `inject({ method, path, status, delayMs, times })` answers matching requests with an
 * error status, or delays them (a request whose client gave up during the delay is dropped
 * without effect).
 */
import { Exit, type Layer, ManagedRuntime, Scope } from "effect"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as HostBackend from "../../src/layers/backends/host/HostBackend.js"
import { Backend } from "../../src/services/Backend.js"
import { apiError, ENVD_PREFIXES, type FakeSandbox, makeEnvd, readBody, sendJson } from "./E2BFakeEnvd.js"
import { networkRefusal, type TeamFeatures } from "./E2BFakeNetwork.js"
import * as E2BFakeSnapshots from "./E2BFakeSnapshots.js"

export { envelope, FAKE_HOME, parseEnvelopes } from "./E2BFakeEnvd.js"

export interface E2BFakeOptions {
  readonly apiKey?: string
  /** envd version of templates not named in `templates`; default 0.5.20 (a template built today). */
  readonly envdVersion?: string
  /** The team's feature flags; all off by default, as for a team E2B has not enabled them for. */
  readonly teamFeatures?: Partial<TeamFeatures>
  /** Per template: its envd version (old templates). */
  readonly templates?: Readonly<Record<string, { readonly envdVersion: string }>>
  /** Lifetime of a sandbox created without a timeout, in seconds. */
  readonly defaultTimeoutSec?: number
  /** The plan's maximum continuous runtime, in seconds; default 3600 (Base). */
  readonly maxRuntimeSec?: number
  /** How long a pause is in progress (409 meanwhile); default 0. */
  readonly pauseDelayMs?: number
  /** How long a resume is in progress (409 meanwhile); default 0. */
  readonly resumeDelayMs?: number
  /**
   * The fake's time stands still from 0 and moves only with `advance` (a test moves the kernel's
   * TestClock beside it): lifetimes and runtimes end when the test says, not on the wall clock.
   */
  readonly manualClock?: boolean
}

export interface Fault {
  readonly method?: string
  /** Matches the request path (without the query). */
  readonly path?: RegExp
  /** Answer with this status (and an E2B-style error body). */
  readonly status?: number
  /** Wait this long before handling (or before answering `status`). */
  readonly delayMs?: number
  /** How many requests it applies to; default unlimited. */
  readonly times?: number
}

export interface FakeSandboxInfo {
  readonly sandboxID: string
  readonly templateID: string
  readonly state: "running" | "pausing" | "paused" | "resuming"
  readonly metadata: Readonly<Record<string, string>>
  readonly envVars: Readonly<Record<string, string>>
  readonly startedAt: string
  readonly endAt: string
  readonly autoPause: boolean
  readonly autoPauseMemory: boolean
  readonly network: unknown
  readonly envdVersion: string
}

export interface RecordedRequest {
  readonly method: string
  readonly path: string
  readonly sandboxId: string | undefined
  readonly status: number
  readonly apiKey: string | undefined
  /** The JSON body of a control-plane request, when it had one. */
  readonly body: unknown
  /** The answer's message, for error statuses. */
  readonly message: string | undefined
}

export interface E2BFake {
  /** The fake's base URL: give it to the SDK as both `apiUrl` and `sandboxUrl`. */
  readonly url: string
  readonly apiKey: string
  /** The team's feature flags (a test turns one on as E2B would for a team). */
  readonly team: TeamFeatures
  readonly sandboxes: () => ReadonlyArray<FakeSandboxInfo>
  readonly inject: (fault: Fault) => void
  readonly clearFaults: () => void
  readonly requests: Array<RecordedRequest>
  /** Kills a sandbox as if from outside (E2B dashboard, another client). */
  readonly kill: (sandboxId: string) => Promise<boolean>
  /** Pauses a sandbox as if from outside (without memory unless asked); resolves when it is paused. */
  readonly pause: (sandboxId: string, options?: { readonly memory?: boolean }) => Promise<boolean>
  /** The snapshots E2B holds (taken and not deleted). */
  readonly snapshots: () => ReadonlyArray<E2BFakeSnapshots.FakeSnapshot>
  /** Running processes of a sandbox (envd pids). */
  readonly processes: (sandboxId: string) => ReadonlyArray<number>
  /**
   * With `manualClock`: moves the fake's time on by `ms`, and ends (kills or pauses) every sandbox
   * whose lifetime is over; resolves once they have ended.
   */
  readonly advance: (ms: number) => Promise<void>
  /** The fake's time now (epoch millis): with `manualClock`, where `advance` has brought it. */
  readonly now: () => number
  /** Control-plane requests being answered now (envd streams are not counted). */
  readonly inFlight: () => number
  readonly close: () => Promise<void>
}

const hoursOrSeconds = (seconds: number) => (seconds % 3600 === 0 ? `${seconds / 3600} hours` : `${seconds} seconds`)

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Starts the fake on a free port of 127.0.0.1. */
export const start = async (options: E2BFakeOptions = {}): Promise<E2BFake> => {
  const apiKey = options.apiKey ?? `e2b_${randomBytes(20).toString("hex")}`
  const defaultTimeoutSec = options.defaultTimeoutSec ?? 300
  const maxRuntimeMs = (options.maxRuntimeSec ?? 3600) * 1000
  const stateDir = mkdtempSync(join(tmpdir(), "kt-e2b-fake-"))
  const runtime = ManagedRuntime.make(
    HostBackend.layer({ stateDir, network: false, sandbox: "bwrap" }) as Layer.Layer<Backend, unknown>
  )
  const backend = await runtime.runPromise(Backend)
  const sandboxes = new Map<string, FakeSandbox>()
  const faults: Array<{ fault: Fault; left: number }> = []
  const requests: Array<RecordedRequest> = []
  const handleEnvd = makeEnvd(runtime, sandboxes)
  const snapshots = E2BFakeSnapshots.make(runtime, backend)
  const team: TeamFeatures = { networkTransformRules: options.teamFeatures?.networkTransformRules ?? false }
  let manualNow = 0
  let inFlight = 0
  const now = () => (options.manualClock ? manualNow : Date.now())

  const newId = () => `i${randomBytes(10).toString("hex")}`
  const envdOf = (template: string) =>
    snapshots.named(template)?.envdVersion ?? options.templates?.[template]?.envdVersion ?? options.envdVersion ?? "0.5.20"

  // ---- lifecycle --------------------------------------------------------------------------------

  const serially = <A>(sandbox: FakeSandbox, f: () => Promise<A>): Promise<A> => {
    const next = sandbox.busy.then(f, f)
    sandbox.busy = next.catch(() => undefined)
    return next
  }

  /** envd's connections drop (the VM is frozen or gone); its processes are another matter. */
  const dropStreams = (sandbox: FakeSandbox) => {
    for (const res of sandbox.streams) res.destroy()
    sandbox.streams.clear()
    for (const process of sandbox.processes.values()) process.listeners.clear()
  }

  /** The sandbox's "VM": a host computer (made at the first boot), connected until pause or kill. */
  const boot = async (sandbox: FakeSandbox) => {
    const scope = await runtime.runPromise(Scope.make())
    try {
      const metadata = { id: sandbox.id, temporary: false, image: sandbox.templateID, created: new Date(sandbox.startedAt).toISOString(), instance: "e2b-fake" }
      const snapshot = snapshots.named(sandbox.templateID)
      sandbox.instance = sandbox.instance !== undefined
        ? await runtime.runPromise(backend.start(sandbox.instance))
        : snapshot !== undefined
        ? await snapshots.boot(snapshot, metadata)
        : await runtime.runPromise(backend.create(metadata))
      sandbox.connection = await runtime.runPromise(Scope.extend(backend.connect(sandbox.instance), scope))
      sandbox.scope = scope
    } catch (error) {
      await runtime.runPromise(Scope.close(scope, Exit.void))
      throw error
    }
  }

  /** The connection closes (its processes end); `erase` removes the computer and its files too. */
  const shutDown = async (sandbox: FakeSandbox, erase: boolean) => {
    dropStreams(sandbox)
    sandbox.processes.clear()
    sandbox.frozen = false
    const { instance, scope } = sandbox
    sandbox.connection = undefined
    sandbox.scope = undefined
    if (scope) await runtime.runPromise(Scope.close(scope, Exit.void)).catch(() => undefined)
    if (erase && instance) await runtime.runPromise(backend.remove(instance)).catch(() => undefined)
  }

  /** The end of the lifetime: killed, or paused when created with autoPause. */
  const arm = (sandbox: FakeSandbox) => {
    if (sandbox.timer) clearTimeout(sandbox.timer)
    sandbox.timer = undefined
    if (sandbox.state !== "running" || options.manualClock) return
    sandbox.timer = setTimeout(() => void end(sandbox), Math.max(0, sandbox.endAt - now()))
    sandbox.timer.unref()
  }

  /** The end of a sandbox's lifetime: it is killed, or paused when created with autoPause (memory as asked then). */
  const end = (sandbox: FakeSandbox) => (sandbox.autoPause ? pause(sandbox, sandbox.autoPauseMemory) : killSandbox(sandbox))

  /** KeepAliveFor: a lifetime never past the start of the period plus the maximum runtime. */
  const keepAlive = (sandbox: FakeSandbox, timeoutSec: number, allowShorter: boolean): string | undefined => {
    const at = now()
    if (at - sandbox.startedAt > maxRuntimeMs) return "Max instance length exceeded"
    const endAt = at + Math.min(timeoutSec * 1000, sandbox.startedAt + maxRuntimeMs - at)
    if (allowShorter || endAt > sandbox.endAt) sandbox.endAt = endAt
    arm(sandbox)
    return undefined
  }

  const killSandbox = (sandbox: FakeSandbox) =>
    serially(sandbox, async () => {
      if (sandbox.state === "killed") return
      sandbox.state = "killed"
      if (sandbox.timer) clearTimeout(sandbox.timer)
      sandboxes.delete(sandbox.id)
      // The VM vanishes: connections drop first, then the processes die with it, and its files.
      dropStreams(sandbox)
      await shutDown(sandbox, true)
    })

  /**
   * Pausing starts at once (409 for others meanwhile) and ends after `pauseDelayMs`. With memory the
   * VM is kept (its processes come back on resume); without, it shuts down and keeps its files.
   */
  const pause = (sandbox: FakeSandbox, memory: boolean): Promise<boolean> => {
    if (sandbox.state !== "running") return Promise.resolve(false)
    sandbox.state = "pausing"
    if (sandbox.timer) clearTimeout(sandbox.timer)
    dropStreams(sandbox)
    sandbox.transition = serially(sandbox, async () => {
      await delay(options.pauseDelayMs ?? 0)
      if (memory) sandbox.frozen = true
      else await shutDown(sandbox, false)
      if (sandbox.state === "pausing") sandbox.state = "paused"
    })
    return sandbox.transition.then(() => true)
  }

  const resume = (sandbox: FakeSandbox, timeoutSec: number): Promise<unknown> => {
    sandbox.state = "resuming"
    sandbox.transition = serially(sandbox, async () => {
      await delay(options.resumeDelayMs ?? 0)
      if (!sandbox.frozen) await boot(sandbox)
      sandbox.frozen = false
      sandbox.state = "running"
      sandbox.envdAccessToken = randomBytes(16).toString("hex")
      sandbox.startedAt = now()
      sandbox.endAt = sandbox.startedAt + Math.min(timeoutSec * 1000, maxRuntimeMs)
      arm(sandbox)
    }).catch((error) => {
      sandbox.state = "paused"
      throw error
    })
    return sandbox.transition
  }

  // ---- REST API ---------------------------------------------------------------------------------

  /** What the API reports: a sandbox changing state is still in the store it comes from. */
  const apiState = (sandbox: FakeSandbox) => (sandbox.state === "pausing" ? "running" : sandbox.state === "resuming" ? "paused" : sandbox.state)

  const info = (sandbox: FakeSandbox) => ({
    templateID: sandbox.templateID,
    sandboxID: sandbox.id,
    clientID: "fake-client",
    startedAt: new Date(sandbox.startedAt).toISOString(),
    endAt: new Date(sandbox.endAt).toISOString(),
    cpuCount: 2,
    memoryMB: 512,
    diskSizeMB: 1024,
    metadata: sandbox.metadata,
    state: apiState(sandbox),
    envdVersion: sandbox.envdVersion
  })

  const created = (sandbox: FakeSandbox) => ({
    templateID: sandbox.templateID,
    sandboxID: sandbox.id,
    clientID: "fake-client",
    envdVersion: sandbox.envdVersion,
    envdAccessToken: sandbox.envdAccessToken,
    domain: null
  })

  const parseMetadataQuery = (value: string | null): Record<string, string> => {
    const wanted: Record<string, string> = {}
    if (!value) return wanted
    for (const [key, v] of new URLSearchParams(value)) wanted[decodeURIComponent(key)] = decodeURIComponent(v)
    return wanted
  }

  const tooLong = (timeout: unknown) =>
    typeof timeout === "number" && timeout * 1000 > maxRuntimeMs ? `Timeout cannot be greater than ${hoursOrSeconds(maxRuntimeMs / 1000)}` : undefined

  const handleApi = async (req: IncomingMessage, res: ServerResponse, url: URL, request: any) => {
    if (req.headers["x-api-key"] !== apiKey) return apiError(res, 401, "Invalid API key")
    const method = req.method ?? "GET"
    const path = url.pathname

    if (method === "POST" && (path === "/sandboxes" || path === "/v2/sandboxes")) {
      const refused = tooLong(request.timeout)
      if (refused) return apiError(res, 400, refused)
      const timeoutSec = typeof request.timeout === "number" ? request.timeout : defaultTimeoutSec
      const templateID = typeof request.templateID === "string" ? request.templateID : "base"
      const autoPause = request.autoPause === true
      if (request.autoPauseMemory === false && !autoPause) return apiError(res, 400, "autoPauseMemory=false only applies when autoPause is true.")
      const badNetwork = networkRefusal(request.network, envdOf(templateID), team)
      if (badNetwork) return apiError(res, 400, badNetwork)
      const startedAt = now()
      const sandbox: FakeSandbox = {
        id: newId(),
        templateID,
        metadata: { ...(request.metadata ?? {}) },
        envVars: { ...(request.envVars ?? {}) },
        autoPause,
        autoPauseMemory: request.autoPauseMemory !== false,
        network: request.network,
        envdVersion: envdOf(templateID),
        startedAt,
        state: "running",
        transition: Promise.resolve(),
        endAt: startedAt + Math.min(timeoutSec * 1000, maxRuntimeMs),
        envdAccessToken: randomBytes(16).toString("hex"),
        timer: undefined,
        scope: undefined,
        instance: undefined,
        frozen: false,
        connection: undefined,
        processes: new Map(),
        streams: new Set(),
        nextPid: 1000,
        busy: Promise.resolve()
      }
      try {
        await boot(sandbox)
      } catch (error) {
        return apiError(res, 500, `cannot start the sandbox: ${String(error)}`)
      }
      sandboxes.set(sandbox.id, sandbox)
      arm(sandbox)
      return sendJson(res, 201, created(sandbox))
    }

    if (method === "GET" && (path === "/sandboxes" || path === "/v2/sandboxes")) {
      const wanted = parseMetadataQuery(url.searchParams.get("metadata"))
      const states = (url.searchParams.get("state") ?? (path === "/sandboxes" ? "running" : "running,paused"))
        .split(",").filter((s) => s !== "")
      const all = [...sandboxes.values()]
        .filter((s) => states.includes(apiState(s)))
        .filter((s) => Object.entries(wanted).every(([k, v]) => s.metadata[k] === v))
        .sort((a, b) => a.startedAt - b.startedAt || a.id.localeCompare(b.id))
      const limit = Number(url.searchParams.get("limit") ?? "100") || 100
      const from = Number(url.searchParams.get("nextToken") ?? "0") || 0
      const page = all.slice(from, from + limit)
      const headers: Record<string, string> = from + limit < all.length ? { "x-next-token": String(from + limit) } : {}
      return sendJson(res, 200, page.map(info), headers)
    }

    const template = /^\/templates\/([^/]+)$/.exec(path)
    if (method === "DELETE" && template !== null) return snapshots.remove(res, decodeURIComponent(template[1]!))

    const match = /^(?:\/v2)?\/sandboxes\/([^/]+)(\/[a-z]+)?$/.exec(path)
    if (match === null) return apiError(res, 404, `no route ${method} ${path}`)
    const sandbox = sandboxes.get(decodeURIComponent(match[1]!))
    const action = match[2] ?? ""
    if (sandbox === undefined) return apiError(res, 404, `sandbox ${match[1]} not found`)
    const changing = sandbox.state === "pausing" || sandbox.state === "resuming"

    if (method === "GET" && action === "") {
      return sendJson(res, 200, { ...info(sandbox), envdAccessToken: sandbox.envdAccessToken, domain: null })
    }
    if (method === "DELETE" && action === "") {
      await sandbox.transition.catch(() => undefined)
      await killSandbox(sandbox)
      return sendJson(res, 204, undefined)
    }
    if (method === "POST" && action === "/timeout") {
      if (changing) return apiError(res, 409, `Sandbox ${sandbox.id} is changing state (${sandbox.state})`)
      if (sandbox.state !== "running") return apiError(res, 404, `sandbox ${sandbox.id} not found`)
      const timeout = request.timeout
      if (typeof timeout !== "number" || timeout < 0) return apiError(res, 400, "timeout must be a number of seconds")
      const refused = keepAlive(sandbox, timeout, true)
      if (refused) return apiError(res, 400, refused)
      return sendJson(res, 204, undefined)
    }
    if (method === "POST" && action === "/snapshots") {
      if (changing) return apiError(res, 409, `Sandbox '${sandbox.id}' cannot be snapshotted while in '${sandbox.state}' state`)
      return serially(sandbox, () => snapshots.create(res, sandbox))
    }
    if (method === "POST" && action === "/pause") {
      if (sandbox.state === "paused") return apiError(res, 409, `Error pausing sandbox - sandbox '${sandbox.id}' is already paused`)
      if (changing) return apiError(res, 409, `Sandbox '${sandbox.id}' cannot be paused while in '${sandbox.state}' state`)
      await pause(sandbox, request.memory !== false)
      return sendJson(res, 204, undefined)
    }
    if (method === "POST" && (action === "/connect" || action === "/resume")) {
      const refused = tooLong(request.timeout)
      if (refused) return apiError(res, 400, refused)
      const timeout = typeof request.timeout === "number" ? request.timeout : defaultTimeoutSec
      // Like the API: wait out a change of state, a few times.
      for (let attempt = 0; attempt < 3 && (sandbox.state === "pausing" || sandbox.state === "resuming"); attempt++) {
        await sandbox.transition.catch(() => undefined)
      }
      if (sandbox.state === "running") {
        if (action === "/resume") return apiError(res, 409, `sandbox ${sandbox.id} is not paused`)
        const over = keepAlive(sandbox, timeout, false)
        if (over) return apiError(res, 400, over)
        return sendJson(res, 200, created(sandbox))
      }
      if (sandbox.state !== "paused") return apiError(res, 409, `Sandbox ${sandbox.id} is changing state (${sandbox.state})`)
      try {
        await resume(sandbox, timeout)
      } catch (error) {
        return apiError(res, 500, `cannot resume the sandbox: ${String(error)}`)
      }
      return sendJson(res, 201, created(sandbox))
    }
    return apiError(res, 404, `no route ${method} ${path}`)
  }

  // ---- server -----------------------------------------------------------------------------------

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://fake")
    const sandboxHeader = req.headers["e2b-sandbox-id"]
    const envd = ENVD_PREFIXES.some((prefix) => url.pathname.startsWith(prefix))
    const sandboxId = envd
      ? (typeof sandboxHeader === "string" ? sandboxHeader : undefined)
      : /^(?:\/v2)?\/sandboxes\/([^/]+)/.exec(url.pathname)?.[1]
    const body = await readBody(req)
    let json: any = {}
    if (!envd && body.length > 0) {
      try {
        json = JSON.parse(body.toString("utf8"))
      } catch {
        return apiError(res, 400, "Error when parsing request: invalid JSON")
      }
    }
    // Keep the answer of control-plane calls (JSON, small) for the record.
    const end = res.end.bind(res)
    let answer = ""
    res.end = ((chunk?: unknown, ...rest: Array<any>) => {
      if (!envd && (typeof chunk === "string" || Buffer.isBuffer(chunk))) answer = String(chunk).slice(0, 4096)
      return end(chunk as any, ...rest)
    }) as typeof res.end
    res.on("finish", () => {
      const key = req.headers["x-api-key"]
      let message: string | undefined
      try {
        message = res.statusCode >= 400 && !envd ? JSON.parse(answer).message : undefined
      } catch {
        message = undefined
      }
      requests.push({
        method: req.method ?? "GET",
        path: url.pathname,
        sandboxId,
        status: res.statusCode,
        apiKey: typeof key === "string" ? key : undefined,
        body: envd ? undefined : json,
        message
      })
    })
    for (const entry of faults) {
      const { fault } = entry
      if (entry.left <= 0) continue
      if (fault.method !== undefined && fault.method !== req.method) continue
      if (fault.path !== undefined && !fault.path.test(url.pathname)) continue
      entry.left--
      if (fault.delayMs !== undefined) {
        await delay(fault.delayMs)
        if (res.destroyed || req.socket.destroyed) return
      }
      if (fault.status !== undefined) return apiError(res, fault.status, `injected fault ${fault.status}`)
      break
    }
    if (envd) return handleEnvd(req, res, url, body)
    return handleApi(req, res, url, json)
  }

  const counted = async (req: IncomingMessage, res: ServerResponse) => {
    const envd = ENVD_PREFIXES.some((prefix) => (req.url ?? "/").startsWith(prefix))
    if (envd) return handle(req, res)
    inFlight++
    try {
      await handle(req, res)
    } finally {
      inFlight--
    }
  }

  const server: Server = createServer((req, res) => {
    counted(req, res).catch((error) => {
      if (!res.headersSent) apiError(res, 500, error instanceof Error ? error.message : String(error))
      else res.destroy()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo

  return {
    url: `http://127.0.0.1:${port}`,
    apiKey,
    team,
    sandboxes: () =>
      [...sandboxes.values()].flatMap((s) =>
        s.state === "killed" ? [] : [{
          sandboxID: s.id,
          templateID: s.templateID,
          state: s.state,
          metadata: { ...s.metadata },
          envVars: { ...s.envVars },
          startedAt: new Date(s.startedAt).toISOString(),
          endAt: new Date(s.endAt).toISOString(),
          autoPause: s.autoPause,
          autoPauseMemory: s.autoPauseMemory,
          network: s.network,
          envdVersion: s.envdVersion
        }]
      ),
    inject: (fault) => faults.push({ fault, left: fault.times ?? Number.POSITIVE_INFINITY }),
    clearFaults: () => {
      faults.length = 0
    },
    requests,
    kill: async (sandboxId) => {
      const sandbox = sandboxes.get(sandboxId)
      if (sandbox === undefined) return false
      await killSandbox(sandbox)
      return true
    },
    pause: async (sandboxId, how) => {
      const sandbox = sandboxes.get(sandboxId)
      return sandbox === undefined ? false : pause(sandbox, how?.memory ?? false)
    },
    snapshots: snapshots.all,
    processes: (sandboxId) => [...(sandboxes.get(sandboxId)?.processes.keys() ?? [])],
    advance: async (ms) => {
      if (!options.manualClock) throw new Error("E2BFake.advance needs manualClock")
      manualNow += ms
      const over = [...sandboxes.values()].filter((s) => s.state === "running" && s.endAt <= manualNow)
      await Promise.all(over.map(end))
    },
    inFlight: () => inFlight,
    now,
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      for (const sandbox of [...sandboxes.values()]) {
        await sandbox.transition.catch(() => undefined)
        await killSandbox(sandbox).catch(() => undefined)
      }
      await runtime.dispose()
      rmSync(stateDir, { recursive: true, force: true })
    }
  }
}
