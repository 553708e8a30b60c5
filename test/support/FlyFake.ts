/**
 * A local fake of the Fly Machines REST API (`/v1/apps/{app}/machines…`) that cannot lie about the
 * contract: every request it receives and every answer it gives is checked against Fly's
 * published OpenAPI document (contracts/fly/machines-openapi.json, OpenApiContract.ts). A request
 * that breaks it is refused with 400 and recorded in `violations`; an answer of the fake that
 * breaks it is recorded too — tests assert `violations` stays empty.
 *
 * Behaviour, from the API document and docs: bearer (or FlyV1) auth → 401, machine states and
 * transitions (created → starting → started → stopping → stopped → destroying → destroyed; a stop
 * takes `stopDelayMs`, during which the machine is `stopping` and cannot be started), `metadata.*`
 * filters on list, `/wait` answering a WaitMachineResponse or 408 on timeout (waiting for `stopped`
 * needs `instance_id`, as the docs say; without it, 400), exec answering 200 with `exit_code` also
 * when the command fails, `config.files` and `config.init`, `config.services` checked as Fly does
 * (FlyFakeServices.ts, which also routes a public port), and documented statuses: a taken name
 * is 422, an action on a machine in the wrong state is 400 (`failed_precondition`); 409 and 412
 * (a lease or capacity conflict, a version or volume precondition) come from `failNext`.
 *
 * The rate limit is on by default at Fly's documented values (1 request/s, burst 3 per action and
 * machine; Get Machine 5/s, burst 10), and a refusal carries `Retry-After` only every other time
 * (`retryAfter: "alternate"`), so clients must cope without it.
 *
 * The routes of one machine are FlyFakeMachineRoutes.ts, the buckets FlyFakeLimits.ts.
 * Machines really run (FlyFakeVm.ts); by default processes an exec leaves behind are killed when
 * it ends. Faults for tests: the next N requests fail or are delayed, or are done and then
 * answered with an error (`failAfter`: the answer is lost, not the work, as when Fly's proxy gives
 * up on a call that still ran); a machine destroyed, stopped or restarted from outside. Every
 * request is recorded.
 */
import { randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:http"
import type { IncomingMessage, ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
export type { RateLimit } from "./FlyFakeLimits.js"
import { checkRequest, checkResponse } from "./contracts/fly/OpenApiContract.js"
import { Buckets, FLY_LIMIT, GET_LIMIT, type RateLimit } from "./FlyFakeLimits.js"
import { type ExecChildren, FakeVm } from "./FlyFakeVm.js"
import { type MachineControls, machineRoute } from "./FlyFakeMachineRoutes.js"
import { invalidServices } from "./FlyFakeServices.js"

export interface FakeMachine {
  readonly id: string
  readonly name: string
  readonly region: string
  state: string
  instance_id: string
  config: Record<string, any>
  readonly created_at: string
  updated_at: string
  readonly vm: FakeVm
  /** Bumped whenever the machine boots or goes down. */
  boot: number
}

export interface FakeRequest {
  readonly method: string
  readonly path: string
  readonly action: string
  readonly machine: string | undefined
  readonly status: number
  readonly retryAfter: string | undefined
  readonly at: number
}

export interface FlyFakeOptions {
  readonly token: string
  readonly app: string
  /** Time between a sandbox being ready and the machine being `started` (default 0). */
  readonly bootDelayMs?: number
  /** Per action and machine (default Fly's 1/s, burst 3); `false` for none. Get Machine is 5/s, burst 10. */
  readonly rateLimit?: RateLimit | false
  /** When a 429 says Retry-After (default: every other time). */
  readonly retryAfter?: "always" | "never" | "alternate"
  /** What happens to processes an exec leaves behind (default: killed when it ends). */
  readonly execChildren?: ExecChildren
  /** How long a machine is `stopping` before it is `stopped` (default 300 ms). */
  readonly stopDelayMs?: number
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export class FlyFake {
  readonly machines = new Map<string, FakeMachine>()
  readonly requests: Array<FakeRequest> = []
  /** Contract violations, by the fake's clients (requests) or by the fake itself (answers). */
  readonly violations: Array<string> = []
  rateLimit: RateLimit | undefined
  retryAfter: "always" | "never" | "alternate"
  execChildren: ExecChildren
  bootDelayMs: number
  stopDelayMs: number
  private refusals = 0
  private readonly buckets = new Buckets()
  private faults: Array<{ count: number; status: number; match: RegExp | undefined }> = []
  private delays: Array<{ count: number; ms: number; match: RegExp | undefined }> = []
  private lost: Array<{ count: number; status: number; match: RegExp | undefined }> = []
  private readonly waiters = new Set<() => void>()
  private readonly root = mkdtempSync(join(tmpdir(), "kt-fly-fake-"))
  private readonly server = createServer((request, response) => {
    this.handle(request, response).catch((error: unknown) => {
      if (!response.headersSent) this.send(response, 500, { error: `fake: ${String(error)}` })
    })
  })
  private readonly ticker: ReturnType<typeof setInterval>
  /** What the routes of one machine (FlyFakeMachineRoutes.ts) may do to it. */
  private readonly controls: MachineControls = {
    launch: (machine) => this.launch(machine),
    stop: (machine, then) => this.stop(machine, then),
    destroy: (machine) => this.destroy(machine),
    view: (machine) => this.view(machine),
    waitFor: (machine, state, timeoutMs) => this.waitFor(machine, state, timeoutMs),
    execChildren: () => this.execChildren
  }
  url = ""

  constructor(readonly options: FlyFakeOptions) {
    this.ticker = setInterval(() => this.tick(), 100)
    this.bootDelayMs = options.bootDelayMs ?? 0
    this.stopDelayMs = options.stopDelayMs ?? 300
    this.rateLimit = options.rateLimit === false ? undefined : (options.rateLimit ?? FLY_LIMIT)
    this.retryAfter = options.retryAfter ?? "alternate"
    this.execChildren = options.execChildren ?? "killed"
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve))
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`
    return this
  }

  async close(): Promise<void> {
    clearInterval(this.ticker)
    for (const machine of this.machines.values()) machine.vm.stop()
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
    rmSync(this.root, { recursive: true, force: true })
  }

  // ---- test controls ------------------------------------------------------------------------------
  /** The next `count` requests (matching `METHOD path`) answer `status` without doing anything. */
  failNext(count: number, status = 503, match?: RegExp) {
    this.faults.push({ count, status, match })
  }
  /** The next `count` requests (matching `METHOD path`) are held `ms` before being handled. */
  delayNext(count: number, ms: number, match?: RegExp) {
    this.delays.push({ count, ms, match })
  }
  /** The next `count` requests (matching `METHOD path`) are done, then answered `status` (the answer is lost, not the work). */
  failAfter(count: number, status: number, match?: RegExp) {
    this.lost.push({ count, status, match })
  }
  clearFaults() {
    this.faults = []
    this.delays = []
    this.lost = []
  }
  destroyFromOutside(id: string) {
    const machine = this.machines.get(id)
    if (machine) this.destroy(machine)
  }
  stopFromOutside(id: string) {
    const machine = this.machines.get(id)
    if (machine) this.stop(machine)
  }
  /** A restart nobody asked us for (a host event, a crash with restart policy always). */
  restartFromOutside(id: string) {
    const machine = this.machines.get(id)
    if (machine) this.launch(machine)
  }
  live(): Array<FakeMachine> {
    return [...this.machines.values()].filter((machine) => machine.state !== "destroyed")
  }
  byName(name: string): FakeMachine | undefined {
    return this.live().find((machine) => machine.name === name)
  }

  // ---- machine model -----------------------------------------------------------------------------
  private setState(machine: FakeMachine, state: string) {
    machine.state = state
    machine.updated_at = new Date().toISOString()
    for (const wake of [...this.waiters]) wake()
  }

  private launch(machine: FakeMachine) {
    const boot = ++machine.boot
    this.setState(machine, "starting")
    machine.instance_id = randomBytes(13).toString("hex").toUpperCase()
    void machine.vm.boot(machine.config).then(async (ready) => {
      if (!ready) return
      await sleep(this.bootDelayMs)
      if (machine.boot === boot && machine.state === "starting") this.setState(machine, "started")
    })
  }

  /** The main process ended (or the sandbox died): restart policy, else stopped (auto_destroy → destroyed). */
  private exited(machine: FakeMachine) {
    if (machine.config["restart"]?.policy === "always") return this.launch(machine)
    this.stop(machine)
  }

  /** Stopping takes `stopDelayMs`; `then` (a restart) runs once the machine is stopped, unless it went elsewhere meanwhile. */
  private stop(machine: FakeMachine, then?: () => void) {
    const boot = ++machine.boot
    this.setState(machine, "stopping")
    machine.vm.stop()
    const stopped = () => {
      if (machine.boot !== boot || machine.state !== "stopping") return
      this.setState(machine, "stopped")
      // A restart goes on from here; a stop of an auto_destroy machine ends it.
      if (then !== undefined) then()
      else if (machine.config["auto_destroy"] === true) this.destroy(machine)
    }
    if (this.stopDelayMs <= 0) stopped()
    else setTimeout(stopped, this.stopDelayMs).unref()
  }

  private destroy(machine: FakeMachine) {
    machine.boot++
    this.setState(machine, "destroying")
    machine.vm.stop()
    rmSync(machine.vm.dir, { recursive: true, force: true })
    this.setState(machine, "destroyed")
  }

  private tick() {
    for (const machine of this.machines.values()) {
      if (machine.state === "started" && machine.vm.mainExited()) this.exited(machine)
    }
  }

  private view(machine: FakeMachine) {
    const image = String(machine.config["image"])
    return {
      id: machine.id,
      name: machine.name,
      state: machine.state,
      region: machine.region,
      instance_id: machine.instance_id,
      private_ip: "fdaa:0:1:a7b:1::2",
      config: machine.config,
      image_ref: { registry: "registry-1.docker.io", repository: image.split(":")[0]!, tag: image.split(":")[1] ?? "latest" },
      created_at: machine.created_at,
      updated_at: machine.updated_at,
      events: []
    }
  }

  private async waitFor(machine: FakeMachine, state: string, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs
    while (machine.state !== state) {
      const left = deadline - Date.now()
      if (left <= 0) return false
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.waiters.delete(wake)
          clearTimeout(timer)
          resolve()
        }
        const timer = setTimeout(wake, left)
        this.waiters.add(wake)
      })
    }
    return true
  }

  // ---- HTTP --------------------------------------------------------------------------------------
  private send(response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
    if (status === 204) {
      response.writeHead(status, headers)
      return response.end()
    }
    response.writeHead(status, { "content-type": "application/json", ...headers })
    response.end(JSON.stringify(body))
  }

  private take<T extends { count: number; match: RegExp | undefined }>(list: Array<T>, key: string): T | undefined {
    const found = list.find((entry) => entry.count > 0 && (entry.match === undefined || entry.match.test(key)))
    if (found) found.count--
    return found
  }

  /** A token of the action's bucket, or the seconds until one is there. */
  private limited(action: string, scope: string): number | undefined {
    return this.buckets.take(`${action} ${scope}`, action === "GET machine" ? (this.rateLimit && GET_LIMIT) : this.rateLimit)
  }

  private async handle(request: IncomingMessage, response: ServerResponse) {
    const url = new URL(request.url ?? "/", "http://fake")
    const method = request.method ?? "GET"
    const chunks: Array<Buffer> = []
    for await (const chunk of request) chunks.push(chunk as Buffer)
    const text = Buffer.concat(chunks).toString("utf8")
    const match = /^\/v1\/apps\/([^/]+)\/machines(?:\/([^/]+)(?:\/([^/]+)(?:\/([^/]+))?)?)?$/.exec(url.pathname)
    const machineId = match?.[2]
    const sub = match?.[3]
    const action = match === null ? "unknown" : `${method} ${sub ?? (machineId === undefined ? "machines" : "machine")}`
    let status = 0
    let retryAfter: string | undefined
    const reply = (code: number, body: unknown, headers: Record<string, string> = {}) => {
      status = code
      retryAfter = headers["retry-after"]
      const broken = checkResponse({ method, pathname: url.pathname, status: code, body: code === 204 ? undefined : body })
      if (broken.length > 0) this.violations.push(...broken.map((problem) => `fake answer: ${problem}`))
      this.send(response, code, body, headers)
    }
    try {
      const auth = request.headers.authorization ?? ""
      const token = /^(?:Bearer|FlyV1) (.+)$/.exec(auth)?.[1]
      if (token !== this.options.token) return reply(401, { error: "unauthorized" })
      if (match === null) return reply(404, { error: "not found" })
      if (decodeURIComponent(match[1]!) !== this.options.app) return reply(404, { error: "app not found" })
      let body: Record<string, any> | undefined
      try {
        body = text === "" ? undefined : JSON.parse(text)
      } catch {
        return reply(400, { error: "invalid_argument: the body is not JSON" })
      }
      const broken = checkRequest({ method, pathname: url.pathname, query: url.searchParams, body })
      if (broken.length > 0) {
        this.violations.push(...broken.map((problem) => `request: ${problem}`))
        return reply(400, { error: `invalid_argument: ${broken.join("; ")}` })
      }
      const key = `${method} ${url.pathname}`
      const delay = this.take(this.delays, key)
      if (delay) await sleep(delay.ms)
      const fault = this.take(this.faults, key)
      if (fault) return reply(fault.status, { error: `injected fault ${fault.status}` })
      const lost = this.take(this.lost, key)
      const wait = this.limited(action, machineId ?? "app")
      if (wait !== undefined) {
        const say = this.retryAfter === "always" || (this.retryAfter === "alternate" && this.refusals++ % 2 === 0)
        return reply(429, { error: "rate limit exceeded" }, say ? { "retry-after": String(wait) } : {})
      }
      if (lost) {
        await this.route(method, url, machineId, sub, match[4], body ?? {}, () => {})
        return reply(lost.status, { error: `injected fault ${lost.status} after the request was done` })
      }
      return await this.route(method, url, machineId, sub, match[4], body ?? {}, reply)
    } finally {
      this.requests.push({ method, path: url.pathname, action, machine: machineId, status, retryAfter, at: Date.now() })
    }
  }

  private async route(
    method: string,
    url: URL,
    machineId: string | undefined,
    sub: string | undefined,
    key: string | undefined,
    body: Record<string, any>,
    reply: (code: number, body: unknown, headers?: Record<string, string>) => void
  ) {
    if (machineId === undefined) {
      if (method === "GET") {
        const filters = [...url.searchParams].filter(([name]) => name.startsWith("metadata."))
        const includeDeleted = url.searchParams.get("include_deleted") === "true"
        const machines = [...this.machines.values()].filter((machine) =>
          (includeDeleted || machine.state !== "destroyed") &&
          filters.every(([name, value]) => machine.config["metadata"]?.[name.slice("metadata.".length)] === value)
        )
        return reply(200, machines.map((machine) => this.view(machine)))
      }
      const config = body["config"]
      if (typeof config?.image !== "string" || config.image === "") return reply(400, { error: "invalid_argument: config.image is required" })
      const badServices = invalidServices(config["services"])
      if (badServices !== undefined) return reply(400, { error: `invalid_argument: ${badServices}` })
      const name = typeof body["name"] === "string" && body["name"] !== "" ? body["name"] : `machine-${randomBytes(4).toString("hex")}`
      if (this.byName(name)) return reply(422, { error: `already_exists: unable to create machine: machine name "${name}" is already in use` })
      const id = randomBytes(7).toString("hex")
      const now = new Date().toISOString()
      const machine: FakeMachine = {
        id,
        name,
        region: typeof body["region"] === "string" ? body["region"] : "fra",
        state: "created",
        instance_id: "",
        config,
        created_at: now,
        updated_at: now,
        vm: new FakeVm(join(this.root, id), id, () => {
          if (machine.state === "started" || machine.state === "starting") this.exited(machine)
        }),
        boot: 0
      }
      this.machines.set(id, machine)
      if (body["skip_launch"] !== true) this.launch(machine)
      return reply(200, this.view(machine))
    }
    const machine = this.machines.get(machineId)
    if (machine === undefined) return reply(404, { error: "machine not found" })
    return machineRoute(this.controls, machine, method, url, sub, key, body, reply)
  }
}

export const startFlyFake = (options: FlyFakeOptions): Promise<FlyFake> => new FlyFake(options).start()

/** Whether a path exists in a machine's root filesystem (tests look inside). */
export const rootfsHas = (machine: FakeMachine, path: string) => existsSync(join(machine.vm.rootfs(), path))
