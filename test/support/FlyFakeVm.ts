/**
 * The "VM" of a fake Fly machine: one long-lived bubblewrap sandbox (own pid namespace, no
 * network, /usr /etc … read-only from the host as in HostBackend's sandbox) whose writable
 * "rootfs" is a per-machine directory bound at /home, /tmp and /root, with `config.files` written
 * at their guest paths at every boot.
 *
 * Inside, a small shell "flyd" runs `config.init.exec` as the machine's main process and serves
 * exec requests through a control FIFO at /run/flyd, each exec a child of flyd. What happens to
 * processes an exec leaves behind is not documented by Fly, so the fake assumes the worst by
 * default (`execChildren: "killed"`): when an exec ends, every process it left behind (now an
 * orphan under the sandbox's init) is killed. Processes of the main process's tree are never
 * touched. `"survive"` leaves them alone, as the previous fake did.
 */
import type { ChildProcess } from "node:child_process"
import { spawn, spawnSync } from "node:child_process"
import { closeSync, constants, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs"
import { join } from "node:path"
import { sandboxArgs } from "../../src/layers/backends/host/Sandbox.js"

export type ExecChildren = "killed" | "survive"

const SERVER = [
  `C=/run/flyd`,
  `echo $$ > "$C/server.pid"`,
  `( "$@" </dev/null >/dev/null 2>&1; echo $? > "$C/main.exit" ) &`,
  `exec 3<>"$C/ctl"`,
  `: > "$C/ready"`,
  `while read -r n <&3; do`,
  `  ( cd /; /bin/sh "$C/req/$n/cmd" < "$C/req/$n/stdin" > "$C/req/$n/out" 2> "$C/req/$n/err"; echo $? > "$C/req/$n/code.t"; mv "$C/req/$n/code.t" "$C/req/$n/code" ) </dev/null >/dev/null 2>&1 &`,
  `done`
].join("\n")

const quote = (value: string) => `'${value.replace(/'/g, `'\\''`)}'`
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

interface HostProcess {
  readonly pid: number
  readonly ppid: number
  readonly nspid: number | undefined
}

/** Every process of the host (pid, parent, pid in its innermost namespace). */
const hostProcesses = (): Array<HostProcess> =>
  readdirSync("/proc").flatMap((name) => {
    if (!/^\d+$/.test(name)) return []
    try {
      const status = readFileSync(`/proc/${name}/status`, "utf8")
      const ppid = Number(/^PPid:\s+(\d+)/m.exec(status)?.[1])
      const nspid = /^NSpid:\s+(.+)$/m.exec(status)?.[1]?.trim().split(/\s+/).map(Number)
      return [{ pid: Number(name), ppid, nspid: nspid?.[nspid.length - 1] }]
    } catch {
      return []
    }
  })

const subtree = (all: ReadonlyArray<HostProcess>, root: number): Array<number> => {
  const children = new Map<number, Array<number>>()
  for (const process of all) children.set(process.ppid, [...(children.get(process.ppid) ?? []), process.pid])
  const out: Array<number> = []
  const visit = (pid: number) => {
    out.push(pid)
    for (const child of children.get(pid) ?? []) visit(child)
  }
  visit(root)
  return out
}

const kill = (pids: ReadonlyArray<number>) => {
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL")
    } catch {
      // already gone
    }
  }
}

export class FakeVm {
  private child: ChildProcess | undefined
  private seq = 0
  /** The sandbox is up and flyd serves exec requests. */
  ready = false

  constructor(readonly dir: string, readonly hostname: string, readonly onExit: () => void) {}

  private get ctl() {
    return join(this.dir, "ctl")
  }
  rootfs() {
    return join(this.dir, "rootfs")
  }

  /** Boots: files written, init.exec started as the main process. */
  boot(config: Record<string, any>): Promise<boolean> {
    this.stop()
    const rootfs = this.rootfs()
    rmSync(this.ctl, { recursive: true, force: true })
    for (const dir of [join(rootfs, "home"), join(rootfs, "tmp"), join(rootfs, "root"), join(this.ctl, "req"), join(this.dir, "files")]) {
      mkdirSync(dir, { recursive: true })
    }
    spawnSync("mkfifo", [join(this.ctl, "ctl")])
    const files: Array<string> = []
    for (const [index, file] of (Array.isArray(config["files"]) ? config["files"] : []).entries()) {
      const source = join(this.dir, "files", String(index))
      writeFileSync(source, Buffer.from(String(file.raw_value ?? ""), "base64"), { mode: typeof file.mode === "number" ? file.mode : 0o644 })
      files.push("--ro-bind", source, String(file.guest_path))
    }
    const init: Array<string> = Array.isArray(config["init"]?.exec) ? config["init"].exec : ["sleep", "inf"]
    const child = spawn("bwrap", [
      ...sandboxArgs({ hostname: this.hostname, network: false }),
      "--bind", join(rootfs, "home"), "/home",
      "--bind", join(rootfs, "tmp"), "/tmp",
      "--bind", join(rootfs, "root"), "/root",
      "--bind", this.ctl, "/run/flyd",
      ...files,
      "--setenv", "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "--setenv", "HOME", "/root",
      "--chdir", "/",
      "--", "/bin/sh", "-c", SERVER, "flyd", ...init
    ], { stdio: "ignore", env: { PATH: "/usr/bin:/bin" } })
    this.child = child
    child.on("exit", () => {
      if (this.child === child) {
        this.child = undefined
        this.ready = false
        this.onExit()
      }
    })
    return (async () => {
      for (let i = 0; i < 1000 && this.child === child && !existsSync(join(this.ctl, "ready")); i++) await sleep(10)
      this.ready = this.child === child
      return this.ready
    })()
  }

  /** Kills everything: the machine stops. */
  stop() {
    const child = this.child
    this.child = undefined
    this.ready = false
    if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL")
  }

  /** The main process (init.exec) ended. */
  mainExited(): boolean {
    return existsSync(join(this.ctl, "main.exit"))
  }

  /** Runs argv to completion as flyd would; `undefined` when the machine went down meanwhile. */
  async exec(argv: ReadonlyArray<string>, stdin: string, timeoutSeconds: number, children: ExecChildren) {
    const child = this.child
    if (child === undefined) return undefined
    const n = ++this.seq
    const dir = join(this.ctl, "req", String(n))
    mkdirSync(dir)
    writeFileSync(join(dir, "cmd"), `exec ${argv.map(quote).join(" ")}\n`)
    writeFileSync(join(dir, "stdin"), stdin)
    const fd = openSync(join(this.ctl, "ctl"), constants.O_WRONLY | constants.O_NONBLOCK)
    try {
      writeSync(fd, `${n}\n`)
    } finally {
      closeSync(fd)
    }
    const deadline = Date.now() + timeoutSeconds * 1000
    let timedOut = false
    while (!existsSync(join(dir, "code"))) {
      if (this.child !== child) return undefined
      if (Date.now() > deadline) {
        timedOut = true
        break
      }
      await sleep(3)
    }
    if (children === "killed" || timedOut) this.sweep(child)
    if (timedOut) return "timeout" as const
    const result = {
      stdout: readFileSync(join(dir, "out"), "utf8"),
      stderr: readFileSync(join(dir, "err"), "utf8"),
      exit_code: Number(readFileSync(join(dir, "code"), "utf8").trim()),
      exit_signal: 0
    }
    rmSync(dir, { recursive: true, force: true })
    return result
  }

  /**
   * Kills what exec calls left behind: the sandbox's init adopts orphans, so its children other
   * than flyd (and, while an exec runs, nothing of flyd's own tree) are leftovers of finished execs.
   */
  private sweep(child: ChildProcess) {
    if (child.pid === undefined || this.child !== child) return
    const all = hostProcesses()
    const init = all.find((process) => process.ppid === child.pid)
    if (init === undefined) return
    const server = Number(readFileSync(join(this.ctl, "server.pid"), "utf8").trim())
    for (const orphan of all.filter((process) => process.ppid === init.pid && process.nspid !== server)) {
      kill(subtree(all, orphan.pid))
    }
  }
}
