/**
 * A fake Modal for the Modal backend's tests: a ModalGatewayService whose sandboxes really run
 * commands. A sandbox is one long-lived bubblewrap (`sleep infinity` as its main process) with its
 * own pid, ipc, uts (and, with blockNetwork, net) namespaces; every exec enters those namespaces
 * with `nsenter`, so the execs of one sandbox see each other's processes like on Modal.
 *
 * Layout of a sandbox: /usr, /etc read-only (bin/lib symlinks as on merged-usr hosts), a fresh /proc
 * and /dev, /home/agent = `<root>/<sandbox id>/home` and /tmp = `<root>/<sandbox id>/tmp` (both
 * private to the sandbox and persistent while it runs), nothing else of the host.
 *
 * Modelled from Modal: names unique among running sandboxes (AlreadyExists), fromName/list see only
 * running ones, tags, `timeoutMs` ends the sandbox, terminate, exec with pipes, or with a PTY made
 * inside the sandbox by `script` (80x24, TERM=xterm-256color, all output on stdout), exec env added
 * to the sandbox's own. Faults: `fail(operation)` makes the next calls of an operation fail with a
 * provider error, `hang(operation)` makes them never answer, `terminateFromOutside(name)` kills a
 * sandbox behind the backend's back.
 */
import { Effect, Option, Stream } from "effect"
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { lstatSync, mkdirSync, mkdtempSync, readlinkSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type {
  CreateSandboxRequest,
  ExecHandle,
  ExecRequest,
  ModalGatewayService,
  SandboxHandle
} from "../../src/layers/backends/ModalGateway.js"
import { ModalGatewayError } from "../../src/layers/backends/ModalGateway.js"

export type Operation = "create" | "fromName" | "list" | "exec" | "terminate" | "tags" | "wait"

const SANDBOX_ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root", LANG: "C.UTF-8" }

/** bubblewrap and nsenter work here (the fake needs both). */
export const fakeWorks = (() => {
  const bwrap = spawnSync("bwrap", ["--ro-bind", "/", "/", "--unshare-pid", "--dev", "/dev", "true"], { stdio: "ignore" })
  const nsenter = spawnSync("nsenter", ["--version"], { stdio: "ignore" })
  return bwrap.status === 0 && nsenter.status === 0
})()

const rootfsArgs = (): Array<string> => {
  const args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
  for (const name of ["bin", "lib", "lib64", "sbin"]) {
    try {
      const stat = lstatSync(`/${name}`)
      if (stat.isSymbolicLink()) args.push("--symlink", readlinkSync(`/${name}`), `/${name}`)
      else if (stat.isDirectory()) args.push("--ro-bind", `/${name}`, `/${name}`)
    } catch {
      // absent
    }
  }
  return args
}

interface FakeSandbox {
  readonly sandboxId: string
  readonly name: string
  readonly appName: string
  readonly request: CreateSandboxRequest
  tags: Record<string, string>
  readonly process: ChildProcess
  pid: number | undefined
  exitCode: number | null
  readonly ended: Promise<number>
  readonly dir: string
  readonly timer: NodeJS.Timeout
}

export class ModalFake implements ModalGatewayService {
  readonly root = mkdtempSync(join(tmpdir(), "kt-modal-fake-"))
  readonly sandboxes = new Map<string, FakeSandbox>()
  /** Every create request, in order. */
  readonly created: Array<CreateSandboxRequest> = []
  private readonly failing = new Map<Operation, { detail: string; times: number }>()
  private readonly hanging = new Set<Operation>()
  private counter = 0

  /** The next `times` calls of the operation fail with a provider error. */
  fail(operation: Operation, detail = "INTERNAL: the Modal control plane is unavailable", times = 1) {
    this.failing.set(operation, { detail, times })
  }

  /** Calls of the operation never answer (until `unhang`). */
  hang(operation: Operation) {
    this.hanging.add(operation)
  }

  unhang(operation: Operation) {
    this.hanging.delete(operation)
  }

  /** Kills the running sandbox of that name as if someone terminated it in Modal's dashboard. */
  terminateFromOutside(name: string) {
    for (const sandbox of this.sandboxes.values()) {
      if (sandbox.name === name && sandbox.exitCode === null) sandbox.process.kill("SIGKILL")
    }
  }

  /** Names of the running sandboxes. */
  running(): Array<string> {
    return [...this.sandboxes.values()].filter((s) => s.exitCode === null).map((s) => s.name)
  }

  /** Ends every sandbox and removes the fake's files. */
  shutdown() {
    for (const sandbox of this.sandboxes.values()) {
      clearTimeout(sandbox.timer)
      if (sandbox.exitCode === null) sandbox.process.kill("SIGKILL")
    }
    rmSync(this.root, { recursive: true, force: true })
  }

  private guard<A>(operation: Operation, effect: Effect.Effect<A, ModalGatewayError>): Effect.Effect<A, ModalGatewayError> {
    return Effect.suspend(() => {
      if (this.hanging.has(operation)) return Effect.never
      const failure = this.failing.get(operation)
      if (failure !== undefined) {
        if (--failure.times <= 0) this.failing.delete(operation)
        return Effect.fail(new ModalGatewayError({ operation, kind: "Provider", detail: failure.detail }))
      }
      return effect
    })
  }

  private runningNamed(appName: string, name: string) {
    return [...this.sandboxes.values()].find((s) => s.appName === appName && s.name === name && s.exitCode === null)
  }

  readonly create = (request: CreateSandboxRequest) =>
    this.guard("create", Effect.gen(this, function*() {
      if (this.runningNamed(request.appName, request.name) !== undefined) {
        return yield* new ModalGatewayError({
          operation: "create",
          kind: "AlreadyExists",
          detail: `Sandbox with name '${request.name}' already exists`
        })
      }
      this.created.push(request)
      const sandboxId = `sb-fake${++this.counter}-${process.pid}`
      const dir = join(this.root, sandboxId)
      mkdirSync(join(dir, "home"), { recursive: true })
      mkdirSync(join(dir, "tmp"), { recursive: true })
      const args = [
        ...rootfsArgs(),
        "--proc", "/proc",
        "--dev", "/dev",
        "--bind", join(dir, "home"), "/home/agent",
        "--bind", join(dir, "tmp"), "/tmp",
        "--unshare-pid", "--unshare-ipc", "--unshare-uts",
        ...(request.blockNetwork ? ["--unshare-net"] : []),
        "--hostname", "modal",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--info-fd", "3",
        "--", "/bin/sh", "-c", "echo ready; exec sleep infinity"
      ]
      const child = spawn("bwrap", args, { stdio: ["ignore", "pipe", "pipe", "pipe"], env: {} })
      const info = yield* Effect.async<number, ModalGatewayError>((resume) => {
        let text = ""
        let stderr = ""
        let pid: number | undefined
        let ready = false
        // The pid is known at fork, the sandbox is set up once its command has started.
        const settle = () => (pid !== undefined && ready ? resume(Effect.succeed(pid)) : undefined)
        child.stderr!.on("data", (data: Buffer) => (stderr += data.toString()))
        child.stdout!.on("data", () => {
          ready = true
          settle()
        })
        ;(child.stdio[3] as NodeJS.ReadableStream).on("data", (data: Buffer) => {
          text += data.toString()
          const match = /"child-pid":\s*(\d+)/.exec(text)
          if (match) pid = Number(match[1])
          settle()
        })
        child.on("exit", () =>
          resume(Effect.fail(new ModalGatewayError({ operation: "create", kind: "Provider", detail: `sandbox failed to start: ${stderr}` }))))
      })
      let resolveEnded!: (code: number) => void
      const ended = new Promise<number>((resolve) => (resolveEnded = resolve))
      const sandbox: FakeSandbox = {
        sandboxId,
        name: request.name,
        appName: request.appName,
        request,
        tags: { ...request.tags },
        process: child,
        pid: info,
        exitCode: null,
        ended,
        dir,
        timer: setTimeout(() => child.kill("SIGKILL"), request.timeoutMs)
      }
      child.on("exit", (code, signal) => {
        clearTimeout(sandbox.timer)
        sandbox.exitCode = code ?? (signal === null ? 0 : 137)
        resolveEnded(sandbox.exitCode)
      })
      this.sandboxes.set(sandboxId, sandbox)
      return this.handle(sandbox)
    }))

  readonly fromName = (appName: string, name: string) =>
    this.guard("fromName", Effect.sync(() => {
      const found = this.runningNamed(appName, name)
      return found === undefined ? Option.none<SandboxHandle>() : Option.some(this.handle(found))
    }))

  readonly list = (appName: string, tags: Readonly<Record<string, string>>) =>
    this.guard("list", Effect.sync(() =>
      [...this.sandboxes.values()]
        .filter((s) => s.appName === appName && s.exitCode === null && Object.entries(tags).every(([k, v]) => s.tags[k] === v))
        .map((s) => this.handle(s))
    ))

  readonly close = Effect.void

  private handle(sandbox: FakeSandbox): SandboxHandle {
    const gone = (operation: string) =>
      new ModalGatewayError({ operation, kind: "Terminated", detail: `Sandbox ${sandbox.sandboxId} has already finished` })
    return {
      sandboxId: sandbox.sandboxId,
      exec: (request) =>
        this.guard("exec", Effect.suspend(() => (sandbox.exitCode !== null ? Effect.fail(gone("exec")) : Effect.sync(() => this.exec(sandbox, request))))),
      tags: this.guard("tags", Effect.sync(() => ({ ...sandbox.tags }))),
      poll: Effect.sync(() => sandbox.exitCode),
      wait: this.guard("wait", Effect.promise(() => sandbox.ended)),
      terminate: this.guard("terminate", Effect.promise(async () => {
        if (sandbox.exitCode === null) sandbox.process.kill("SIGKILL")
        await sandbox.ended
      })),
      detach: Effect.void
    }
  }

  private exec(sandbox: FakeSandbox, request: ExecRequest): ExecHandle {
    const quote = (value: string) => `'${value.replace(/'/g, `'\\''`)}'`
    const argv = request.pty
      ? ["script", "-qfec", `stty rows 24 cols 80; exec ${request.argv.map(quote).join(" ")}`, "/dev/null"]
      : [...request.argv]
    const env = { ...SANDBOX_ENV, ...(request.pty ? { TERM: "xterm-256color" } : {}), ...request.env }
    const child = spawn("nsenter", [
      "-t", String(sandbox.pid), "-a", "-r",
      request.workdir === undefined ? "-w" : `--wd=${request.workdir}`,
      "--", ...argv
    ], { stdio: ["pipe", "pipe", "pipe"], env })
    const exited = new Promise<number>((resolve) => {
      child.on("exit", (code, signal) => resolve(code ?? 128 + (signal === null ? 9 : (signalNumbers[signal] ?? 9))))
      child.on("error", () => resolve(127))
    })
    const stream = (readable: NodeJS.ReadableStream) =>
      Stream.async<Uint8Array, ModalGatewayError>((emit) => {
        readable.on("data", (data: Buffer) => void emit.single(new Uint8Array(data)))
        readable.on("end", () => void emit.end())
        readable.on("error", () => void emit.end())
      })
    child.stdin!.on("error", () => {})
    return {
      stdout: stream(child.stdout!),
      stderr: stream(child.stderr!),
      writeStdin: (data) =>
        Effect.async<void, ModalGatewayError>((resume) => {
          child.stdin!.write(data, (error) =>
            resume(error ? Effect.fail(new ModalGatewayError({ operation: "write stdin", kind: "Provider", detail: error.message })) : Effect.void))
        }),
      closeStdin: Effect.sync(() => void child.stdin!.end()),
      wait: Effect.promise(() => exited)
    }
  }
}

const signalNumbers: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGTERM: 15, SIGPIPE: 13 }
