/**
 * A local fake of the Fly Machines REST API (`/v1/apps/{app}/machines…`), following the published
 * API (superfly/docs, fly-go): bearer (or FlyV1) auth → 401, machine states and transitions
 * (created → starting → started → stopping → stopped → destroying → destroyed), `metadata.*`
 * filters on list, `/wait` with 408 on timeout, exec answering HTTP 200 with `exit_code` (also
 * when the command fails), 422 on a taken name, 409 on stop/exec of a machine that is not started,
 * 412 on destroy of a running machine without `force`, metadata endpoints, `{"error": "…"}`
 * bodies, and a configurable per-action-per-machine rate limit (429 with Retry-After).
 *
 * Machines really run: each is one long-lived bubblewrap sandbox (own pid namespace, no network,
 * /usr /etc … read-only from the host as in HostBackend's sandbox) whose writable "rootfs" is a
 * per-machine directory bound at /home, /tmp and /root. The machine's main process is
 * `config.init.exec`; a small shell "flyd" inside serves exec requests through a control FIFO at
 * /run/flyd, each exec in its own session — so a detached process keeps running after the exec
 * that started it returns, until the machine stops. Stop/restart kill every process of the
 * machine; restart keeps the rootfs when `rootfs.persist` is `restart` or `always` and wipes it
 * otherwise; destroy removes everything. When the main process exits, the machine stops
 * (auto_destroy → destroyed).
 *
 * Faults for tests: the next N requests fail with a status, or are delayed; a machine destroyed or
 * stopped from outside. Every request is recorded (method, path, action, status, time).
 */
