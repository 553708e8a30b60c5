/**
 * The envd half of the E2B fake (E2BFake.ts): the Connect protocol with JSON that the SDK speaks
 * to a sandbox, and envd's `process.Process` service over processes that really run (each fake
 * sandbox is a computer of the host provider). Routed by the `E2b-Sandbox-Id` header.
 *
 *   Start, Connect   server streaming (`application/connect+json`, 5-byte envelopes, an
 *                    end-of-stream envelope with flag 0x02 carrying `{}` or `{"error":…}`)
 *   List, SendInput, SendSignal, CloseStdin, Update   unary (`application/json`)
 *   StreamInput      answered `unimplemented`; `filesystem.Filesystem` likewise
 *   GET /health      204
 *
 * A process outlives the request that started it, as envd's does: envd runs a command on a context
 * of its own, "We do not want the command to be killed if the request context is cancelled"
 * (e2b-dev/infra packages/envd/internal/services/process/start.go), in one cgroup shared by all
 * commands (handler/cgroup.go), so a client that goes (or a stream that drops) only stops the
 * sending; what a command left running (a daemon in its own session) runs on too. Connect by pid
 * streams only what comes next: envd keeps no output for a later client.
 *
 * The rules of old envd versions (e2b-dev/infra packages/envd; the SDK's version checks):
 *   < 0.4.0  no default user: Start without `Authorization: Basic base64("user:")` is refused
 *            (unauthenticated "no user specified"), an unknown user likewise;
 *   < 0.5.2  no CloseStdin (unimplemented).
 */
import { Effect, ExecutionStrategy, Exit, type ManagedRuntime, Scope, Stream } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { type Backend, type BackendProcess, type Connection, type ExitInfo, type Instance, ownedEvents } from "../../src/services/Backend.js"

/** Where the fake's sandboxes keep their workspace (the host backend's layout). */
export const FAKE_HOME = "/home/agent"

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

export class ConnectFailure extends Error {
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

export const readBody = (req: IncomingMessage) =>
  new Promise<Buffer>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => resolve(Buffer.concat(chunks)))
    req.on("error", reject)
  })

export const sendJson = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  if (res.headersSent || res.destroyed) return
  const text = body === undefined ? "" : JSON.stringify(body)
  res.writeHead(status, { ...(text ? { "content-type": "application/json" } : {}), ...headers })
  res.end(text)
}

export const apiError = (res: ServerResponse, status: number, message: string) => sendJson(res, status, { code: status, message })

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

/** pausing and resuming are the states in which E2B answers 409 ("changing state"). */
export type FakeState = "running" | "pausing" | "paused" | "resuming" | "killed"

export interface FakeSandbox {
  readonly id: string
  readonly templateID: string
  readonly metadata: Record<string, string>
  readonly envVars: Record<string, string>
  readonly autoPause: boolean
  /** autoPause keeps memory (infra's default): processes come back on resume. */
  readonly autoPauseMemory: boolean
  /** The `network` of the create (E2BFakeNetwork.ts checked it). */
  readonly network: unknown
  readonly envdVersion: string
  /** The start of the current running period (create or resume), epoch ms. */
  startedAt: number
  state: FakeState
  /** Settles when a pausing or resuming sandbox has changed state. */
  transition: Promise<unknown>
  endAt: number
  envdAccessToken: string
  timer: NodeJS.Timeout | undefined
  /** The host computer that is this sandbox's "VM" (kept while paused: its files). */
  instance: Instance | undefined
  /** Paused with a memory snapshot: the VM (its processes) is kept and comes back on resume. */
  frozen: boolean
  /** Its connection while running, in `scope`. */
  scope: Scope.CloseableScope | undefined
  connection: Connection | undefined
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

export const ENVD_PREFIXES = ["/process.Process/", "/filesystem.Filesystem/", "/files", "/health", "/init", "/envs", "/metrics"]

/** Negative, zero or positive as version `a` is older than, equal to or newer than `b`. */
const versionCompare = (a: string, b: string) => {
  const pa = a.split(".").map((n) => Number.parseInt(n, 10) || 0)
  const pb = b.split(".").map((n) => Number.parseInt(n, 10) || 0)
  for (let i = 0; i < 3; i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) - (pb[i] ?? 0)
  return 0
}

/** envd < 0.4.0 has no default user: the start of a process names one (Basic auth, no password). */
const startUser = (sandbox: FakeSandbox, req: IncomingMessage) => {
  const header = req.headers["authorization"]
  if (typeof header !== "string" || !header.startsWith("Basic ")) {
    if (versionCompare(sandbox.envdVersion, "0.4.0") < 0) throw new ConnectFailure("unauthenticated", "no user specified")
    return
  }
  const user = Buffer.from(header.slice(6), "base64").toString("utf8").split(":")[0]
  if (user !== "user") throw new ConnectFailure("unauthenticated", `invalid username: '${user}'`)
}

export const makeEnvd = (
  runtime: ManagedRuntime.ManagedRuntime<Backend, unknown>,
  sandboxes: ReadonlyMap<string, FakeSandbox>
) => {
  const startProcess = async (sandbox: FakeSandbox, request: any, first: Listener): Promise<FakeProcess> => {
    const computer = sandbox.connection
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
      ownedEvents(process).pipe(
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
        if (method === "Start") {
          startUser(sandbox, req)
          return open(await startProcess(sandbox, request, listener))
        }
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
          if (versionCompare(sandbox.envdVersion, "0.5.2") < 0) {
            throw new ConnectFailure("unimplemented", `envd ${sandbox.envdVersion} has no CloseStdin`)
          }
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

  return handleEnvd
}
