import { assert, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { Backend, type Capabilities } from "../../src/services/Backend.js"
import { describeIf } from "../support/Requirements.js"
import { type ConformanceTarget, needing, run, services } from "./ConformanceRun.js"
import { durableCases } from "./Durable.js"

export type { ConformanceTarget } from "./ConformanceRun.js"

/**
 * One suite of process and computer behaviours, run against every backend alike. A backend's
 * declared capabilities decide nothing here: everything below is required of every backend that
 * has processes, files and a lifecycle.
 */
export const conformance = (name: string, target: ConformanceTarget) =>
  describeIf(target.available, target.requirement)(`conformance: ${name}`, () => {
    it.live("exit codes and stderr", () =>
      run(target, Effect.gen(function*() {
        const { processes } = yield* services
        const ok = yield* processes.exec("c", { command: "echo hi" })
        assert.strictEqual(ok.exit_code, 0)
        assert.strictEqual(ok.stdout, "hi\n")
        const failed = yield* processes.spawn("c", { command: "echo broken >&2; exit 42" })
        assert.strictEqual(failed.status, "terminated")
        assert.strictEqual(failed.exitCode, 42)
        assert.strictEqual(failed.stderr, "broken\n")
        const args = yield* processes.exec("c", { args: ["sh", "-c", "echo \"$1\"", "sh", "a b  c"] })
        assert.strictEqual(args.stdout, "a b  c\n")
      })), 120_000)

    it.live("a simple command runs as its shell would run it (the agent execs plain words itself)", () =>
      run(target, Effect.gen(function*() {
        const { processes } = yield* services
        // What the shell exports to what it runs: PWD is the directory the process starts in.
        const env = yield* processes.spawn("c", { command: "env", cwd: "/tmp" })
        assert.strictEqual(env.exitCode, 0)
        assert.include(`\n${env.stdout}`, "\nPWD=/tmp\n")
        const sum = yield* processes.spawn("c", { command: "expr  6 +\t7" })
        assert.strictEqual(sum.stdout, "13\n")
        // Nothing to exec: the shell's own answers, as before.
        const missing = yield* processes.spawn("c", { command: "kt-no-such-command --flag" })
        assert.strictEqual(missing.exitCode, 127)
        assert.match(missing.stderr, /kt-no-such-command.*not found/)
        yield* processes.exec("c", {
          command: "printf 'echo from-script $0\\n' > /tmp/kt-no-shebang && chmod 755 /tmp/kt-no-shebang && printf x > /tmp/kt-plain"
        })
        const script = yield* processes.spawn("c", { command: "/tmp/kt-no-shebang" })
        assert.strictEqual(script.stdout, "from-script /tmp/kt-no-shebang\n")
        if (target.fileModes !== false) {
          const plain = yield* processes.spawn("c", { command: "/tmp/kt-plain" })
          assert.strictEqual(plain.exitCode, 126)
        }
      })), 120_000)

    it.live("stdin reaches a pipe and eof ends it", 
      needing(target, ["stdin"], Effect.gen(function*() {
        const { processes } = yield* services
        const { pid: id } = yield* processes.spawn("c", { command: "wc -c", background: true })
        yield* processes.stdin("c", { id, input: "12345\\n", eof: true })
        const done = yield* processes.wait("c", { id, timeoutMs: 20_000 })
        assert.strictEqual(done.outcome, "exited")
        assert.strictEqual((yield* processes.read("c", { id })).stdout.trim(), "6")
        const exec = yield* processes.exec("c", { command: "cat", stdin: "through stdin" })
        assert.strictEqual(exec.stdout, "through stdin")
      })), 120_000)

    it.live("a TTY process has a terminal and its screen is rendered", 
      needing(target, ["pty", "stdin"], Effect.gen(function*() {
        const { processes } = yield* services
        const { pid: id } = yield* processes.spawn("c", {
          command: "tty; stty size; printf 'name? '; read name; echo \"hello $name\"",
          tty: true,
          cols: 100,
          rows: 20,
          background: true
        })
        // The prompt is on the screen before the wait begins (as under load): the wait still
        // matches it, trailing space and all, although rendered rows drop trailing spaces.
        let shown = ""
        for (let i = 0; i < 200 && !shown.includes("name?"); i++) {
          shown = (yield* processes.read("c", { id })).stdout
          if (!shown.includes("name?")) yield* Effect.sleep(Duration.millis(100))
        }
        assert.include(shown, "name?")
        const asked = yield* processes.wait("c", { id, pattern: "name\\? ", timeoutMs: 20_000 })
        assert.strictEqual(asked.outcome, "matched")
        yield* processes.stdin("c", { id, input: "kiln\\r" })
        const done = yield* processes.wait("c", { id, timeoutMs: 20_000 })
        assert.strictEqual(done.exitCode, 0)
        const read = yield* processes.read("c", { id })
        assert.isDefined(read.screen)
        assert.match(read.stdout, /^\/dev\/pts\/\d+$/m)
        assert.match(read.stdout, /^20 100$/m)
        assert.match(read.stdout, /^hello kiln$/m)
      })), 120_000)

    it.live("kill ends a whole process tree", 
      needing(target, ["signals"], Effect.gen(function*() {
        const { processes } = yield* services
        const { pid: id } = yield* processes.spawn("c", { command: "sh -c 'sleep 317 & sleep 317'", background: true })
        yield* Effect.sleep(Duration.millis(300))
        const before = yield* processes.exec("c", { command: "ps -eo args | grep -c '^sleep 317' || true" })
        assert.strictEqual(before.stdout.trim(), "2")
        const killed = yield* processes.kill("c", { id })
        assert.strictEqual(killed.status, "terminated")
        let left = "2"
        for (let i = 0; i < 50 && left !== "0"; i++) {
          yield* Effect.sleep(Duration.millis(100))
          left = (yield* processes.exec("c", { command: "ps -eo args | grep -c '^sleep 317' || true" })).stdout.trim()
        }
        assert.strictEqual(left, "0")
      })), 120_000)

    it.live("has no network unless it was asked for", needing(target, ["networkControl"], Effect.gen(function*() {
      const { processes } = yield* services
      const interfaces = yield* processes.exec("c", { command: "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '" })
      assert.deepStrictEqual(interfaces.stdout.trim().split("\n"), ["lo"])
    })), 120_000)

    it.live("a process that outlives its timeout keeps running in the background", () =>
      run(target, Effect.gen(function*() {
        const { processes } = yield* services
        const slow = yield* processes.spawn("c", { command: "echo first; sleep 1.5; echo second", timeoutMs: 300 })
        assert.strictEqual(slow.status, "running")
        assert.strictEqual(slow.stdout, "first\n")
        const done = yield* processes.wait("c", { id: slow.pid, timeoutMs: 20_000 })
        assert.strictEqual(done.exitCode, 0)
        assert.strictEqual(done.stdout, "second\n", "wait returns what arrived while it waited")
        const rest = yield* processes.read("c", { id: slow.pid, stdoutCursor: slow.next!.stdout })
        assert.strictEqual(rest.stdout, "second\n")
      })), 120_000)

    it.live("files are written and read inside the computer, and stay inside it", 
      needing(target, ["files"], Effect.gen(function*() {
        const { files, processes } = yield* services
        const written = yield* files.write("c", { path: "notes/today.txt", content: "hello files\n" })
        assert.strictEqual(written.bytes, 12)
        const cat = yield* processes.exec("c", { command: "cat /home/agent/notes/today.txt" })
        assert.strictEqual(cat.stdout, "hello files\n")
        const read = yield* files.read("c", { path: "/home/agent/notes/today.txt" })
        assert.strictEqual(read.content, "hello files\n")
        const binary = Buffer.from([0, 1, 2, 255, 254, 10])
        yield* files.write("c", { path: "bin.dat", content: binary.toString("base64"), encoding: "base64" })
        const back = yield* files.read("c", { path: "bin.dat" })
        assert.strictEqual(back.encoding, "base64")
        assert.deepStrictEqual(Buffer.from(back.content, "base64"), binary)
        const missing = yield* Effect.flip(files.read("c", { path: "no/such/file" }))
        assert.strictEqual(missing._tag, "FileNotFound")
        // `..` and symlinks resolve inside the computer: the host's files are not reachable
        yield* processes.exec("c", { command: "ln -sf /etc/hostname link" })
        const viaDots = yield* files.read("c", { path: "../../../../../etc/hostname" })
        const viaLink = yield* files.read("c", { path: "link" })
        const inside = yield* processes.exec("c", { command: "cat /etc/hostname" })
        assert.strictEqual(viaDots.content, inside.stdout)
        assert.strictEqual(viaLink.content, inside.stdout)
      })), 120_000)

    it.live("restart keeps files, ends processes, and the computer works after", 
      needing(target, ["restart", "files"], Effect.gen(function*() {
        const { computers, files, processes } = yield* services
        const computer = yield* computers.create("c", { computer_id: "conf-restart" })
        yield* files.write("c", { path: "kept.txt", content: "still here", computer_id: computer.id })
        const { pid: id } = yield* processes.spawn("c", { command: "sleep 300", background: true, computer_id: computer.id })
        yield* computers.restart("c", computer.id)
        const info = (yield* processes.list("c", { status: "all" })).processes.find((p) => p.pid === id)!
        assert.notStrictEqual(info.status, "running")
        assert.match(info.reason ?? "", /restarted/)
        const read = yield* files.read("c", { path: "kept.txt", computer_id: computer.id })
        assert.strictEqual(read.content, "still here")
        const after = yield* processes.exec("c", { command: "echo alive", computer_id: computer.id })
        assert.strictEqual(after.stdout, "alive\n")
      })), 120_000)

    it.live("factory reset erases files", 
      needing(target, ["factoryReset", "files"], Effect.gen(function*() {
        const { computers, files, processes } = yield* services
        const computer = yield* computers.create("c", { computer_id: "conf-reset" })
        yield* files.write("c", { path: "gone.txt", content: "soon gone", computer_id: computer.id })
        yield* computers.factoryReset("c", computer.id)
        const missing = yield* Effect.flip(files.read("c", { path: "gone.txt", computer_id: computer.id }))
        assert.strictEqual(missing._tag, "FileNotFound")
        const after = yield* processes.exec("c", { command: "echo fresh", computer_id: computer.id })
        assert.strictEqual(after.stdout, "fresh\n")
      })), 120_000)

    it.live("delete removes the computer; a permanent one survives a new server and is found by id", (context) =>
      Effect.gen(function*() {
        const declared = yield* run(target, Effect.map(Backend, (backend) => backend.capabilities))
        if (!declared.persistence || !declared.files) return context.skip("no persistence or files")
        yield* run(target, Effect.gen(function*() {
          const { computers, files } = yield* services
          yield* computers.create("a", { computer_id: "conf-keep", temporary: false })
          yield* files.write("a", { path: "mine.txt", content: "persisted", computer_id: "conf-keep" })
        }))
        yield* run(target, Effect.gen(function*() {
          const { computers, files } = yield* services
          const listed = yield* computers.list("b")
          assert.isTrue(listed.some((c) => c.computer_id === "conf-keep" && !c.temporary))
          // By id alone, from another session of another server.
          const read = yield* files.read("b", { path: "mine.txt", computer_id: "conf-keep" })
          assert.strictEqual(read.content, "persisted")
          const wrong = yield* Effect.flip(computers.create("b", { computer_id: "conf-keep", temporary: true }))
          assert.strictEqual(wrong._tag, "InvalidInput")
          yield* computers.delete("b", "conf-keep")
          assert.isFalse((yield* computers.list("b")).some((c) => c.computer_id === "conf-keep"))
          const gone = yield* Effect.flip(computers.get("b", "conf-keep"))
          assert.strictEqual(gone._tag, "ComputerNotFound")
        }))
      }), 180_000)

    it.live("temporary computers are private to their sessions unless shared, and go with the last one", () =>
      run(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        const one = yield* processes.exec("session-1", { command: "hostname" })
        const two = yield* processes.exec("session-2", { command: "hostname" })
        assert.notStrictEqual(one.computer_id, two.computer_id)
        const denied = yield* Effect.flip(processes.exec("session-2", { command: "true", computer_id: one.computer_id }))
        assert.strictEqual(denied._tag, "AccessDenied")
        assert.isFalse((yield* computers.list("session-2")).some((c) => c.computer_id === one.computer_id))
        const shared = yield* computers.create("session-1", { computer_id: "conf-shared", shared: true })
        yield* processes.exec("session-2", { command: "true", computer_id: shared.id })
        yield* computers.release("session-1")
        const afterOne = yield* computers.list("session-2")
        assert.isTrue(afterOne.some((c) => c.computer_id === "conf-shared"), "still held by session-2")
        assert.isFalse(afterOne.some((c) => c.computer_id === one.computer_id), "session-1's default is gone")
        yield* computers.release("session-2")
        assert.strictEqual((yield* Effect.flip(computers.get("session-3", "conf-shared")))._tag, "ComputerNotFound")
        assert.deepStrictEqual((yield* computers.list("session-3")).filter((c) => c.temporary), [])
      })), 120_000)
    it.live("every capability the backend does not declare is refused with Unsupported, never skipped", () =>
      run(target, Effect.gen(function*() {
        const { computers, files, processes } = yield* services
        const backend = yield* Backend
        const declared = backend.capabilities
        const running = yield* processes.spawn("u", { command: "sleep 60", background: true })
        // The session's first spawn names its default computer.
        const computerId = running.computer_id!
        const refusals: Array<readonly [keyof Capabilities, Effect.Effect<unknown, { readonly _tag: string }>]> = [
          ["pty", processes.spawn("u", { command: "true", tty: true })],
          ["stdin", processes.stdin("u", { id: running.pid, input: "x" })],
          ["signals", processes.kill("u", { id: running.pid, signal: "SIGUSR1" })],
          ["restart", computers.restart("u", computerId)],
          ["factoryReset", computers.factoryReset("u", computerId)],
          ["files", files.read("u", { path: "/etc/hostname" })],
          ["persistence", computers.create("u", { computer_id: "conf-no-persist", temporary: false })]
        ]
        // networkControl cannot be refused per call: a backend without it says so at startup.
        for (const [capability, attempt] of refusals) {
          if (declared[capability]) continue
          const error = yield* Effect.flip(attempt)
          assert.strictEqual(error._tag, "Unsupported", `${capability} is not declared, so it must be refused`)
        }
        yield* processes.kill("u", { id: running.pid, signal: "SIGKILL" }).pipe(Effect.ignore)
      })), 120_000)

    durableCases(target)
  })
