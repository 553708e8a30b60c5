/**
 * A fake Modal: a local gRPC server that speaks Modal's control-plane service
 * (`modal.client.ModalClient`) and its per-task command router (`modal.task_command_router.
 * TaskCommandRouter`) from the vendored protos (test/support/contracts/modal/). The backend's tests
 * drive the **real** `modal@0.11.1` SDK against it — `client()` builds a `ModalClient` whose
 * profile points at this server — so the SDK's own checks (names, exec argument size, env keys),
 * middleware (auth token, retries, timeouts) and stream semantics (locked stdin writer, offset-based
 * stdio reads) all run. Sandboxes really run commands (ModalFakeSandbox.ts).
 *
 * Modelled from Modal:
 * - auth: AuthTokenGet checks the token id/secret; every other call needs the issued token; the
 *   router needs the JWT handed out with its URL;
 * - sandboxes: V2 (the SDK's default) and V1 (the SDK uses V1 when a GPU is asked for, and then
 *   waits for scheduling); names ≤ 64 characters of [A-Za-z0-9-_.], unique among the App's live
 *   sandboxes (ALREADY_EXISTS); timeouts ≤ 24 h; tags; `SandboxList` pages by `before_timestamp`;
 *   `SandboxWait` is a long poll; results are TERMINATED (137), TIMEOUT (124) or the exit code;
 * - scheduling: `schedulingDelayMs` keeps a new sandbox pending (no task) that long;
 * - tunnels: `SandboxGetTunnels` answers a TLS host for each port declared at creation (`openPorts`);
 * - execs: argv over 128 KiB in total is refused (Modal's measured ARG_MAX), env from the request's
 *   secret sources, PTY made by `script` (80x24, TERM=xterm-256color, all output on stdout);
 * - filesystem snapshots (ModalFakeImages.ts): `TaskSnapshotFilesystem` on the router copies a
 *   running sandbox's files into an image (a finished one has no task: refused), `ImageFromId`
 *   finds it, a sandbox created with its id starts from the copy, `ImageDelete` deletes it;
 * - network (`definition.networkAccess`, ModalFakeNetwork.ts): the allowlist's CIDRs and domains are
 *   checked ("Invalid CIDR", "Invalid domain": INVALID_ARGUMENT). A V1 sandbox gets its policy:
 *   OPEN shares this host's network, BLOCKED and ALLOWLIST get none of it (offline, nothing listed
 *   is reachable either: the fake can only fail closed). A V2 sandbox does not get it: the SDK
 *   lists no network policy among what V2 sandboxes support (`experimentalCreate`), so the fake
 *   assumes the worst and gives it this host's network whatever it asked.
 * Faults: `fail(method, …)` makes the next calls of an RPC fail with a status, `hang(method)` makes
 * them never answer, `terminateFromOutside(name)` ends a sandbox behind the backend's back.
 */
import type { Metadata, sendUnaryData, ServerUnaryCall, ServerWritableStream } from "@grpc/grpc-js"
import { Server, ServerCredentials, status } from "@grpc/grpc-js"
import { ModalClient, type ModalClientParams } from "modal"
import { randomBytes } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { ModalBackendOptions } from "../../src/layers/backends/modal/ModalOptions.js"
import { serviceDefinition } from "./contracts/modal/ModalSchema.js"
import { ModalFakeImages } from "./ModalFakeImages.js"
import { type AppliedNetwork, networkOf, networkRefusal } from "./ModalFakeNetwork.js"
import { type ExitStatus, FakeExec, SANDBOX_ENV, type SandboxProcess, startSandbox } from "./ModalFakeSandbox.js"

export { fakeWorks } from "./ModalFakeSandbox.js"

type Req = Record<string, any>

const GENERIC = { SUCCESS: 1, TERMINATED: 3, TIMEOUT: 4 } as const
const ARG_MAX = 131072
const NAME = /^[a-zA-Z0-9\-_.]+$/

class Fault extends Error {
  constructor(readonly code: status, readonly details: string) {
    super(details)
  }
}

