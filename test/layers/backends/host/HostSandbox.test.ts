/**
 * What processes of a host computer see and get: exit codes, output (exact, in order, held back
 * while unread), stdin, signals to whole trees, terminals, and the sandbox's isolation. Provider
 * calls only (a connection made with create + connect); lifecycles are in HostLifecycle.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Stream } from "effect"
import { createHash } from "node:crypto"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { type BackendProcess, type Connection, ownedEvents } from "../../../../src/services/Backend.js"
import { collect, connect, run, spec } from "../../../support/HostComputer.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"

const stateDir = mkdtempSync(join(tmpdir(), "kt-host-sandbox-"))
afterAll(() => rmSync(stateDir, { recursive: true, force: true }))

let counter = 0
const computerId = () => `t${process.pid}-${++counter}`

/** A connected temporary computer of a new host backend (removed with the test's Scope). */
const openComputer = (options: { network?: boolean; sandbox?: "bwrap" | "none"; id?: string } = {}) =>
  Effect.map(
    connect({ stateDir, id: options.id ?? computerId(), network: options.network ?? false, sandbox: options.sandbox ?? "bwrap" }),
    ({ connection }) => connection
  )

const runIn = (computer: Connection, argv: ReadonlyArray<string>, extra: Parameters<typeof run>[2] = {}) => run(computer, argv, extra)

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

/** Reads a TTY process's output in the background; `waitFor` polls it for a pattern. */
const watch = (process: BackendProcess) =>
  Effect.gen(function*() {
    let text = ""
    const fiber = yield* Stream.runForEach(ownedEvents(process), (event) =>
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

describeIf(bwrapWorks, "bubblewrap")("host computers (sandboxed)", () => {
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
        assert.deepInclude(outcome.exit!, { exitCode: null, signal: "SIGTERM" })
        yield* Effect.sleep("50 millis")
        assert.deepStrictEqual(hostProcesses(["sleep", "301"]), [])
      }))

    it.scopedLive("isolates the host: read-only system, private workspace, no secrets, no capabilities", () =>
      Effect.gen(function*() {
        const id = computerId()
        const computer = yield* openComputer({ id })
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
          // Every byte, in order: the agent sends Exit only after the last one.
          const lines = seq.stdout.split("\r\n")
          assert.strictEqual(lines.length, 100_001)
          assert.strictEqual(lines.pop(), "")
          assert.isTrue(lines.every((line, index) => line === String(index + 1)), "exactly 1..100000")
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
          return yield* Stream.runFold(ownedEvents(process), 0, (n, event) => (event._tag === "Stdout" ? n + event.data.byteLength : n))
        }))
        assert.strictEqual(bytes, 209715200)
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
        yield* Stream.runForEach(ownedEvents(process), (event) =>
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

describe("host computers (unsandboxed: sandbox none)", () => {
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
