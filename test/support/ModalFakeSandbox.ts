/**
 * The machinery under the Modal fake (ModalFake.ts): a sandbox is one long-lived bubblewrap
 * (`sleep infinity` as its main process) with its own pid, ipc, uts (and, with blockNetwork, net)
 * namespaces; every exec enters those namespaces with `nsenter`, so the execs of one sandbox see
 * each other's processes like on Modal.
 *
 * Layout of a sandbox: /usr, /etc read-only (bin/lib symlinks as on merged-usr hosts), a fresh /proc
 * and /dev, /home/agent = `<root>/<sandbox id>/home` and /tmp = `<root>/<sandbox id>/tmp` (both
 * private to the sandbox and persistent while it runs), nothing else of the host.
 *
 * An exec keeps all of its output (Modal's router serves stdio reads from an offset, so a client
 * can resume a broken stream) and takes stdin writes at an offset (a retried write is not doubled).
 *
 * What an exec leaves behind, and what a client's going does, as on Modal: nothing ends an exec's
 * processes but their own exit or the sandbox's end. Modal's SDK says that letting go of an exec
 * "does *not* terminate the underlying process" (modal-labs/modal-client#3854, the Python
 * `ContainerProcess.cleanup`; the JS SDK 0.11.1 has no call that would), and neither a dropped
 * stdio read nor an unclosed stdin ends it: the router only serves reads and writes at offsets.
 * So here an exec's `nsenter` child is never killed when its client goes, a process it leaves
 * (setsid, daemonized) is reparented inside the sandbox's pid namespace and runs on, and only the
 * sandbox's end (terminate, timeout: bubblewrap SIGKILLed, its pid namespace torn down) ends them
 * all — never more forgiving than Modal, whose sandbox end takes every process with it too.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { lstatSync, mkdirSync, readlinkSync } from "node:fs"
import { join } from "node:path"

export const SANDBOX_ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root", LANG: "C.UTF-8" }

/** bubblewrap, nsenter and script work here (the fake needs them). */
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

/** A running bubblewrap sandbox. */
export interface SandboxProcess {
  readonly pid: number
  readonly child: ChildProcess
  /** Resolves with the main process's exit code (137 when killed). */
  readonly ended: Promise<number>
}

/** Starts the sandbox's bubblewrap and resolves once its main process runs. */
export const startSandbox = (dir: string, blockNetwork: boolean): Promise<SandboxProcess> => {
  mkdirSync(join(dir, "home"), { recursive: true })
  mkdirSync(join(dir, "tmp"), { recursive: true })
  const args = [
    ...rootfsArgs(),
    "--proc", "/proc",
    "--dev", "/dev",
    "--bind", join(dir, "home"), "/home/agent",
    "--bind", join(dir, "tmp"), "/tmp",
    "--unshare-pid", "--unshare-ipc", "--unshare-uts",
    ...(blockNetwork ? ["--unshare-net"] : []),
    "--hostname", "modal",
    "--die-with-parent",
    "--new-session",
    "--clearenv",
    "--info-fd", "3",
    "--", "/bin/sh", "-c", "echo ready; exec sleep infinity"
  ]
  const child = spawn("bwrap", args, { stdio: ["ignore", "pipe", "pipe", "pipe"], env: {} })
  const ended = new Promise<number>((resolve) =>
    child.on("exit", (code, signal) => resolve(code ?? (signal === null ? 0 : 137)))
  )
  return new Promise((resolve, reject) => {
    let info = ""
    let stderr = ""
    let pid: number | undefined
    let ready = false
    // The pid is known at fork, the sandbox is set up once its command has started.
    const settle = () => (pid !== undefined && ready ? resolve({ pid, child, ended }) : undefined)
    child.stderr!.on("data", (data: Buffer) => (stderr += data.toString()))
    child.stdout!.on("data", () => {
      ready = true
      settle()
    })
    ;(child.stdio[3] as NodeJS.ReadableStream).on("data", (data: Buffer) => {
      info += data.toString()
      const match = /"child-pid":\s*(\d+)/.exec(info)
      if (match) pid = Number(match[1])
      settle()
    })
    child.on("exit", () => reject(new Error(`sandbox failed to start: ${stderr}`)))
  })
}