const alnum = (n: number) => {
  const chars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
  return Array.from(randomBytes(n), (b) => chars[b % chars.length]).join("")
}
const jwt = (claims: object) =>
  [{ alg: "none", typ: "JWT" }, claims].map((part) => Buffer.from(JSON.stringify(part)).toString("base64url")).join(".") + ".fake"

export interface FakeSandbox {
  readonly sandboxId: string
  readonly version: "V1" | "V2"
  readonly appId: string
  readonly name: string | undefined
  readonly tags: Record<string, string>
  readonly definition: Req
  /** The network the sandbox was given (not always what it asked for: see the header). */
  readonly network: AppliedNetwork
  readonly createdAt: number
  state: "pending" | "running" | "finished"
  taskId: string | undefined
  result: Req | undefined
  process: SandboxProcess | undefined
  readonly execs: Map<string, FakeExec>
  readonly finished: Promise<void>
  finish: (result: Req) => void
}

export interface ModalFakeOptions {
  readonly tokenId?: string
  readonly tokenSecret?: string
  /** How long a new sandbox stays pending before it gets a task (default 0). */
  readonly schedulingDelayMs?: number
  /** Sandboxes per SandboxList page (default 2, so that paging is exercised). */
  readonly listPageSize?: number
}

/** What `calls` records of each RPC. */
export interface Call {
  readonly method: string
  readonly request: Req
}

export class ModalFake {
  readonly root = mkdtempSync(join(tmpdir(), "kt-modal-fake-"))
  readonly sandboxes = new Map<string, FakeSandbox>()
  /** Every RPC, in order (method name and decoded request). */
  readonly calls: Array<Call> = []
  /** The images filesystem snapshots made. */
  readonly images = new ModalFakeImages(join(this.root, "images"), () => `im-${alnum(22)}`)
  readonly tokenId: string
  readonly tokenSecret: string
  schedulingDelayMs: number
  private readonly listPageSize: number
  private readonly apps = new Map<string, string>()
  private readonly failing = new Map<string, { code: status; details: string; times: number }>()
  private readonly hanging = new Set<string>()
  private readonly authToken = jwt({ exp: Math.floor(Date.now() / 1000) + 3600 })
  private readonly routerJwt = jwt({ exp: Math.floor(Date.now() / 1000) + 3600 })
  private lastCreatedAt = 0
  private server!: Server
  port = 0

  private constructor(options: ModalFakeOptions) {
    this.tokenId = options.tokenId ?? "ak-fake-token-id"
    this.tokenSecret = options.tokenSecret ?? "as-fake-token-secret"
    this.schedulingDelayMs = options.schedulingDelayMs ?? 0
    this.listPageSize = options.listPageSize ?? 2
  }

