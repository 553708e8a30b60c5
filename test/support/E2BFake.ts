/**
 * A local fake of the E2B service for the real, unmodified `e2b` SDK: one plain HTTP/1.1 server
 * that answers both the control-plane REST API (`apiUrl`) and the envd data plane (`sandboxUrl`).
 * When `sandboxUrl` is set the SDK sends every envd request to that one URL and names the sandbox
 * in the `E2b-Sandbox-Id` header, so requests are routed by path: envd paths (`/process.Process/…`,
 * `/health`, `/files`) by that header, everything else is the REST API.
 *
 * Control plane (header `X-API-Key`, 401 without the right key, 404 for unknown sandboxes):
 *   POST   /sandboxes, /v2/sandboxes              create {templateID, metadata, envVars, timeout, autoPause}
 *   GET    /sandboxes, /v2/sandboxes              list (?metadata=k%3Dv%26…, ?state=running,paused, limit,
 *                                                  nextToken; the next page token in `x-next-token`)
 *   GET    /sandboxes/{id}                        detail
 *   DELETE /sandboxes/{id}                        kill
 *   POST   /sandboxes/{id}/timeout {timeout}      set the remaining lifetime (seconds)
 *   POST   /sandboxes/{id}/pause {memory}         pause (409 when already paused)
 *   POST   /v2/sandboxes/{id}/connect {timeout}   connect; resumes a paused sandbox (201)
 *   POST   /sandboxes/{id}/resume {timeout}       v1 resume
 * A sandbox whose lifetime passes is killed (or paused when created with autoPause).
 *
 * envd (header `X-Access-Token` = the sandbox's envdAccessToken; 502 when the sandbox is not
 * running, as E2B's proxy answers): the Connect protocol with JSON, `process.Process`:
 *   Start, Connect   server streaming (`application/connect+json`, 5-byte envelopes, an
 *                    end-of-stream envelope with flag 0x02 carrying `{}` or `{"error":…}`)
 *   List, SendInput, SendSignal, CloseStdin, Update   unary (`application/json`)
 *   StreamInput      answered `unimplemented`; `filesystem.Filesystem` likewise
 *   GET /health      204
 *
 * Processes really run. Each sandbox is a computer of the host backend (HostBackend.ts, one
 * bubblewrap sandbox per E2B sandbox): its workspace is /home/agent, /usr read-only from the host,
 * its own pid namespace, private /tmp, no network; TTY processes get a node-pty terminal. Pause
 * stops the sandbox's processes and keeps its files (the fake cannot snapshot memory: a resume is
 * always a cold boot, and /tmp, a tmpfs, starts empty); kill removes the workspace. Killing or
 * pausing a sandbox drops its open envd connections first, as a vanished VM would.
 *
 * Faults: `inject({ method, path, status, delayMs, times })` answers matching requests with an
 * error status, or delays them (a request whose client gave up during the delay is dropped
 * without effect).
 */
import { Effect, ExecutionStrategy, Exit, type Layer, ManagedRuntime, Scope, Stream } from "effect"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as HostBackend from "../../src/layers/backends/HostBackend.js"
import type { BackendComputer, BackendProcess, ExitInfo } from "../../src/services/Backend.js"
import { Backend } from "../../src/services/Backend.js"

/** Where the fake's sandboxes keep their workspace (the host backend's layout). */
export const FAKE_HOME = "/home/agent"

export interface E2BFakeOptions {
  readonly apiKey?: string
  readonly envdVersion?: string
  /** Lifetime of a sandbox created without a timeout, in seconds. */
  readonly defaultTimeoutSec?: number
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
  readonly state: "running" | "paused"
  readonly metadata: Readonly<Record<string, string>>
  readonly envVars: Readonly<Record<string, string>>
  readonly startedAt: string
  readonly endAt: string
  readonly autoPause: boolean
}

export interface RecordedRequest {
  readonly method: string
  readonly path: string
  readonly sandboxId: string | undefined
  readonly status: number
  readonly apiKey: string | undefined
}

