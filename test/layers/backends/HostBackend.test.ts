import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Option, Scope, Stream } from "effect"
import { createHash } from "node:crypto"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import type { BackendComputer, BackendProcess, ExitInfo, SpawnSpec } from "../../../src/services/Backend.js"
import * as HostBackend from "../../../src/layers/backends/HostBackend.js"

const hasBwrap = ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"].some((path) => existsSync(path))
if (!hasBwrap && process.env.CI !== "true") {
  console.warn("HostBackend tests: bwrap is not installed; sandboxed tests are skipped (sudo apt-get install bubblewrap)")
}

const stateDir = mkdtempSync(join(tmpdir(), "kt-host-test-"))
afterAll(() => rmSync(stateDir, { recursive: true, force: true }))

const ENV = { PATH: "/usr/local/bin:/usr/bin:/bin", HOME: "/home/agent", LANG: "C.UTF-8" }

let counter = 0
const computerId = () => `t${process.pid}-${++counter}`

const openComputer = (
  options: { network?: boolean; sandbox?: "bwrap" | "none"; temporary?: boolean; id?: string; stateDir?: string } = {}
) =>
  Effect.gen(function*() {
    const backend = yield* HostBackend.make({
      stateDir: options.stateDir ?? stateDir,
      network: options.network ?? false,
      sandbox: options.sandbox ?? "bwrap"
    })
    return yield* backend.open({ id: options.id ?? computerId(), temporary: options.temporary ?? true })
  })

const spec = (argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}): SpawnSpec => ({
  argv,
  cwd: "/home/agent",
  env: ENV,
  ...extra
})

interface Outcome {
  readonly stdout: string
  readonly stderr: string
  readonly exit: ExitInfo | undefined
  readonly exitBeforeOutputEnded: boolean
}

const collect = (process: BackendProcess) =>
  Stream.runFold(process.events, { stdout: "", stderr: "", exit: undefined, exitBeforeOutputEnded: false } as Outcome, (acc, event) => {
    switch (event._tag) {
      case "Stdout":
        return { ...acc, stdout: acc.stdout + Buffer.from(event.data).toString("utf8"), exitBeforeOutputEnded: acc.exit !== undefined }
      case "Stderr":
        return { ...acc, stderr: acc.stderr + Buffer.from(event.data).toString("utf8"), exitBeforeOutputEnded: acc.exit !== undefined }
      case "Exit":
        return { ...acc, exit: event.exit }
    }
  })

const runIn = (computer: BackendComputer, argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}) =>
  Effect.scoped(Effect.flatMap(computer.spawn(spec(argv, extra)), collect))

/** Host processes whose command line is exactly `argv`. */
const hostProcesses = (argv: ReadonlyArray<string>) =>
  readdirSync("/proc").filter((entry) => {
    if (!/^\d+$/.test(entry)) return false
    try {
      return readFileSync(`/proc/${entry}/cmdline`, "utf8") === argv.join("\0") + "\0"
    } catch {
      return false
    }
  })

const parentPid = (pid: string) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]
  } catch {
    return undefined
  }
}

/** The host pid of the kt-agent of computer `id` (a descendant of this process's bwrap for it). */
const agentPid = (id: string) => {
  const pids = readdirSync("/proc").filter((entry) => /^\d+$/.test(entry))
  const cmdline = (pid: string) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8")
    } catch {
      return ""
    }
  }
  let ancestors = new Set(pids.filter((pid) => parentPid(pid) === String(process.pid) && cmdline(pid).includes(`\0--hostname\0${id}\0`)))
  for (let depth = 0; depth < 4 && ancestors.size > 0; depth++) {
    const agent = pids.find((pid) => ancestors.has(parentPid(pid) ?? "") && cmdline(pid).startsWith("/run/kt-agent\0"))
    if (agent !== undefined) return Number(agent)
    ancestors = new Set(pids.filter((pid) => ancestors.has(parentPid(pid) ?? "")))
  }
  return undefined
}

const writeMetadata = (dir: string, id: string, temporary: boolean, owner: { pid: number; startTime: string }) => {
  mkdirSync(join(dir, "computers", id, "home"), { recursive: true })
  writeFileSync(
    join(dir, "computers", id, "computer.json"),
    JSON.stringify({ id, temporary, createdAt: new Date().toISOString(), image: "host", owner })
  )
}