  static async start(options: ModalFakeOptions = {}): Promise<ModalFake> {
    const fake = new ModalFake(options)
    fake.server = new Server()
    fake.server.addService(serviceDefinition("modal.client.ModalClient"), fake.controlPlane())
    fake.server.addService(serviceDefinition("modal.task_command_router.TaskCommandRouter"), fake.router())
    fake.port = await new Promise<number>((resolve, reject) =>
      fake.server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (error, port) => (error ? reject(error) : resolve(port)))
    )
    return fake
  }

  /** The control plane's address, as MODAL_SERVER_URL. */
  get url() {
    return `http://127.0.0.1:${this.port}`
  }

  /** A real SDK client whose profile points at this fake (the SDK reads MODAL_SERVER_URL when constructed). */
  client(params: ModalClientParams = {}): ModalClient {
    const saved = process.env["MODAL_SERVER_URL"]
    process.env["MODAL_SERVER_URL"] = this.url
    try {
      return new ModalClient({ tokenId: this.tokenId, tokenSecret: this.tokenSecret, logger: quietLogger, ...params })
    } finally {
      if (saved === undefined) delete process.env["MODAL_SERVER_URL"]
      else process.env["MODAL_SERVER_URL"] = saved
    }
  }

  /** The next `times` calls of the RPC fail with this status. */
  fail(method: string, details = "the Modal control plane is unavailable", code: status = status.RESOURCE_EXHAUSTED, times = 1) {
    this.failing.set(method, { code, details, times })
  }

  /** Calls of the RPC never answer (until `unhang`). */
  hang(method: string) {
    this.hanging.add(method)
  }

  unhang(method: string) {
    this.hanging.delete(method)
  }

  /** Calls of an RPC so far. */
  callsOf(method: string): Array<Req> {
    return this.calls.filter((call) => call.method === method).map((call) => call.request)
  }

  /** Ends the live sandbox of that name as if someone terminated it in Modal's dashboard. */
  terminateFromOutside(name: string) {
    for (const sandbox of this.sandboxes.values()) {
      if (sandbox.name === name && sandbox.state !== "finished") sandbox.finish({ status: GENERIC.TERMINATED, exitcode: 137 })
    }
  }

  /** Names of the live (pending or running) sandboxes. */
  running(): Array<string> {
    return [...this.sandboxes.values()].filter((s) => s.state !== "finished").map((s) => s.name ?? s.sandboxId)
  }

  /** The live sandbox of that name. */
  named(name: string): FakeSandbox | undefined {
    return [...this.sandboxes.values()].find((s) => s.name === name && s.state !== "finished")
  }

  async close() {
    for (const sandbox of this.sandboxes.values()) sandbox.finish({ status: GENERIC.TERMINATED, exitcode: 137 })
    await new Promise<void>((resolve) => this.server.tryShutdown(() => resolve()))
    this.server.forceShutdown()
    rmSync(this.root, { recursive: true, force: true })
  }

  // ---- plumbing ---------------------------------------------------------------------------------

  private guard(method: string, metadata: Metadata, request: Req, router: boolean) {
    this.calls.push({ method, request })
    if (router) {
      if (metadata.get("authorization")[0] !== `Bearer ${this.routerJwt}`) throw new Fault(status.UNAUTHENTICATED, "invalid router token")
    } else if (method === "AuthTokenGet") {
      if (metadata.get("x-modal-token-id")[0] !== this.tokenId || metadata.get("x-modal-token-secret")[0] !== this.tokenSecret) {
        throw new Fault(status.UNAUTHENTICATED, "Token ID or secret is invalid")
      }
    } else if (metadata.get("x-modal-auth-token")[0] !== this.authToken) {
      throw new Fault(status.UNAUTHENTICATED, "missing or invalid auth token")
    }
    const failure = this.failing.get(method)
    if (failure !== undefined) {
      if (--failure.times <= 0) this.failing.delete(method)
      throw new Fault(failure.code, failure.details)
    }
  }

  private unary(method: string, router: boolean, run: (request: Req, call: ServerUnaryCall<Req, Req>) => Req | Promise<Req>) {
    return (call: ServerUnaryCall<Req, Req>, callback: sendUnaryData<Req>) => {
      Promise.resolve()
        .then(() => {
          this.guard(method, call.metadata, call.request, router)
          if (this.hanging.has(method)) return new Promise<Req>(() => {})
          return run(call.request, call)
        })
        .then((response) => callback(null, response), (error: unknown) => {
          const fault = error instanceof Fault ? error : new Fault(status.INTERNAL, String(error))
          callback({ code: fault.code, details: fault.details })
        })
    }
  }

  private sandbox(sandboxId: string): FakeSandbox {
    const found = this.sandboxes.get(sandboxId)
    if (found === undefined) throw new Fault(status.NOT_FOUND, `Sandbox ${sandboxId} not found`)
    return found
  }

  private byTask(taskId: string): FakeSandbox {
    const found = [...this.sandboxes.values()].find((s) => s.taskId === taskId)
    if (found === undefined || found.state !== "running") throw new Fault(status.NOT_FOUND, `Task ${taskId} not found or finished`)
    return found
  }

  private routerAccess() {
    return { url: `https://127.0.0.1:${this.port}`, jwt: this.routerJwt }
  }

  // ---- the control plane ------------------------------------------------------------------------

  private create(version: "V1" | "V2", request: Req): FakeSandbox {
    const definition = request["definition"] ?? {}
    const appId: string = request["appId"]
    if (![...this.apps.values()].includes(appId)) throw new Fault(status.NOT_FOUND, `App ${appId} not found`)
    const name: string | undefined = definition["name"] || undefined
    if (name !== undefined && (name.length > 64 || !NAME.test(name))) throw new Fault(status.INVALID_ARGUMENT, `Invalid Sandbox name: '${name}'`)
    if (definition["timeoutSecs"] > 86400) throw new Fault(status.INVALID_ARGUMENT, "timeout must be at most 24 hours")
    const refused = networkRefusal(definition["networkAccess"])
    if (refused !== undefined) throw new Fault(status.INVALID_ARGUMENT, refused)
    if (name !== undefined && [...this.sandboxes.values()].some((s) => s.appId === appId && s.name === name && s.state !== "finished")) {
      throw new Fault(status.ALREADY_EXISTS, `Sandbox with name '${name}' already exists`)
    }
    const sandboxId = version === "V1" ? `sb-${alnum(22)}` : `sb-v2-${alnum(16)}`
    let resolveFinished!: () => void
    const createdAt = Math.max(Date.now() / 1000, this.lastCreatedAt + 0.001)
    this.lastCreatedAt = createdAt
    const sandbox: FakeSandbox = {
      sandboxId,
      version,
      appId,
      name,
      tags: Object.fromEntries((request["tags"] ?? []).map((t: Req) => [t["tagName"], t["tagValue"]])),
      definition,
      network: networkOf(version, definition["networkAccess"]),
      createdAt,
      state: "pending",
      taskId: undefined,
      result: undefined,
      process: undefined,
      execs: new Map(),
      finished: new Promise<void>((resolve) => (resolveFinished = resolve)),
      finish: (result) => {
        if (sandbox.state === "finished") return
        sandbox.state = "finished"
        sandbox.result = result
        clearTimeout(timer)
        sandbox.process?.child.kill("SIGKILL")
        for (const exec of sandbox.execs.values()) exec.child.kill("SIGKILL")
        resolveFinished()
      }
    }
    const timer = setTimeout(() => sandbox.finish({ status: GENERIC.TIMEOUT, exitcode: 124 }), (definition["timeoutSecs"] || 300) * 1000)
    this.sandboxes.set(sandboxId, sandbox)
    return sandbox
  }

  /** Gives a pending sandbox its task: its bubblewrap runs. */
  private async schedule(sandbox: FakeSandbox) {
    if (this.schedulingDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.schedulingDelayMs))
    if (sandbox.state !== "pending") return
    const imageId: string = sandbox.definition["imageId"] ?? ""
    if (this.images.has(imageId)) this.images.seed(imageId, join(this.root, sandbox.sandboxId))
    const started = await startSandbox(join(this.root, sandbox.sandboxId), !sandbox.network.hostNetwork)
    if (sandbox.state !== "pending") {
      started.child.kill("SIGKILL")
      return
    }
    sandbox.process = started
    sandbox.taskId = `ta-${alnum(22)}`
    sandbox.state = "running"
    void started.ended.then((code) => sandbox.finish({ status: GENERIC.SUCCESS, exitcode: code }))
  }

  private wait(sandbox: FakeSandbox, timeoutSecs: number): Promise<Req> {
    const answer = () => (sandbox.result === undefined ? {} : { result: sandbox.result })
    if (sandbox.state === "finished" || !(timeoutSecs > 0)) return Promise.resolve(answer())
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(answer()), timeoutSecs * 1000)
      void sandbox.finished.then(() => {
        clearTimeout(timer)
        resolve(answer())
      })
    })
  }

  private fromName(version: "V1" | "V2", request: Req): Req {
    const appId = this.apps.get(request["appName"])
    const found = [...this.sandboxes.values()].find((s) =>
      s.version === version && s.appId === appId && s.name === request["sandboxName"] && s.state !== "finished"
    )
    if (found === undefined) throw new Fault(status.NOT_FOUND, `Sandbox with name '${request["sandboxName"]}' not found`)
    return { sandboxId: found.sandboxId }
  }

  private list(request: Req): Req {
    const tags: Array<Req> = request["tags"] ?? []
    const before: number = request["beforeTimestamp"] || Infinity
    const page = [...this.sandboxes.values()]
      .filter((s) => (!request["appId"] || s.appId === request["appId"]) && (request["includeFinished"] || s.state !== "finished"))
      .filter((s) => tags.every((t) => s.tags[t["tagName"]] === t["tagValue"]) && s.createdAt < before)
      .sort((a, b) => b.createdAt - a.createdAt)
      .slice(0, this.listPageSize)
    return { sandboxes: page.map((s) => ({ id: s.sandboxId, createdAt: s.createdAt, appId: s.appId, name: s.name ?? "" })) }
  }

  private terminate(request: Req): Req {
    const sandbox = this.sandbox(request["sandboxId"])
    const existing = sandbox.result
    sandbox.finish({ status: GENERIC.TERMINATED, exitcode: 137 })
    return existing === undefined ? {} : { existingResult: existing }
  }

  /**
   * The tunnels of the ports declared at creation (`definition.openPorts`): one TLS host each, on
   * 443, as Modal answers; nothing for ports not declared. A finished sandbox has none.
   */
  private tunnels(request: Req): Req {
    const sandbox = this.sandbox(request["sandboxId"])
    if (sandbox.state === "finished") throw new Fault(status.FAILED_PRECONDITION, "the sandbox has finished")
    const ports: Array<Req> = sandbox.definition["openPorts"]?.["ports"] ?? []
    return {
      result: { status: GENERIC.SUCCESS },
      tunnels: ports.map((spec) => ({ host: `${sandbox.sandboxId.toLowerCase()}-${spec["port"]}.modal.fake.invalid`, port: 443, containerPort: spec["port"] }))
    }
  }

  private taskId(request: Req): Req {
    const sandbox = this.sandbox(request["sandboxId"])
    return {
      ...(sandbox.taskId === undefined ? {} : { taskId: sandbox.taskId }),
      ...(sandbox.result === undefined ? {} : { taskResult: sandbox.result })
    }
  }

  private controlPlane() {
    const tags = (request: Req) => ({ tags: Object.entries(this.sandbox(request["sandboxId"]).tags).map(([tagName, tagValue]) => ({ tagName, tagValue })) })
    return {
      AuthTokenGet: this.unary("AuthTokenGet", false, () => ({ token: this.authToken })),
      EnvironmentGetOrCreate: this.unary("EnvironmentGetOrCreate", false, () => ({
        environmentId: "en-fake",
        metadata: { name: "main", settings: { imageBuilderVersion: "2025.06" } }
      })),
      AppGetOrCreate: this.unary("AppGetOrCreate", false, (request) => {
        const name: string = request["appName"]
        if (name.length > 64 || !NAME.test(name)) throw new Fault(status.INVALID_ARGUMENT, `Invalid App name: '${name}'`)
        if (!this.apps.has(name)) {
          if (request["objectCreationType"] !== 1) throw new Fault(status.NOT_FOUND, `App '${name}' not found`)
          this.apps.set(name, `ap-${alnum(22)}`)
        }
        return { appId: this.apps.get(name)! }
      }),
      ImageGetOrCreate: this.unary("ImageGetOrCreate", false, () => ({ imageId: `im-${alnum(22)}`, result: { status: GENERIC.SUCCESS } })),
      ImageFromId: this.unary("ImageFromId", false, (request) => {
        if (!this.images.has(request["imageId"])) throw new Fault(status.FAILED_PRECONDITION, `Could not find image with ID ${request["imageId"]}`)
        return { imageId: request["imageId"] }
      }),
      ImageDelete: this.unary("ImageDelete", false, (request) => {
        if (!this.images.delete(request["imageId"])) throw new Fault(status.FAILED_PRECONDITION, `Could not find image with ID ${request["imageId"]}`)
        return {}
      }),
      SandboxCreate: this.unary("SandboxCreate", false, (request) => {
        const sandbox = this.create("V1", request)
        void this.schedule(sandbox)
        return { sandboxId: sandbox.sandboxId }
      }),
      SandboxCreateV2: this.unary("SandboxCreateV2", false, async (request) => {
        const sandbox = this.create("V2", request)
        const scheduled = this.schedule(sandbox)
        if (this.schedulingDelayMs === 0) await scheduled
        return {
          sandboxId: sandbox.sandboxId,
          ...(sandbox.taskId === undefined ? {} : { taskId: sandbox.taskId, commandRouterAccess: this.routerAccess() })
        }
      }),
      SandboxGetFromName: this.unary("SandboxGetFromName", false, (request) => this.fromName("V1", request)),
      SandboxGetFromNameV2: this.unary("SandboxGetFromNameV2", false, (request) => this.fromName("V2", request)),
      SandboxList: this.unary("SandboxList", false, (request) => this.list(request)),
      SandboxListV2: this.unary("SandboxListV2", false, (request) => this.list(request)),
      SandboxTagsGet: this.unary("SandboxTagsGet", false, tags),
      SandboxTagsGetV2: this.unary("SandboxTagsGetV2", false, tags),
      SandboxWait: this.unary("SandboxWait", false, (request) => this.wait(this.sandbox(request["sandboxId"]), request["timeout"])),
      SandboxWaitV2: this.unary("SandboxWaitV2", false, (request) => this.wait(this.sandbox(request["sandboxId"]), request["timeout"])),
      SandboxTerminate: this.unary("SandboxTerminate", false, (request) => this.terminate(request)),
      SandboxTerminateV2: this.unary("SandboxTerminateV2", false, (request) => this.terminate(request)),
      SandboxGetTaskId: this.unary("SandboxGetTaskId", false, (request) => this.taskId(request)),
      SandboxGetTaskIdV2: this.unary("SandboxGetTaskIdV2", false, (request) => this.taskId(request)),
      SandboxGetTunnels: this.unary("SandboxGetTunnels", false, (request) => this.tunnels(request)),
      SandboxGetTunnelsV2: this.unary("SandboxGetTunnelsV2", false, (request) => this.tunnels(request)),
      SandboxGetCommandRouterAccess: this.unary("SandboxGetCommandRouterAccess", false, (request) => {
        const sandbox = this.sandbox(request["sandboxId"])
        if (sandbox.state !== "running") throw new Fault(status.FAILED_PRECONDITION, "the sandbox has no running task")
        return this.routerAccess()
      }),
      TaskGetCommandRouterAccess: this.unary("TaskGetCommandRouterAccess", false, (request) => {
        this.byTask(request["taskId"])
        return this.routerAccess()
      })
    }
  }

  // ---- the command router -----------------------------------------------------------------------

  private exec(request: Req): FakeExec {
    const sandbox = this.byTask(request["taskId"])
    const exec = sandbox.execs.get(request["execId"])
    if (exec === undefined) throw new Fault(status.NOT_FOUND, `exec ${request["execId"]} not found`)
    return exec
  }

  private router() {
    const exitStatus = (status: ExitStatus | undefined): Req => status ?? {}
    return {
      TaskExecStart: this.unary("TaskExecStart", true, (request) => {
        const sandbox = this.byTask(request["taskId"])
        if (sandbox.execs.has(request["execId"])) return {}
        const argv: Array<string> = request["commandArgs"]
        const size = argv.reduce((sum, arg) => sum + Buffer.byteLength(arg) + 1, 0)
        if (size > ARG_MAX) throw new Fault(status.INVALID_ARGUMENT, `argument list too long (${size} bytes)`)
        if ((request["secretIds"] ?? []).length > 0) throw new Fault(status.UNIMPLEMENTED, "the fake has no secrets")
        const env: Record<string, string> = { ...SANDBOX_ENV }
        if (request["ptyInfo"]?.["enabled"]) env["TERM"] = request["ptyInfo"]["envTerm"] || "xterm-256color"
        for (const source of request["secretSources"] ?? []) Object.assign(env, source["env"]?.["contents"] ?? {})
        Object.assign(env, request["env"] ?? {})
        const pty = request["ptyInfo"]?.["enabled"] === true
        try {
          sandbox.execs.set(request["execId"], new FakeExec(sandbox.process!.pid, argv, env, pty, request["workdir"] || undefined))
        } catch (error) {
          // E2BIG: the exec's argv and environment exceed what the kernel takes in one execve.
          throw new Fault(status.INVALID_ARGUMENT, `cannot start the command: ${String(error)}`)
        }
        return {}
      }),
      TaskExecStdioRead: (call: ServerWritableStream<Req, Req>) => {
        const fail = (fault: Fault) => call.destroy(Object.assign(new Error(fault.details), { code: fault.code, details: fault.details }))
        let exec: FakeExec
        try {
          this.guard("TaskExecStdioRead", call.metadata, call.request, true)
          exec = this.exec(call.request)
        } catch (error) {
          return fail(error instanceof Fault ? error : new Fault(status.INTERNAL, String(error)))
        }
        const log = call.request["fileDescriptor"] === 1 ? exec.stderr : exec.stdout
        let cancelled = false
        call.on("cancelled", () => (cancelled = true))
        const pump = async () => {
          let offset = Number(call.request["offset"] ?? 0)
          while (!cancelled) {
            const data = await log.read(offset, 64 * 1024, () => cancelled)
            if (data.length === 0) {
              if (log.ended && offset >= log.size) return call.end()
              continue
            }
            offset += data.length
            if (!call.write({ data })) await new Promise((resolve) => call.once("drain", resolve))
          }
        }
        void pump()
      },
      TaskExecStdinWrite: this.unary("TaskExecStdinWrite", true, async (request) => {
        const exec = this.exec(request)
        await exec.write(Number(request["offset"]), Buffer.from(request["data"] ?? []), request["eof"] === true).catch((error: Error) => {
          throw new Fault(status.FAILED_PRECONDITION, error.message)
        })
        return {}
      }),
      TaskExecWait: this.unary("TaskExecWait", true, async (request) => exitStatus(await this.exec(request).exited)),
      TaskExecPoll: this.unary("TaskExecPoll", true, (request) => exitStatus(this.exec(request).status)),
      TaskSnapshotFilesystem: this.unary("TaskSnapshotFilesystem", true, (request) => {
        const sandbox = this.byTask(request["taskId"])
        const ttl = request["ttlSeconds"] === undefined ? undefined : Number(request["ttlSeconds"])
        if (ttl === undefined || (ttl <= 0 && ttl !== -1)) throw new Fault(status.INVALID_ARGUMENT, `invalid ttl_seconds: ${ttl}`)
        return { imageId: this.images.snapshot(join(this.root, sandbox.sandboxId), request["snapshotId"]) }
      })
    }
  }
}