export interface E2BFake {
  /** The fake's base URL: give it to the SDK as both `apiUrl` and `sandboxUrl`. */
  readonly url: string
  readonly apiKey: string
  readonly sandboxes: () => ReadonlyArray<FakeSandboxInfo>
  readonly inject: (fault: Fault) => void
  readonly clearFaults: () => void
  readonly requests: Array<RecordedRequest>
  /** Kills a sandbox as if from outside (E2B dashboard, another client). */
  readonly kill: (sandboxId: string) => Promise<boolean>
  /** Running processes of a sandbox (envd pids). */
  readonly processes: (sandboxId: string) => ReadonlyArray<number>
  readonly close: () => Promise<void>
}

// ---------------------------------------------------------------------------------------------
// Connect protocol

type ConnectCode =
  | "canceled"
  | "unknown"
  | "invalid_argument"
  | "deadline_exceeded"
  | "not_found"
  | "permission_denied"
  | "unauthenticated"
  | "unimplemented"
  | "internal"
  | "unavailable"
  | "failed_precondition"

const connectStatus: Record<ConnectCode, number> = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  permission_denied: 403,
  unauthenticated: 401,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  failed_precondition: 400
}

class ConnectFailure extends Error {
  constructor(readonly code: ConnectCode, message: string) {
    super(message)
  }
}

/** One Connect envelope: flags, u32 big-endian length, payload. */
export const envelope = (flags: number, payload: unknown): Buffer => {
  const data = Buffer.from(JSON.stringify(payload), "utf8")
  const frame = Buffer.allocUnsafe(5 + data.length)
  frame.writeUInt8(flags, 0)
  frame.writeUInt32BE(data.length, 1)
  data.copy(frame, 5)
  return frame
}

/** The messages of a Connect streaming request body (end-of-stream envelopes are skipped). */
export const parseEnvelopes = (body: Buffer): Array<unknown> => {
  const messages: Array<unknown> = []
  let offset = 0
  while (offset + 5 <= body.length) {
    const flags = body.readUInt8(offset)
    const length = body.readUInt32BE(offset + 1)
    if (offset + 5 + length > body.length) throw new ConnectFailure("invalid_argument", "truncated envelope")
    if (flags & 0x01) throw new ConnectFailure("unimplemented", "compressed messages are not supported")
    const data = body.subarray(offset + 5, offset + 5 + length)
    if ((flags & 0x02) === 0) messages.push(JSON.parse(data.toString("utf8")))
    offset += 5 + length
  }
  return messages
}

const readBody = (req: IncomingMessage) =>
  new Promise<Buffer>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => resolve(Buffer.concat(chunks)))
    req.on("error", reject)
  })

const sendJson = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  if (res.headersSent || res.destroyed) return
  const text = body === undefined ? "" : JSON.stringify(body)
  res.writeHead(status, { ...(text ? { "content-type": "application/json" } : {}), ...headers })
  res.end(text)
}

const apiError = (res: ServerResponse, status: number, message: string) => sendJson(res, status, { code: status, message })

const connectError = (res: ServerResponse, error: ConnectFailure) =>
  sendJson(res, connectStatus[error.code], { code: error.code, message: error.message })

// ---------------------------------------------------------------------------------------------
// Model

interface ProcessConfig {
  readonly cmd: string
  readonly args: ReadonlyArray<string>
  readonly envs: Readonly<Record<string, string>>
  readonly cwd?: string
}

type Listener = (message: unknown, last: boolean) => void

interface FakeProcess {
  readonly pid: number
  readonly config: ProcessConfig
  readonly tag: string | undefined
  readonly pty: boolean
  readonly process: BackendProcess
  readonly listeners: Set<Listener>
  exited: boolean
}

interface FakeSandbox {
  readonly id: string
  readonly templateID: string
  readonly metadata: Record<string, string>
  readonly envVars: Record<string, string>
  readonly autoPause: boolean
  readonly startedAt: Date
  state: "running" | "paused" | "killed"
  endAt: number
  envdAccessToken: string
  timer: NodeJS.Timeout | undefined
  scope: Scope.CloseableScope | undefined
  computer: BackendComputer | undefined
  readonly processes: Map<number, FakeProcess>
  /** Open envd responses: dropped when the sandbox goes away. */
  readonly streams: Set<ServerResponse>
  nextPid: number
  /** Serialises lifecycle changes. */
  busy: Promise<unknown>
}