/** Reads a TTY process's output in the background; `waitFor` polls it for a pattern. */
const watch = (process: BackendProcess) =>
  Effect.gen(function*() {
    let text = ""
    const fiber = yield* Stream.runForEach(process.events, (event) =>
      Effect.sync(() => {
        if (event._tag !== "Exit") text += Buffer.from(event.data).toString("utf8")
      })).pipe(Effect.fork)
    const waitFor = (pattern: RegExp) =>
      Effect.gen(function*() {
        for (let i = 0; i < 250; i++) {
          if (pattern.test(text)) return text
          yield* Effect.sleep("20 millis")
        }
        return assert.fail(`timed out waiting for ${pattern} in ${JSON.stringify(text)}`)
      })
    return { waitFor, fiber, text: () => text }
  })

describe("HostBackend", () => {
  it("requires bwrap under CI", () => {
    assert.isTrue(hasBwrap || process.env.CI !== "true", "bwrap must be installed in CI (sudo apt-get install bubblewrap)")
  })

  it.live("refuses to start without bwrap and says how to fix it", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(HostBackend.make({ stateDir, network: false, sandbox: "bwrap", bwrap: "/nonexistent/bwrap" }))
      assert.strictEqual(error._tag, "BackendError")
      assert.include(error.reason, "sudo apt-get install bubblewrap")
      assert.include(error.reason, "--unsafe-no-sandbox")
    }))

  describe.skipIf(!hasBwrap)("sandboxed (bwrap)", () => {
    it.scopedLive("reports the exit code of a process", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        const outcome = yield* runIn(computer, ["sh", "-c", "exit 3"])
        assert.deepStrictEqual(outcome.exit, { exitCode: 3, signal: null })
      }))

    it.scopedLive("captures all stderr of a process that fails within milliseconds, before its Exit", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        for (let i = 0; i < 20; i++) {
          const outcome = yield* runIn(computer, ["sh", "-c", "echo oops >&2; exit 1"])
          assert.strictEqual(outcome.stderr, "oops\n")
          assert.isFalse(outcome.exitBeforeOutputEnded)
          assert.deepStrictEqual(outcome.exit, { exitCode: 1, signal: null })
        }
      }))

    it.scopedLive("a missing executable is a SpawnFailed error", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        const missing = yield* Effect.flip(Effect.scoped(computer.spawn(spec(["no-such-program-kt"]))))
        assert.strictEqual(missing._tag, "SpawnFailed")
        if (missing._tag === "SpawnFailed") assert.strictEqual(missing.reason, "No such file or directory")
        const badCwd = yield* Effect.flip(Effect.scoped(computer.spawn(spec(["true"], { cwd: "/nonexistent" }))))
        assert.strictEqual(badCwd._tag, "SpawnFailed")
        if (badCwd._tag === "SpawnFailed") assert.include(badCwd.reason, "/nonexistent")
      }))

    it.scopedLive("pipes stdin: cat echoes it and exits 0 after closeStdin", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        const outcome = yield* Effect.scoped(Effect.gen(function*() {
          const process = yield* computer.spawn(spec(["cat"]))
          yield* process.write(new TextEncoder().encode("hello\nworld\n"))
          yield* process.closeStdin
          return yield* collect(process)
        }))
        assert.strictEqual(outcome.stdout, "hello\nworld\n")
        assert.deepStrictEqual(outcome.exit, { exitCode: 0, signal: null })
      }))

    it.scopedLive("a signal ends the whole process tree", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        const outcome = yield* Effect.scoped(Effect.gen(function*() {
          const process = yield* computer.spawn(spec(["sh", "-c", "sleep 301 & sleep 301"]))
          const events = yield* Effect.fork(collect(process))
          for (let i = 0; i < 100 && hostProcesses(["sleep", "301"]).length < 2; i++) yield* Effect.sleep("10 millis")
          assert.strictEqual(hostProcesses(["sleep", "301"]).length, 2)
          yield* process.signal("SIGTERM")
          return yield* Fiber.join(events)
        }))
        assert.deepStrictEqual(outcome.exit, { exitCode: null, signal: "SIGTERM" })
        yield* Effect.sleep("50 millis")
        assert.deepStrictEqual(hostProcesses(["sleep", "301"]), [])
      }))

    it.scopedLive("isolates the host: read-only system, private workspace, no secrets, no capabilities", () =>
      Effect.gen(function*() {
        const id = computerId()
        const computer = yield* openComputer({ id, temporary: false })
        assert.strictEqual(computer.home, "/home/agent")
        assert.notStrictEqual((yield* runIn(computer, ["sh", "-c", "echo x > /usr/x"])).exit?.exitCode, 0)
        assert.notStrictEqual((yield* runIn(computer, ["sh", "-c", "echo x > /etc/x"])).exit?.exitCode, 0)
        const write = yield* runIn(computer, ["sh", "-c", "echo hello > /home/agent/f.txt && pwd"])
        assert.deepStrictEqual(write.exit, { exitCode: 0, signal: null })
        assert.strictEqual(write.stdout, "/home/agent\n")
        assert.strictEqual(readFileSync(join(stateDir, "computers", id, "home", "f.txt"), "utf8"), "hello\n")

        process.env["KT_SECRET_MARKER"] = "leaked"
        const env = yield* runIn(computer, ["env"])
        delete process.env["KT_SECRET_MARKER"]
        assert.notInclude(env.stdout, "KT_SECRET_MARKER")
        assert.include(env.stdout, "HOME=/home/agent")

        assert.notStrictEqual((yield* runIn(computer, ["ls", "/root"])).exit?.exitCode, 0)
        assert.strictEqual((yield* runIn(computer, ["cat", "/etc/shadow"])).stdout, "")
        const status = yield* runIn(computer, ["cat", "/proc/self/status"])
        assert.match(status.stdout, /^CapEff:\s+0+$/m)
        const fds = yield* runIn(computer, ["ls", "/proc/self/fd"])
        assert.deepStrictEqual(fds.stdout.trim().split("\n"), ["0", "1", "2", "3"])
        const hostname = yield* runIn(computer, ["cat", "/proc/sys/kernel/hostname"])
        assert.strictEqual(hostname.stdout.trim(), id)
      }))

    it.scopedLive("has no network but loopback unless the network is on", () =>
      Effect.gen(function*() {
        const interfaces = (text: string) =>
          text.split("\n").slice(2).map((line) => line.split(":")[0]!.trim()).filter((name) => name.length > 0)
        const off = yield* openComputer({ network: false })
        assert.deepStrictEqual(interfaces((yield* runIn(off, ["cat", "/proc/net/dev"])).stdout), ["lo"])
        const on = yield* openComputer({ network: true })
        const visible = interfaces((yield* runIn(on, ["cat", "/proc/net/dev"])).stdout)
        assert.isAbove(visible.filter((name) => name !== "lo").length, 0)
      }))

    it.scopedLive("TTY processes get a real terminal that resolves inside the sandbox", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        const tty = yield* runIn(computer, ["tty"], { tty: { cols: 80, rows: 24 } })
        assert.match(tty.stdout, /^\/dev\/pts\/\d+\r?\n$/)
        assert.deepStrictEqual(tty.exit, { exitCode: 0, signal: null })
        const isatty = yield* runIn(computer, ["python3", "-c", "import os;print(os.isatty(0))"], { tty: { cols: 80, rows: 24 } })
        assert.strictEqual(isatty.stdout.trim(), "True")
        const code = yield* runIn(computer, ["sh", "-c", "exit 7"], { tty: { cols: 80, rows: 24 } })
        assert.deepStrictEqual(code.exit, { exitCode: 7, signal: null })
      }))

    it.scopedLive("TTY output precedes Exit, Ctrl-C interrupts, and signals reach the terminal's process group", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        for (let i = 0; i < 5; i++) {
          const seq = yield* runIn(computer, ["seq", "1", "100000"], { tty: { cols: 80, rows: 24 } })
          const lines = seq.stdout.trim().split("\r\n")
          // node-pty rarely drops the last bytes of a fast burst (a few KB of 690 KB, seen in ~3% of
          // runs); the process must still be reported, in order, and nothing may be garbled.
          assert.isAtLeast(lines.length, 95_000)
          assert.isTrue(lines.slice(0, -1).every((line, index) => line === String(index + 1)), "an unbroken prefix of 1..100000")
          assert.isFalse(seq.exitBeforeOutputEnded)
          assert.deepStrictEqual(seq.exit, { exitCode: 0, signal: null })
        }
        const small = yield* runIn(computer, ["seq", "1", "2000"], { tty: { cols: 80, rows: 24 } })
        assert.strictEqual(small.stdout.trim().split("\r\n").length, 2000)

        const interrupted = yield* Effect.scoped(Effect.gen(function*() {
          const process = yield* computer.spawn(spec(["sleep", "307"], { tty: { cols: 80, rows: 24 } }))
          yield* process.write(new Uint8Array([3]))
          return yield* collect(process)
        }))
        assert.deepStrictEqual(interrupted.exit, { exitCode: null, signal: "SIGINT" })

        const killed = yield* Effect.scoped(Effect.gen(function*() {
          const process = yield* computer.spawn(spec(["sleep", "308"], { tty: { cols: 80, rows: 24 } }))
          yield* process.signal("SIGKILL")
          return yield* collect(process)
        }))
        assert.deepStrictEqual(killed.exit, { exitCode: null, signal: "SIGKILL" })
      }))

    it.scopedLive("resizing a TTY changes what stty size reports", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        const process = yield* computer.spawn(spec(["sh"], { tty: { cols: 80, rows: 24 } }))
        const screen = yield* watch(process)
        yield* process.write(new TextEncoder().encode("stty size\n"))
        yield* screen.waitFor(/24 80/)
        yield* process.resize(100, 30)
        yield* process.write(new TextEncoder().encode("stty size\n"))
        yield* screen.waitFor(/30 100/)
        yield* process.closeStdin
        yield* Fiber.join(screen.fiber)
      }))

    it.scopedLive("an interactive python REPL works on a TTY and ends with Ctrl-D", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        const process = yield* computer.spawn(spec(["python3", "-i", "-q"], { tty: { cols: 80, rows: 24 } }))
        const screen = yield* watch(process)
        yield* screen.waitFor(/>>> /)
        yield* process.write(new TextEncoder().encode("6*7\n"))
        yield* screen.waitFor(/42/)
        yield* process.closeStdin
        yield* Fiber.join(screen.fiber)
      }))

    it.scopedLive("full-screen programs work on a TTY: vim edits a file, less pages and quits", () =>
      Effect.gen(function*() {
        const id = computerId()
        const computer = yield* openComputer({ id })
        const vim = yield* computer.spawn(spec(["vim", "-u", "NONE", "-N", "notes.txt"], { tty: { cols: 80, rows: 24 } }))
        const vimScreen = yield* watch(vim)
        yield* vimScreen.waitFor(/notes\.txt/)
        yield* vim.write(new TextEncoder().encode("ihello from vim\x1b:wq\r"))
        yield* Fiber.join(vimScreen.fiber)
        assert.strictEqual(readFileSync(join(stateDir, "computers", id, "home", "notes.txt"), "utf8"), "hello from vim\n")

        const less = yield* computer.spawn(spec(["sh", "-c", "seq 1 1000 | less"], { tty: { cols: 80, rows: 10 } }))
        const lessScreen = yield* watch(less)
        yield* lessScreen.waitFor(/\b9\b/)
        assert.notInclude(lessScreen.text(), "999")
        yield* less.write(new TextEncoder().encode("G"))
        yield* lessScreen.waitFor(/1000/)
        yield* less.write(new TextEncoder().encode("q"))
        yield* Fiber.join(lessScreen.fiber)
      }))

    it.scopedLive("closing the computer ends its processes and removes a temporary workspace", () =>
      Effect.gen(function*() {
        const id = computerId()
        const computerScope = yield* Scope.make()
        const computer = yield* Scope.extend(openComputer({ id, temporary: true }), computerScope)
        const process = yield* computer.spawn(spec(["sh", "-c", "sleep 3303 & sleep 3303"]))
        const tty = yield* computer.spawn(spec(["sleep", "3304"], { tty: { cols: 80, rows: 24 } }))
        const events = yield* Effect.fork(collect(process))
        const ttyEvents = yield* Effect.fork(collect(tty))
        for (let i = 0; i < 100 && hostProcesses(["sleep", "3303"]).length < 2; i++) yield* Effect.sleep("10 millis")
        assert.strictEqual(hostProcesses(["sleep", "3303"]).length, 2)
        assert.isTrue(existsSync(join(stateDir, "computers", id, "home")))
        yield* Scope.close(computerScope, Exit.void)
        const outcome = yield* Fiber.join(events)
        assert.isDefined(outcome.exit)
        assert.isDefined((yield* Fiber.join(ttyEvents)).exit)
        assert.deepStrictEqual(hostProcesses(["sleep", "3303"]), [])
        assert.deepStrictEqual(hostProcesses(["sleep", "3304"]), [])
        assert.isFalse(existsSync(join(stateDir, "computers", id)))
      }))

    it.scopedLive("closing a process's scope kills its group", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        yield* Effect.scoped(Effect.gen(function*() {
          yield* computer.spawn(spec(["sh", "-c", "sleep 305 & sleep 305"]))
          for (let i = 0; i < 100 && hostProcesses(["sleep", "305"]).length < 2; i++) yield* Effect.sleep("10 millis")
          assert.strictEqual(hostProcesses(["sleep", "305"]).length, 2)
        }))
        for (let i = 0; i < 100 && hostProcesses(["sleep", "305"]).length > 0; i++) yield* Effect.sleep("10 millis")
        assert.deepStrictEqual(hostProcesses(["sleep", "305"]), [])
      }))

    it.scopedLive("runs 100 concurrent processes", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        const outcomes = yield* Effect.forEach(
          Array.from({ length: 100 }, (_, i) => i),
          () => runIn(computer, ["sleep", "1"]),
          { concurrency: "unbounded" }
        )
        assert.strictEqual(outcomes.length, 100)
        for (const outcome of outcomes) assert.deepStrictEqual(outcome.exit, { exitCode: 0, signal: null })
      }))

    it.scopedLive("delivers 200 MiB of output exactly", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        const bytes = yield* Effect.scoped(Effect.gen(function*() {
          const process = yield* computer.spawn(spec(["head", "-c", "200M", "/dev/zero"]))
          return yield* Stream.runFold(process.events, 0, (n, event) => (event._tag === "Stdout" ? n + event.data.byteLength : n))
        }))
        assert.strictEqual(bytes, 209715200)
      }))

    it.scopedLive("restart keeps the workspace, ends the old processes, and spawns work afterwards", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        assert.isTrue(HostBackend.capabilities.restart && HostBackend.capabilities.factoryReset && HostBackend.capabilities.persistence)
        yield* runIn(computer, ["sh", "-c", "echo kept > /home/agent/kept.txt"])
        const old = yield* computer.spawn(spec(["sh", "-c", "sleep 311 & sleep 311"]))
        const oldEvents = yield* Effect.fork(collect(old))
        for (let i = 0; i < 100 && hostProcesses(["sleep", "311"]).length < 2; i++) yield* Effect.sleep("10 millis")
        assert.strictEqual(hostProcesses(["sleep", "311"]).length, 2)
        yield* computer.restart
        assert.isDefined((yield* Fiber.join(oldEvents)).exit)
        for (let i = 0; i < 100 && hostProcesses(["sleep", "311"]).length > 0; i++) yield* Effect.sleep("10 millis")
        assert.deepStrictEqual(hostProcesses(["sleep", "311"]), [])
        const after = yield* runIn(computer, ["cat", "/home/agent/kept.txt"])
        assert.strictEqual(after.stdout, "kept\n")
        // The old handle reaches nothing of the new agent.
        assert.strictEqual((yield* Effect.flip(old.signal("SIGTERM")))._tag, "BackendError")
        const tty = yield* runIn(computer, ["tty"], { tty: { cols: 80, rows: 24 } })
        assert.match(tty.stdout, /^\/dev\/pts\/\d+\r?\n$/)
        assert.isTrue(Option.isNone(yield* Effect.timeoutOption(computer.lost, "200 millis")))
      }))

    it.scopedLive("factory reset erases the workspace", () =>
      Effect.gen(function*() {
        const id = computerId()
        const computer = yield* openComputer({ id, temporary: false })
        yield* runIn(computer, ["sh", "-c", "mkdir -p d && echo x > d/f && echo y > .hidden"])
        yield* computer.factoryReset
        assert.deepStrictEqual(readdirSync(join(stateDir, "computers", id, "home")), [])
        const ls = yield* runIn(computer, ["ls", "-A", "/home/agent"])
        assert.deepStrictEqual(ls, { stdout: "", stderr: "", exit: { exitCode: 0, signal: null }, exitBeforeOutputEnded: false })
      }))

    it.scopedLive("destroy removes even a permanent computer, and closing its scope afterwards succeeds", () =>
      Effect.gen(function*() {
        const id = computerId()
        const scope = yield* Scope.make()
        const computer = yield* Scope.extend(openComputer({ id, temporary: false }), scope)
        yield* runIn(computer, ["sh", "-c", "echo x > f"])
        const sleeper = yield* Scope.extend(computer.spawn(spec(["sleep", "312"])), scope)
        const events = yield* Effect.fork(collect(sleeper))
        yield* computer.destroy
        assert.isFalse(existsSync(join(stateDir, "computers", id)))
        assert.isDefined((yield* Fiber.join(events)).exit)
        assert.deepStrictEqual(hostProcesses(["sleep", "312"]), [])
        assert.strictEqual((yield* Effect.flip(Effect.scoped(computer.spawn(spec(["true"])))))._tag, "BackendError")
        yield* Scope.close(scope, Exit.void)
        assert.isFalse(existsSync(join(stateDir, "computers", id)))
        assert.isTrue(Option.isNone(yield* Effect.timeoutOption(computer.lost, "100 millis")))
      }))

    it.scopedLive("lost completes when the agent is killed from outside", () =>
      Effect.gen(function*() {
        const id = computerId()
        const computer = yield* openComputer({ id })
        const sleeper = yield* computer.spawn(spec(["sleep", "313"]))
        const events = yield* Effect.fork(collect(sleeper))
        const pid = agentPid(id)
        assert.isDefined(pid)
        process.kill(pid!, "SIGKILL")
        const reason = yield* computer.lost.pipe(Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "lost never completed" }))
        assert.include(reason, id)
        assert.deepStrictEqual((yield* Fiber.join(events)).exit, { exitCode: null, signal: "SIGKILL" })
        assert.strictEqual((yield* Effect.flip(Effect.scoped(computer.spawn(spec(["true"])))))._tag, "BackendError")
        // A restart brings it back.
        yield* computer.restart
        assert.strictEqual((yield* runIn(computer, ["echo", "back"])).stdout, "back\n")
      }))

    it.scopedLive("lists computers and re-attaches a permanent one with its files", () =>
      Effect.gen(function*() {
        const dir = mkdtempSync(join(tmpdir(), "kt-host-list-"))
        yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
        const backend = yield* HostBackend.make({ stateDir: dir, network: false, sandbox: "bwrap" })
        assert.deepStrictEqual(yield* backend.list, [])
        const first = yield* Scope.make()
        const computer = yield* Scope.extend(backend.open({ id: "keeper", temporary: false }), first)
        yield* runIn(computer, ["sh", "-c", "echo still here > notes.txt"])
        const temp = yield* backend.open({ id: "scratch", temporary: true })
        mkdirSync(join(dir, "computers", "stray"), { recursive: true })
        const running = yield* backend.list
        assert.deepStrictEqual(running.map((c) => [c.id, c.temporary, c.state, c.image, c.providerId]).sort(), [
          ["keeper", false, "running", "host", join(dir, "computers", "keeper", "home")],
          ["scratch", true, "running", "host", join(dir, "computers", "scratch", "home")]
        ])
        assert.isFalse(Number.isNaN(Date.parse(running[0]!.createdAt)))
        const again = yield* Effect.flip(backend.open({ id: "keeper", temporary: false }))
        assert.include(again.reason, "already open")
        yield* Scope.close(first, Exit.void)
        const stopped = (yield* backend.list).find((c) => c.id === "keeper")
        assert.strictEqual(stopped?.state, "stopped")
        assert.strictEqual(stopped?.createdAt, running.find((c) => c.id === "keeper")?.createdAt)

        const mismatch = yield* Effect.flip(backend.open({ id: "keeper", temporary: true }))
        assert.strictEqual(mismatch._tag, "BackendError")
        assert.include(mismatch.reason, "permanent")
        const reopened = yield* HostBackend.make({ stateDir: dir, network: false, sandbox: "bwrap" }).pipe(
          Effect.flatMap((b) => b.open({ id: "keeper", temporary: false }))
        )
        assert.strictEqual((yield* runIn(reopened, ["cat", "notes.txt"])).stdout, "still here\n")
        assert.strictEqual((yield* runIn(temp, ["true"])).exit?.exitCode, 0)
      }))

    it.scopedLive("removes temporary computers of dead servers at startup, and nothing else", () =>
      Effect.gen(function*() {
        const dir = mkdtempSync(join(tmpdir(), "kt-host-reap-"))
        yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
        const live = { pid: process.pid, startTime: HostBackend.processStartTime(process.pid)! }
        // Same pid, another start time: the pid was reused, the owner is gone.
        const dead = { pid: process.pid, startTime: "0" }
        writeMetadata(dir, "dead-temp", true, dead)
        writeMetadata(dir, "dead-perm", false, dead)
        writeMetadata(dir, "live-temp", true, live)
        mkdirSync(join(dir, "computers", "unknown", "home"), { recursive: true })
        const backend = yield* HostBackend.make({ stateDir: dir, network: false, sandbox: "bwrap" })
        assert.deepStrictEqual(readdirSync(join(dir, "computers")).sort(), ["dead-perm", "live-temp", "unknown"])
        assert.deepStrictEqual((yield* backend.list).map((c) => c.id).sort(), ["dead-perm", "live-temp"])
        // A dead server's permanent computer can be opened by this one.
        const computer = yield* backend.open({ id: "dead-perm", temporary: false })
        assert.strictEqual((yield* runIn(computer, ["true"])).exit?.exitCode, 0)
      }))
    it.scopedLive("holds back heavy output until it is read, then delivers every byte in order", () =>
      Effect.gen(function*() {
        const computer = yield* openComputer()
        const process = yield* computer.spawn(spec(["seq", "1", "3000000"]))
        // Nobody reads yet: seq blocks on its pipe once the buffers are full instead of the server's memory growing.
        yield* Effect.sleep("500 millis")
        assert.strictEqual(hostProcesses(["seq", "1", "3000000"]).length, 1)
        // Another process of the computer waits meanwhile (one channel), and runs once the first is read.
        const other = yield* Effect.fork(runIn(computer, ["echo", "other"]))
        const hasher = createHash("sha256")
        let bytes = 0
        yield* Stream.runForEach(process.events, (event) =>
          Effect.sync(() => {
            if (event._tag === "Stdout") {
              hasher.update(event.data)
              bytes += event.data.byteLength
            }
          }))
        let expected = ""
        for (let i = 1; i <= 3000000; i++) expected += `${i}\n`
        assert.strictEqual(bytes, expected.length)
        assert.strictEqual(hasher.digest("hex"), createHash("sha256").update(expected).digest("hex"))
        assert.strictEqual((yield* Fiber.join(other)).stdout, "other\n")
      }))
  })

  describe("unsandboxed (sandbox: none)", () => {
    it.scopedLive("runs in the workspace directory on the host", () =>
      Effect.gen(function*() {
        const id = computerId()
        const computer = yield* openComputer({ id, sandbox: "none" })
        const workspace = join(stateDir, "computers", id, "home")
        assert.strictEqual(computer.home, workspace)
        const outcome = yield* runIn(computer, ["pwd"], { cwd: workspace })
        assert.strictEqual(outcome.stdout, `${workspace}\n`)
        const tty = yield* runIn(computer, ["tty"], { cwd: workspace, tty: { cols: 80, rows: 24 } })
        assert.match(tty.stdout, /^\/dev\/pts\/\d+\r?\n$/)
      }))
  })
})