/** The output of one stream of an exec, kept whole so that reads can start at any offset. */
export class OutputLog {
  private readonly chunks: Array<Buffer> = []
  /** Where each chunk starts in the stream. */
  private readonly starts: Array<number> = []
  private readonly waiters = new Set<() => void>()
  size = 0
  ended = false

  append(data: Buffer) {
    this.starts.push(this.size)
    this.chunks.push(data)
    this.size += data.length
    this.wake()
  }

  end() {
    this.ended = true
    this.wake()
  }

  private wake() {
    for (const waiter of [...this.waiters]) waiter()
  }

  /** Bytes from `offset` (at most `limit`), waiting for some when there are none yet; empty at the end. */
  async read(offset: number, limit: number, cancelled: () => boolean): Promise<Buffer> {
    while (offset >= this.size && !this.ended && !cancelled()) {
      await new Promise<void>((resolve) => {
        const waiter = () => {
          this.waiters.delete(waiter)
          resolve()
        }
        this.waiters.add(waiter)
        setTimeout(waiter, 500)
      })
    }
    if (offset >= this.size) return Buffer.alloc(0)
    // The last chunk that starts at or before the offset.
    let low = 0
    let high = this.starts.length - 1
    while (low < high) {
      const middle = (low + high + 1) >> 1
      if (this.starts[middle]! <= offset) low = middle
      else high = middle - 1
    }
    const parts: Array<Buffer> = []
    let taken = 0
    for (let i = low; i < this.chunks.length && taken < limit; i++) {
      const chunk = this.chunks[i]!
      const from = Math.max(0, offset - this.starts[i]!)
      const part = chunk.subarray(from, Math.min(chunk.length, from + (limit - taken)))
      parts.push(part)
      taken += part.length
    }
    return Buffer.concat(parts)
  }
}

export type ExitStatus = { readonly code: number } | { readonly signal: number }

const signalNumbers: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGTERM: 15, SIGPIPE: 13 }

/** One command run in a sandbox. */
export class FakeExec {
  readonly stdout = new OutputLog()
  readonly stderr = new OutputLog()
  readonly child: ChildProcess
  readonly exited: Promise<ExitStatus>
  status: ExitStatus | undefined
  stdinOffset = 0
  stdinClosed = false

  constructor(sandboxPid: number, argv: ReadonlyArray<string>, env: Record<string, string>, pty: boolean, workdir: string | undefined) {
    const quote = (value: string) => `'${value.replace(/'/g, `'\\''`)}'`
    const command = pty
      ? ["script", "-qfec", `stty rows 24 cols 80; exec ${argv.map(quote).join(" ")}`, "/dev/null"]
      : [...argv]
    this.child = spawn("nsenter", [
      "-t", String(sandboxPid), "-a", "-r",
      workdir === undefined || workdir === "" ? "-w" : `--wd=${workdir}`,
      "--", ...command
    ], { stdio: ["pipe", "pipe", "pipe"], env })
    this.child.stdin!.on("error", () => {})
    this.child.stdout!.on("data", (data: Buffer) => this.stdout.append(data))
    this.child.stderr!.on("data", (data: Buffer) => this.stderr.append(data))
    this.child.stdout!.on("close", () => this.stdout.end())
    this.child.stderr!.on("close", () => this.stderr.end())
    this.exited = new Promise<ExitStatus>((resolve) => {
      this.child.on("exit", (code, signal) => {
        this.status = code !== null ? { code } : { signal: signal === null ? 9 : (signalNumbers[signal] ?? 9) }
        resolve(this.status)
      })
      this.child.on("error", () => {
        this.status = { code: 127 }
        this.stdout.end()
        this.stderr.end()
        resolve(this.status)
      })
    })
  }

  /** Writes stdin at an offset: a retried write that was already taken is not written again. */
  write(offset: number, data: Buffer, eof: boolean): Promise<void> {
    if (this.stdinClosed) return Promise.reject(new Error("stdin is closed"))
    if (offset > this.stdinOffset) return Promise.reject(new Error(`stdin write at offset ${offset}, expected ${this.stdinOffset}`))
    const fresh = data.subarray(Math.min(data.length, this.stdinOffset - offset))
    this.stdinOffset += fresh.length
    return new Promise((resolve) => {
      const done = () => {
        if (eof) {
          this.stdinClosed = true
          this.child.stdin!.end()
        }
        resolve()
      }
      if (fresh.length === 0) done()
      else this.child.stdin!.write(fresh, () => done())
    })
  }
}