import type { ChildProcess } from "node:child_process"
import { spawn, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { closeSync, constants, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs"
import { createServer } from "node:http"
import type { IncomingMessage, ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { sandboxArgs } from "../../src/layers/backends/HostBackend.js"

export interface FakeMachine {
  readonly id: string
  readonly name: string
  readonly region: string
  state: string
  instance_id: string
  config: Record<string, any>
  readonly created_at: string
  updated_at: string
  readonly dir: string
  sandbox: ChildProcess | undefined
  /** Bumped whenever the sandbox is replaced or killed. */
  boot: number
}

export interface FakeRequest {
  readonly method: string
  readonly path: string
  readonly action: string
  readonly machine: string | undefined
  readonly status: number
  readonly at: number
}

export interface FlyFakeOptions {
  readonly token: string
  readonly app: string
  /** Time between a sandbox being ready and the machine being `started` (default 0). */
  readonly bootDelayMs?: number
}

const SERVER = [
  `C=/run/flyd`,
  `setsid -f /bin/sh -c '"$@" </dev/null >/dev/null 2>&1; echo $? > /run/flyd/main.exit' main "$@"`,
  `exec 3<>"$C/ctl"`,
  `: > "$C/ready"`,
  `while read -r n <&3; do`,
  `  setsid -f /bin/sh -c 'cd /; /bin/sh "$1/cmd" < "$1/stdin" > "$1/out" 2> "$1/err"; echo $? > "$1/code.t"; mv "$1/code.t" "$1/code"' h "/run/flyd/req/$n" </dev/null >/dev/null 2>&1`,
  `done`
].join("\n")

const quote = (value: string) => `'${value.replace(/'/g, `'\\''`)}'`
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export class FlyFake {
  readonly machines = new Map<string, FakeMachine>()
  readonly requests: Array<FakeRequest> = []
  /** Per action and machine (or app): a token bucket; undefined = unlimited. */
  rateLimit: { readonly perSecond: number; readonly burst: number } | undefined
  private readonly buckets = new Map<string, { tokens: number; last: number }>()
  private faults: Array<{ count: number; status: number; match: RegExp | undefined }> = []
  private delays: Array<{ count: number; ms: number; match: RegExp | undefined }> = []
  private readonly waiters = new Set<() => void>()
  /** Time between a sandbox being ready and the machine being `started`. */
  bootDelayMs: number
  private execSeq = 0
  private readonly root = mkdtempSync(join(tmpdir(), "kt-fly-fake-"))
  private readonly server = createServer((request, response) => {
    this.handle(request, response).catch((error: unknown) => {
      if (!response.headersSent) this.send(response, 500, { error: `fake: ${String(error)}` })
    })
  })
  private readonly ticker: ReturnType<typeof setInterval>
  url = ""

  constructor(readonly options: FlyFakeOptions) {
    this.ticker = setInterval(() => this.tick(), 100)
    this.bootDelayMs = options.bootDelayMs ?? 0
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve))
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`
    return this
  }

  async close(): Promise<void> {
    clearInterval(this.ticker)
    for (const machine of this.machines.values()) this.kill(machine)
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
  /** Drops every pending injected failure and delay. */
  clearFaults() {
    this.faults = []
    this.delays = []
  }
  destroyFromOutside(id: string) {
    const machine = this.machines.get(id)
    if (machine) this.destroy(machine)
  }
  stopFromOutside(id: string) {
    const machine = this.machines.get(id)
    if (machine) this.stop(machine)
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

  private rootfs(machine: FakeMachine) {
    return join(machine.dir, "rootfs")
  }

  private kill(machine: FakeMachine) {
    machine.boot++
    const sandbox = machine.sandbox
    machine.sandbox = undefined
    if (sandbox && sandbox.exitCode === null && sandbox.signalCode === null) sandbox.kill("SIGKILL")
  }

  private launch(machine: FakeMachine) {
    this.kill(machine)
    const boot = machine.boot
    this.setState(machine, "starting")
    machine.instance_id = randomBytes(13).toString("hex").toUpperCase()
    const rootfs = this.rootfs(machine)
    const ctl = join(machine.dir, "ctl")
    rmSync(ctl, { recursive: true, force: true })
    for (const dir of [join(rootfs, "home"), join(rootfs, "tmp"), join(rootfs, "root"), join(ctl, "req")]) {
      mkdirSync(dir, { recursive: true })
    }
    spawnSync("mkfifo", [join(ctl, "ctl")])
    const init: Array<string> = Array.isArray(machine.config["init"]?.exec) ? machine.config["init"].exec : ["sleep", "inf"]
    const child = spawn("bwrap", [
      ...sandboxArgs({ hostname: machine.id, network: false }),
      "--bind", join(rootfs, "home"), "/home",
      "--bind", join(rootfs, "tmp"), "/tmp",
      "--bind", join(rootfs, "root"), "/root",
      "--bind", ctl, "/run/flyd",
      "--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "--setenv", "HOME", "/root",
      "--chdir", "/",
      "--", "/bin/sh", "-c", SERVER, "flyd", ...init
    ], { stdio: "ignore", env: { PATH: "/usr/bin:/bin" } })
    machine.sandbox = child
    child.on("exit", () => {
      if (machine.boot === boot && (machine.state === "started" || machine.state === "starting")) this.exited(machine)
    })
    void (async () => {
      for (let i = 0; i < 1000 && machine.boot === boot && !existsSync(join(ctl, "ready")); i++) await sleep(10)
      await sleep(this.bootDelayMs)
      if (machine.boot === boot && machine.state === "starting") this.setState(machine, "started")
    })()
  }

  /** The main process ended (or the sandbox died): the machine stops, auto_destroy removes it. */
  private exited(machine: FakeMachine) {
    if (machine.config["restart"]?.policy === "always") return this.launch(machine)
    this.stop(machine)
  }

  private stop(machine: FakeMachine) {
    this.setState(machine, "stopping")
    this.kill(machine)
    this.setState(machine, "stopped")
    if (machine.config["auto_destroy"] === true) this.destroy(machine)
  }

  private destroy(machine: FakeMachine) {
    this.setState(machine, "destroying")
    this.kill(machine)
    rmSync(machine.dir, { recursive: true, force: true })
    this.setState(machine, "destroyed")
  }

  private tick() {
    for (const machine of this.machines.values()) {
      if (machine.state === "started" && existsSync(join(machine.dir, "ctl", "main.exit"))) this.exited(machine)
    }
  }

  private view(machine: FakeMachine) {
    return {
      id: machine.id,
      name: machine.name,
      state: machine.state,
      region: machine.region,
      instance_id: machine.instance_id,
      private_ip: "fdaa:0:1:a7b:1::2",
      config: machine.config,
      image_ref: { registry: "registry-1.docker.io", repository: String(machine.config["image"]).split(":")[0], tag: String(machine.config["image"]).split(":")[1] ?? "latest" },
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

  private async exec(machine: FakeMachine, argv: ReadonlyArray<string>, stdin: string, timeoutSeconds: number) {
    const boot = machine.boot
    const n = ++this.execSeq
    const dir = join(machine.dir, "ctl", "req", String(n))
    mkdirSync(dir)
    writeFileSync(join(dir, "cmd"), `exec ${argv.map(quote).join(" ")}\n`)
    writeFileSync(join(dir, "stdin"), stdin)
    const fd = openSync(join(machine.dir, "ctl", "ctl"), constants.O_WRONLY | constants.O_NONBLOCK)
    try {
      writeSync(fd, `${n}\n`)
    } finally {
      closeSync(fd)
    }
    const deadline = Date.now() + timeoutSeconds * 1000
    while (!existsSync(join(dir, "code"))) {
      if (machine.boot !== boot) return { status: 409, body: { error: "machine was stopped while the command ran" } }
      if (Date.now() > deadline) return { status: 408, body: { error: "deadline_exceeded: the command did not finish within its timeout" } }
      await sleep(3)
    }
    const result = {
      stdout: readFileSync(join(dir, "out"), "utf8"),
      stderr: readFileSync(join(dir, "err"), "utf8"),
      exit_code: Number(readFileSync(join(dir, "code"), "utf8").trim()),
      exit_signal: 0
    }
    rmSync(dir, { recursive: true, force: true })
    return { status: 200, body: result }
  }

  // ---- HTTP --------------------------------------------------------------------------------------
  private send(response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
    response.writeHead(status, { "content-type": "application/json", ...headers })
    response.end(JSON.stringify(body))
  }

  private take<T extends { count: number; match: RegExp | undefined }>(list: Array<T>, key: string): T | undefined {
    const found = list.find((entry) => entry.count > 0 && (entry.match === undefined || entry.match.test(key)))
    if (found) found.count--
    return found
  }

  private limited(key: string): number | undefined {
    const limit = this.rateLimit
    if (limit === undefined) return undefined
    const now = Date.now()
    const bucket = this.buckets.get(key) ?? { tokens: limit.burst, last: now }
    bucket.tokens = Math.min(limit.burst, bucket.tokens + ((now - bucket.last) / 1000) * limit.perSecond)
    bucket.last = now
    this.buckets.set(key, bucket)
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1
      return undefined
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / limit.perSecond))
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
    const reply = (code: number, body: unknown, headers?: Record<string, string>) => {
      status = code
      this.send(response, code, body, headers)
    }
    try {
      const auth = request.headers.authorization ?? ""
      const token = /^(?:Bearer|FlyV1) (.+)$/.exec(auth)?.[1]
      if (token !== this.options.token) return reply(401, { error: "unauthorized" })
      if (match === null) return reply(404, { error: "not found" })
      if (decodeURIComponent(match[1]!) !== this.options.app) return reply(404, { error: "app not found" })
      const key = `${method} ${url.pathname}`
      const delay = this.take(this.delays, key)
      if (delay) await sleep(delay.ms)
      const fault = this.take(this.faults, key)
      if (fault) return reply(fault.status, { error: `injected fault ${fault.status}` })
      const retryAfter = this.limited(`${action} ${machineId ?? "app"}`)
      if (retryAfter !== undefined) return reply(429, { error: "rate limit exceeded" }, { "retry-after": String(retryAfter) })
      const body: Record<string, any> = text === "" ? {} : JSON.parse(text)

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
        if (method === "POST") {
          const config = body["config"]
          if (typeof config?.image !== "string" || config.image === "") return reply(400, { error: "invalid_argument: config.image is required" })
          const name = typeof body["name"] === "string" && body["name"] !== "" ? body["name"] : `machine-${randomBytes(4).toString("hex")}`
          if (this.byName(name)) return reply(422, { error: `already_exists: unable to create machine: machine name "${name}" is already in use` })
          const memory = config.guest?.memory_mb
          if (memory !== undefined && (!Number.isInteger(memory) || memory % 256 !== 0)) {
            return reply(400, { error: "invalid_argument: memory_mb must be a multiple of 256" })
          }
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
            dir: join(this.root, id),
            sandbox: undefined,
            boot: 0
          }
          this.machines.set(id, machine)
          if (body["skip_launch"] !== true) this.launch(machine)
          return reply(200, this.view(machine))
        }
        return reply(405, { error: "method not allowed" })
      }

      const machine = this.machines.get(machineId)
      if (machine === undefined) return reply(404, { error: "machine not found" })
      if (sub === undefined) {
        if (method === "GET") return reply(200, this.view(machine))
        if (method === "DELETE") {
          const force = url.searchParams.get("force") === "true" || url.searchParams.get("kill") === "true"
          if (machine.state === "destroyed") return reply(404, { error: "machine not found" })
          if (machine.state === "started" && !force) return reply(412, { error: "failed_precondition: unable to destroy machine, not currently stopped" })
          this.destroy(machine)
          return reply(200, { ok: true })
        }
        return reply(405, { error: "method not allowed" })
      }
      switch (`${method} ${sub}`) {
        case "GET wait": {
          const state = url.searchParams.get("state") ?? "started"
          const timeout = Number(url.searchParams.get("timeout") ?? "60")
          if (!Number.isInteger(timeout) || timeout < 1 || timeout > 60) return reply(400, { error: "invalid_argument: timeout must be between 1 and 60 seconds" })
          if (!["started", "stopped", "suspended", "destroyed"].includes(state)) return reply(400, { error: `invalid_argument: invalid state "${state}"` })
          const reached = await this.waitFor(machine, state, timeout * 1000)
          return reached ? reply(200, { ok: true }) : reply(408, { error: `deadline_exceeded: machine did not reach state ${state}` })
        }
        case "POST start":
          if (machine.state === "destroyed" || machine.state === "destroying") return reply(412, { error: "failed_precondition: machine is destroyed" })
          if (machine.state === "started" || machine.state === "starting") return reply(200, { previous_state: machine.state })
          {
            const previous = machine.state
            this.launch(machine)
            return reply(200, { previous_state: previous })
          }
        case "POST stop":
          if (machine.state !== "started") return reply(409, { error: "unable to stop machine, not currently started" })
          this.stop(machine)
          return reply(200, { ok: true })
        case "POST restart":
          if (machine.state !== "started") return reply(409, { error: "unable to restart machine, not currently started" })
          this.setState(machine, "stopping")
          this.kill(machine)
          this.setState(machine, "stopped")
          if (!["restart", "always"].includes(machine.config["rootfs"]?.persist)) rmSync(this.rootfs(machine), { recursive: true, force: true })
          this.launch(machine)
          return reply(200, { ok: true })
        case "POST exec": {
          if (machine.state !== "started") return reply(409, { error: "unable to exec, machine not currently started" })
          const argv: Array<string> | undefined = Array.isArray(body["command"])
            ? body["command"]
            : typeof body["cmd"] === "string" ? body["cmd"].split(/\s+/).filter((word: string) => word !== "") : undefined
          if (argv === undefined || argv.length === 0) return reply(400, { error: "invalid_argument: command is required" })
          const timeout = typeof body["timeout"] === "number" && body["timeout"] > 0 ? body["timeout"] : 60
          const result = await this.exec(machine, argv, typeof body["stdin"] === "string" ? body["stdin"] : "", timeout)
          return reply(result.status, result.body)
        }
        case "GET metadata":
          return reply(200, machine.config["metadata"] ?? {})
        case "POST metadata":
        case "DELETE metadata": {
          const name = match[4] === undefined ? undefined : decodeURIComponent(match[4])
          if (name === undefined) return reply(400, { error: "invalid_argument: metadata key is required" })
          const metadata = { ...machine.config["metadata"] }
          if (method === "POST") {
            if (typeof body["value"] !== "string") return reply(400, { error: "invalid_argument: value is required" })
            metadata[name] = body["value"]
          } else {
            delete metadata[name]
          }
          machine.config = { ...machine.config, metadata }
          return reply(method === "POST" ? 200 : 204, method === "POST" ? { ok: true } : {})
        }
        default:
          return reply(404, { error: "not found" })
      }
    } finally {
      this.requests.push({ method, path: url.pathname, action, machine: machineId, status, at: Date.now() })
    }
  }
}

export const startFlyFake = (options: FlyFakeOptions): Promise<FlyFake> => new FlyFake(options).start()