const GO_SIGNALS: Record<string, string> = {
  SIGHUP: "hangup",
  SIGINT: "interrupt",
  SIGQUIT: "quit",
  SIGILL: "illegal instruction",
  SIGTRAP: "trace/breakpoint trap",
  SIGABRT: "aborted",
  SIGBUS: "bus error",
  SIGFPE: "floating point exception",
  SIGKILL: "killed",
  SIGUSR1: "user defined signal 1",
  SIGSEGV: "segmentation fault",
  SIGUSR2: "user defined signal 2",
  SIGPIPE: "broken pipe",
  SIGALRM: "alarm clock",
  SIGTERM: "terminated"
}

/** envd's end event: Go's ProcessState (exit code -1 and `signal: …` when killed by a signal). */
const endEvent = (exit: ExitInfo) =>
  exit.exitCode !== null
    ? { exitCode: exit.exitCode, exited: true, status: `exit status ${exit.exitCode}` }
    : { exitCode: -1, exited: false, status: `signal: ${GO_SIGNALS[exit.signal ?? "SIGKILL"] ?? exit.signal}` }

const signalOf = (value: unknown): string | undefined => {
  if (value === 9 || value === "SIGNAL_SIGKILL") return "SIGKILL"
  if (value === 15 || value === "SIGNAL_SIGTERM") return "SIGTERM"
  return undefined
}

const pidOf = (request: any): number | undefined => {
  const pid = request?.process?.pid
  return typeof pid === "number" ? pid : undefined
}

const ENVD_PREFIXES = ["/process.Process/", "/filesystem.Filesystem/", "/files", "/health", "/init", "/envs", "/metrics"]