/** The SDK's logger for tests: warnings and errors to stderr, nothing to stdout. */
export const quietLogger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: (message: string, ...args: Array<unknown>) => process.stderr.write(`modal sdk: ${message} ${args.join(" ")}\n`)
}

/** The RPCs the fake answers (the contract test checks their messages against the SDK). */
export const SERVED = {
  "modal.client.ModalClient": [
    "AuthTokenGet", "EnvironmentGetOrCreate", "AppGetOrCreate", "ImageGetOrCreate", "ImageFromId", "ImageDelete", "SandboxCreate", "SandboxCreateV2",
    "SandboxGetFromName", "SandboxGetFromNameV2", "SandboxList", "SandboxListV2", "SandboxTagsGet", "SandboxTagsGetV2",
    "SandboxWait", "SandboxWaitV2", "SandboxTerminate", "SandboxTerminateV2", "SandboxGetTaskId", "SandboxGetTaskIdV2",
    "SandboxGetCommandRouterAccess", "TaskGetCommandRouterAccess", "SandboxGetTunnels", "SandboxGetTunnelsV2"
  ],
  "modal.task_command_router.TaskCommandRouter": ["TaskExecStart", "TaskExecStdioRead", "TaskExecStdinWrite", "TaskExecWait", "TaskExecPoll", "TaskSnapshotFilesystem"]
} as const

/** The Modal backend's options over this fake's client (only Modal's own flags: no Docker --image). */
export const backendOptions = (
  fake: ModalFake,
  overrides: Partial<ModalBackendOptions> = {}
): ModalBackendOptions => ({
  tokenId: undefined,
  tokenSecret: undefined,
  appName: "kilntainers",
  image: "debian:bookworm-slim",
  cpu: 1,
  memoryMb: 512,
  gpu: undefined,
  region: undefined,
  sandboxTimeoutSec: 3600,
  network: false,
  client: fake.client(),
  watchIntervalMs: 200,
  ...overrides
})

/** Starts a fake with the default options. */
export const start = (options: ModalFakeOptions = {}) => ModalFake.start(options)