/** Starts the fake on a free port of 127.0.0.1. */
export const start = async (options: E2BFakeOptions = {}): Promise<E2BFake> => {
  const apiKey = options.apiKey ?? `e2b_${randomBytes(20).toString("hex")}`
  const envdVersion = options.envdVersion ?? "0.5.8"
  const defaultTimeoutSec = options.defaultTimeoutSec ?? 300
  const stateDir = mkdtempSync(join(tmpdir(), "kt-e2b-fake-"))
  const runtime = ManagedRuntime.make(
    HostBackend.layer({ stateDir, network: false, sandbox: "bwrap" }) as Layer.Layer<Backend, unknown>
  )
  const backend = await runtime.runPromise(Backend)
  const sandboxes = new Map<string, FakeSandbox>()
  const faults: Array<{ fault: Fault; left: number }> = []
  const requests: Array<RecordedRequest> = []

  const newId = () => `i${randomBytes(10).toString("hex")}`

  // ---- lifecycle --------------------------------------------------------------------------------

  const serially = <A>(sandbox: FakeSandbox, f: () => Promise<A>): Promise<A> => {
    const next = sandbox.busy.then(f, f)
    sandbox.busy = next.catch(() => undefined)
    return next
  }

  const dropStreams = (sandbox: FakeSandbox) => {
    for (const res of sandbox.streams) res.destroy()
    sandbox.streams.clear()
    for (const process of sandbox.processes.values()) process.listeners.clear()
    sandbox.processes.clear()
  }

  const boot = async (sandbox: FakeSandbox) => {
    const scope = await runtime.runPromise(Scope.make())
    try {
      sandbox.computer = await runtime.runPromise(Scope.extend(backend.open({ id: sandbox.id, temporary: false }), scope))
      sandbox.scope = scope
    } catch (error) {
      await runtime.runPromise(Scope.close(scope, Exit.void))
      throw error
    }
  }

  const shutDown = async (sandbox: FakeSandbox, erase: boolean) => {
    dropStreams(sandbox)
    const { computer, scope } = sandbox
    sandbox.computer = undefined
    sandbox.scope = undefined
    if (erase && computer) await runtime.runPromise(computer.destroy).catch(() => undefined)
    if (scope) await runtime.runPromise(Scope.close(scope, Exit.void)).catch(() => undefined)
  }

  const arm = (sandbox: FakeSandbox) => {
    if (sandbox.timer) clearTimeout(sandbox.timer)
    sandbox.timer = undefined
    if (sandbox.state !== "running") return
    sandbox.timer = setTimeout(() => {
      void (sandbox.autoPause ? pause(sandbox) : killSandbox(sandbox))
    }, Math.max(0, sandbox.endAt - Date.now()))
    sandbox.timer.unref()
  }

  const killSandbox = (sandbox: FakeSandbox) =>
    serially(sandbox, async () => {
      if (sandbox.state === "killed") return
      sandbox.state = "killed"
      if (sandbox.timer) clearTimeout(sandbox.timer)
      sandboxes.delete(sandbox.id)
      // The VM vanishes: connections drop first, then the processes die with it.
      dropStreams(sandbox)
      if (sandbox.computer) await shutDown(sandbox, true)
      // Paused: nothing runs, only the workspace is left.
      else rmSync(join(stateDir, "computers", sandbox.id), { recursive: true, force: true })
    })

  const pause = (sandbox: FakeSandbox) =>
    serially(sandbox, async () => {
      if (sandbox.state !== "running") return false
      sandbox.state = "paused"
      arm(sandbox)
      await shutDown(sandbox, false)
      return true
    })

  const resume = (sandbox: FakeSandbox, timeoutSec: number | undefined) =>
    serially(sandbox, async () => {
      if (sandbox.state === "paused") {
        await boot(sandbox)
        sandbox.state = "running"
        sandbox.envdAccessToken = randomBytes(16).toString("hex")
        sandbox.endAt = Date.now() + (timeoutSec ?? defaultTimeoutSec) * 1000
        arm(sandbox)
        return true
      }
      // A running sandbox's lifetime only grows on connect.
      if (timeoutSec !== undefined) sandbox.endAt = Math.max(sandbox.endAt, Date.now() + timeoutSec * 1000)
      arm(sandbox)
      return false
    })

  // ---- REST API ---------------------------------------------------------------------------------

  const info = (sandbox: FakeSandbox) => ({
    templateID: sandbox.templateID,
    sandboxID: sandbox.id,
    clientID: "fake-client",
    startedAt: sandbox.startedAt.toISOString(),
    endAt: new Date(sandbox.endAt).toISOString(),
    cpuCount: 2,
    memoryMB: 512,
    diskSizeMB: 1024,
    metadata: sandbox.metadata,
    state: sandbox.state,
    envdVersion
  })

  const created = (sandbox: FakeSandbox) => ({
    templateID: sandbox.templateID,
    sandboxID: sandbox.id,
    clientID: "fake-client",
    envdVersion,
    envdAccessToken: sandbox.envdAccessToken,
    domain: null
  })

  const parseMetadataQuery = (value: string | null): Record<string, string> => {
    const wanted: Record<string, string> = {}
    if (!value) return wanted
    for (const [key, v] of new URLSearchParams(value)) wanted[decodeURIComponent(key)] = decodeURIComponent(v)
    return wanted
  }

  const handleApi = async (req: IncomingMessage, res: ServerResponse, url: URL, body: Buffer) => {
    if (req.headers["x-api-key"] !== apiKey) return apiError(res, 401, "Invalid API key")
    const method = req.method ?? "GET"
    const path = url.pathname
    const json = (): any => (body.length > 0 ? JSON.parse(body.toString("utf8")) : {})

    if (method === "POST" && (path === "/sandboxes" || path === "/v2/sandboxes")) {
      const request = json()
      const timeoutSec = typeof request.timeout === "number" ? request.timeout : defaultTimeoutSec
      const sandbox: FakeSandbox = {
        id: newId(),
        templateID: typeof request.templateID === "string" ? request.templateID : "base",
        metadata: { ...(request.metadata ?? {}) },
        envVars: { ...(request.envVars ?? {}) },
        autoPause: request.autoPause === true,
        startedAt: new Date(),
        state: "running",
        endAt: Date.now() + timeoutSec * 1000,
        envdAccessToken: randomBytes(16).toString("hex"),
        timer: undefined,
        scope: undefined,
        computer: undefined,
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
        .filter((s) => states.includes(s.state))
        .filter((s) => Object.entries(wanted).every(([k, v]) => s.metadata[k] === v))
        .sort((a, b) => a.startedAt.getTime() - b.startedAt.getTime() || a.id.localeCompare(b.id))
      const limit = Number(url.searchParams.get("limit") ?? "100") || 100
      const from = Number(url.searchParams.get("nextToken") ?? "0") || 0
      const page = all.slice(from, from + limit)
      const headers: Record<string, string> = from + limit < all.length ? { "x-next-token": String(from + limit) } : {}
      return sendJson(res, 200, page.map(info), headers)
    }

    const match = /^(?:\/v2)?\/sandboxes\/([^/]+)(\/[a-z]+)?$/.exec(path)
    if (match === null) return apiError(res, 404, `no route ${method} ${path}`)
    const sandbox = sandboxes.get(decodeURIComponent(match[1]!))
    const action = match[2] ?? ""
    if (sandbox === undefined) return apiError(res, 404, `sandbox ${match[1]} not found`)

    if (method === "GET" && action === "") {
      return sendJson(res, 200, { ...info(sandbox), envdAccessToken: sandbox.envdAccessToken, domain: null })
    }
    if (method === "DELETE" && action === "") {
      await killSandbox(sandbox)
      return sendJson(res, 204, undefined)
    }
    if (method === "POST" && action === "/timeout") {
      if (sandbox.state !== "running") return apiError(res, 404, `sandbox ${sandbox.id} is not running`)
      const timeout = json().timeout
      if (typeof timeout !== "number" || timeout < 0) return apiError(res, 400, "timeout must be a number of seconds")
      sandbox.endAt = Date.now() + timeout * 1000
      arm(sandbox)
      return sendJson(res, 204, undefined)
    }
    if (method === "POST" && action === "/pause") {
      if (sandbox.state === "paused") return apiError(res, 409, `sandbox ${sandbox.id} is already paused`)
      await pause(sandbox)
      return sendJson(res, 204, undefined)
    }
    if (method === "POST" && (action === "/connect" || action === "/resume")) {
      if (action === "/resume" && sandbox.state !== "paused") return apiError(res, 409, `sandbox ${sandbox.id} is not paused`)
      const timeout = json().timeout
      let resumed: boolean
      try {
        resumed = await resume(sandbox, typeof timeout === "number" ? timeout : undefined)
      } catch (error) {
        return apiError(res, 500, `cannot resume the sandbox: ${String(error)}`)
      }
      return sendJson(res, resumed ? 201 : 200, created(sandbox))
    }
    return apiError(res, 404, `no route ${method} ${path}`)
  }

  // ---- envd -------------------------------------------------------------------------------------

  const startProcess = async (sandbox: FakeSandbox, request: any, first: Listener): Promise<FakeProcess> => {
    const computer = sandbox.computer
    if (computer === undefined || sandbox.state !== "running") throw new ConnectFailure("unavailable", "sandbox is not running")
    const config: ProcessConfig = {
      cmd: String(request?.process?.cmd ?? ""),
      args: Array.isArray(request?.process?.args) ? request.process.args.map(String) : [],
      envs: { ...(request?.process?.envs ?? {}) },
      ...(typeof request?.process?.cwd === "string" ? { cwd: request.process.cwd } : {})
    }
    if (config.cmd === "") throw new ConnectFailure("invalid_argument", "process.cmd is required")
    const size = request?.pty?.size
    const tty = size ? { cols: Number(size.cols) || 80, rows: Number(size.rows) || 24 } : undefined
    const env = {
      PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      HOME: FAKE_HOME,
      USER: "user",
      LOGNAME: "user",
      SHELL: "/bin/bash",
      ...sandbox.envVars,
      ...config.envs
    }
    const scope = await runtime.runPromise(Scope.fork(sandbox.scope!, ExecutionStrategy.sequential))
    let process: BackendProcess
    try {
      process = await runtime.runPromise(
        Scope.extend(computer.spawn({ argv: [config.cmd, ...config.args], cwd: config.cwd ?? FAKE_HOME, env, tty }), scope)
      )
    } catch (error) {
      await runtime.runPromise(Scope.close(scope, Exit.void))
      const message = error instanceof Error ? error.message : String(error)
      throw new ConnectFailure("invalid_argument", `cannot start the process: ${message}`)
    }
    const pid = process.pid ?? sandbox.nextPid++
    const entry: FakeProcess = {
      pid,
      config,
      tag: typeof request?.tag === "string" ? request.tag : undefined,
      pty: tty !== undefined,
      process,
      listeners: new Set([first]),
      exited: false
    }
    sandbox.processes.set(pid, entry)
    if (!tty && request?.stdin !== true) await runtime.runPromise(process.closeStdin).catch(() => undefined)
    const emit = (message: unknown, last: boolean) => {
      for (const listener of [...entry.listeners]) listener(message, last)
    }
    // Everything up to Exit goes to the listeners; output of children that outlive the process is
    // drained but not sent (envd ends the stream with the process).
    runtime.runFork(
      process.events.pipe(
        Stream.runForEach((event) =>
          Effect.sync(() => {
            if (entry.exited) return
            if (event._tag === "Exit") {
              entry.exited = true
              if (sandbox.processes.get(pid) === entry) sandbox.processes.delete(pid)
              emit({ event: { end: endEvent(event.exit) } }, true)
              entry.listeners.clear()
              return
            }
            const key = entry.pty ? "pty" : event._tag === "Stdout" ? "stdout" : "stderr"
            emit({ event: { data: { [key]: Buffer.from(event.data).toString("base64") } } }, false)
          })
        ),
        Effect.ensuring(Scope.close(scope, Exit.void))
      )
    )
    return entry
  }

  /**
   * A listener that streams to `res` once `open` is called with the pid; what arrives before (a
   * process may end before its Start answer is written) is kept and sent after the start event.
   */
  const streamTo = (sandbox: FakeSandbox, res: ServerResponse) => {
    const early: Array<[unknown, boolean]> = []
    let opened = false
    const send = (message: unknown, last: boolean) => {
      if (res.destroyed) return
      res.write(envelope(0, message))
      if (last) {
        res.end(envelope(2, {}))
        sandbox.streams.delete(res)
      }
    }
    const listener: Listener = (message, last) => (opened ? send(message, last) : early.push([message, last]))
    const open = (process: FakeProcess) => {
      res.writeHead(200, { "content-type": "application/connect+json" })
      sandbox.streams.add(res)
      res.on("close", () => {
        process.listeners.delete(listener)
        sandbox.streams.delete(res)
      })
      res.write(envelope(0, { event: { start: { pid: process.pid } } }))
      opened = true
      for (const [message, last] of early.splice(0)) send(message, last)
    }
    return { listener, open }
  }

  const handleEnvd = async (req: IncomingMessage, res: ServerResponse, url: URL, body: Buffer) => {
    const id = req.headers["e2b-sandbox-id"]
    const sandbox = typeof id === "string" ? sandboxes.get(id) : undefined
    if (sandbox === undefined || sandbox.state !== "running") {
      // E2B's edge proxy: the sandbox is not running (SDK: "sandbox not found / timeout").
      return sendJson(res, 502, { code: 502, message: `The sandbox ${String(id)} was not found`, sandboxId: id })
    }
    if (url.pathname === "/health") return sendJson(res, 204, undefined)
    if (req.headers["x-access-token"] !== sandbox.envdAccessToken) {
      return connectError(res, new ConnectFailure("unauthenticated", "invalid access token"))
    }
    const method = url.pathname.startsWith("/process.Process/") ? url.pathname.slice("/process.Process/".length) : undefined
    const streaming = (req.headers["content-type"] ?? "").startsWith("application/connect+json")
    try {
      if (method === "Start" || method === "Connect") {
        if (!streaming) throw new ConnectFailure("invalid_argument", `${method} is a server-streaming method`)
        const request: any = parseEnvelopes(body)[0] ?? {}
        const { listener, open } = streamTo(sandbox, res)
        if (method === "Start") return open(await startProcess(sandbox, request, listener))
        const pid = pidOf(request)
        const process = pid === undefined ? undefined : sandbox.processes.get(pid)
        if (process === undefined) throw new ConnectFailure("not_found", `process with pid ${pid} not found`)
        process.listeners.add(listener)
        return open(process)
      }
      if (streaming) throw new ConnectFailure("unimplemented", `${url.pathname} is not implemented by the fake`)
      const request: any = body.length > 0 ? JSON.parse(body.toString("utf8")) : {}
      const target = () => {
        const pid = pidOf(request)
        const process = pid === undefined ? undefined : sandbox.processes.get(pid)
        if (process === undefined) throw new ConnectFailure("not_found", `process with pid ${pid} not found`)
        return process
      }
      switch (method) {
        case "List":
          return sendJson(res, 200, {
            processes: [...sandbox.processes.values()].map((p) => ({
              config: { cmd: p.config.cmd, args: p.config.args, envs: p.config.envs, ...(p.config.cwd ? { cwd: p.config.cwd } : {}) },
              pid: p.pid,
              ...(p.tag ? { tag: p.tag } : {})
            }))
          })
        case "SendInput": {
          const process = target()
          const input = request?.input ?? {}
          const data = typeof input.stdin === "string" ? input.stdin : typeof input.pty === "string" ? input.pty : undefined
          if (data === undefined) throw new ConnectFailure("invalid_argument", "input.stdin or input.pty is required")
          await runtime.runPromise(process.process.write(Buffer.from(data, "base64")))
          return sendJson(res, 200, {})
        }
        case "CloseStdin":
          await runtime.runPromise(target().process.closeStdin)
          return sendJson(res, 200, {})
        case "SendSignal": {
          const process = target()
          const signal = signalOf(request?.signal)
          if (signal === undefined) throw new ConnectFailure("invalid_argument", `unsupported signal ${JSON.stringify(request?.signal)}`)
          await runtime.runPromise(process.process.signal(signal))
          return sendJson(res, 200, {})
        }
        case "Update": {
          const process = target()
          const size = request?.pty?.size
          if (!process.pty || !size) throw new ConnectFailure("invalid_argument", "only the size of a PTY can be updated")
          await runtime.runPromise(process.process.resize(Number(size.cols), Number(size.rows)))
          return sendJson(res, 200, {})
        }
        default:
          throw new ConnectFailure("unimplemented", `${url.pathname} is not implemented by the fake`)
      }
    } catch (error) {
      const failure = error instanceof ConnectFailure
        ? error
        : new ConnectFailure("internal", error instanceof Error ? error.message : String(error))
      if (res.headersSent) {
        if (!res.destroyed) res.end(envelope(2, { error: { code: failure.code, message: failure.message } }))
        return
      }
      if (streaming) {
        res.writeHead(200, { "content-type": "application/connect+json" })
        return res.end(envelope(2, { error: { code: failure.code, message: failure.message } }))
      }
      return connectError(res, failure)
    }
  }

  // ---- server -----------------------------------------------------------------------------------

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://fake")
    const sandboxHeader = req.headers["e2b-sandbox-id"]
    const envd = ENVD_PREFIXES.some((prefix) => url.pathname.startsWith(prefix))
    const sandboxId = envd
      ? (typeof sandboxHeader === "string" ? sandboxHeader : undefined)
      : /^(?:\/v2)?\/sandboxes\/([^/]+)/.exec(url.pathname)?.[1]
    res.on("finish", () => {
      const key = req.headers["x-api-key"]
      requests.push({
        method: req.method ?? "GET",
        path: url.pathname,
        sandboxId,
        status: res.statusCode,
        apiKey: typeof key === "string" ? key : undefined
      })
    })
    const body = await readBody(req)
    for (const entry of faults) {
      const { fault } = entry
      if (entry.left <= 0) continue
      if (fault.method !== undefined && fault.method !== req.method) continue
      if (fault.path !== undefined && !fault.path.test(url.pathname)) continue
      entry.left--
      if (fault.delayMs !== undefined) {
        await new Promise((resolve) => setTimeout(resolve, fault.delayMs))
        if (res.destroyed || req.socket.destroyed) return
      }
      if (fault.status !== undefined) return apiError(res, fault.status, `injected fault ${fault.status}`)
      break
    }
    if (envd) return handleEnvd(req, res, url, body)
    return handleApi(req, res, url, body)
  }

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((error) => {
      if (!res.headersSent) apiError(res, 500, error instanceof Error ? error.message : String(error))
      else res.destroy()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo

  return {
    url: `http://127.0.0.1:${port}`,
    apiKey,
    sandboxes: () =>
      [...sandboxes.values()].filter((s) => s.state !== "killed").map((s) => ({
        sandboxID: s.id,
        templateID: s.templateID,
        state: s.state as "running" | "paused",
        metadata: { ...s.metadata },
        envVars: { ...s.envVars },
        startedAt: s.startedAt.toISOString(),
        endAt: new Date(s.endAt).toISOString(),
        autoPause: s.autoPause
      })),
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
    processes: (sandboxId) => [...(sandboxes.get(sandboxId)?.processes.keys() ?? [])],
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      for (const sandbox of [...sandboxes.values()]) await killSandbox(sandbox).catch(() => undefined)
      await runtime.dispose()
      rmSync(stateDir, { recursive: true, force: true })
    }
  }
}
