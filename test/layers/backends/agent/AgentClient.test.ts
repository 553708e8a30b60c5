import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import type { ExitInfo } from "../../../../src/services/Backend.js"
import * as AgentLauncher from "../../../../src/layers/backends/agent/AgentLauncher.js"
import * as NativeBinaries from "../../../../src/layers/backends/agent/NativeBinaries.js"

describe("AgentClient (unsandboxed agent)", () => {
  const dir = mkdtempSync(join(tmpdir(), "kt-agent-test-"))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  const start = Effect.gen(function*() {
    const binaries = yield* NativeBinaries.locate("host")
    const name = `agent-${Math.random().toString(36).slice(2)}`
    return yield* AgentLauncher.make("host", { file: binaries.agent, args: [], cwd: dir, env: {}, channel: join(dir, `${name}.fifo`) })
  })

  it.scopedLive("delivers output written just before the agent dies, then reports the death", () =>
    Effect.gen(function*() {
      let lost: string | undefined
      const binaries = yield* NativeBinaries.locate("host")
      const name = `agent-${Math.random().toString(36).slice(2)}`
      const client = yield* AgentLauncher.make("host", {
        file: binaries.agent,
        args: [],
        cwd: dir,
        env: {},
        channel: join(dir, `${name}.fifo`)
      }, { onLost: (reason) => (lost = reason) })
      let bytes = 0
      let exit: ExitInfo | undefined
      let closed = false
      // Less than a pipe's capacity: it all sits in the channel, unread, when the agent dies.
      const { id } = yield* client.spawn({ argv: ["sh", "-c", "head -c 10000 /dev/zero; sleep 5"], cwd: dir, env: { PATH: "/usr/bin:/bin" } }, {
        onStdout: (data) => (bytes += data.byteLength),
        onStderr: () => {},
        onExit: (e) => (exit = e),
        onClosed: () => (closed = true)
      })
      client.holdOutput(id, true)
      yield* Effect.sleep("300 millis")
      process.kill(client.pid!, "SIGKILL")
      yield* Effect.sleep("400 millis")
      assert.isFalse(closed)
      client.holdOutput(id, false)
      for (let i = 0; i < 300 && !closed; i++) yield* Effect.sleep("10 millis")
      assert.isTrue(closed)
      assert.strictEqual(bytes, 10000)
      assert.deepStrictEqual(exit, { exitCode: null, signal: "SIGKILL" })
      assert.match(lost ?? "", /killed by SIGKILL/)
    }))

  it.scopedLive("when the agent dies, live processes exit with SIGKILL and later spawns fail", () =>
    Effect.gen(function*() {
      const client = yield* start
      const exits: Array<ExitInfo> = []
      let closed = false
      yield* client.spawn({ argv: ["sleep", "306"], cwd: dir, env: { PATH: "/usr/bin:/bin" } }, {
        onStdout: () => {},
        onStderr: () => {},
        onExit: (exit) => exits.push(exit),
        onClosed: () => (closed = true)
      })
      process.kill(client.pid!, "SIGKILL")
      for (let i = 0; i < 200 && !closed; i++) yield* Effect.sleep("10 millis")
      assert.deepStrictEqual(exits, [{ exitCode: null, signal: "SIGKILL" }])
      assert.isTrue(closed)
      // The agent's direct children die with it (PR_SET_PDEATHSIG), even without a sandbox.
      let left = ["x"]
      for (let i = 0; i < 100 && left.length > 0; i++) {
        left = readdirSync("/proc").filter((entry) => {
          try {
            return /^\d+$/.test(entry) && readFileSync(`/proc/${entry}/cmdline`, "utf8") === "sleep\0" + "306\0"
          } catch {
            return false
          }
        })
        if (left.length > 0) yield* Effect.sleep("10 millis")
      }
      assert.deepStrictEqual(left, [])
      const error = yield* Effect.flip(client.spawn({ argv: ["true"], cwd: dir, env: {} }, {
        onStdout: () => {},
        onStderr: () => {},
        onExit: () => {},
        onClosed: () => {}
      }))
      assert.strictEqual(error._tag, "ProviderError")
    }))

  it.scopedLive("passes exactly the given environment and reports exec failures", () =>
    Effect.gen(function*() {
      const client = yield* start
      let out = ""
      let done = false
      yield* client.spawn({ argv: ["env"], cwd: dir, env: { PATH: "/usr/bin:/bin", ONLY: "this" } }, {
        onStdout: (data) => (out += Buffer.from(data).toString()),
        onStderr: () => {},
        onExit: () => {},
        onClosed: () => (done = true)
      })
      for (let i = 0; i < 200 && !done; i++) yield* Effect.sleep("10 millis")
      assert.strictEqual(out, "PATH=/usr/bin:/bin\nONLY=this\n")
      const failed = yield* Effect.flip(client.spawn({ argv: ["/nonexistent/x"], cwd: dir, env: {} }, {
        onStdout: () => {},
        onStderr: () => {},
        onExit: () => {},
        onClosed: () => {}
      }))
      assert.strictEqual(failed._tag, "SpawnFailed")
    }))

  it.scopedLive("SIGKILL tears the whole tree down and EXIT says how many other processes it ended", () =>
    Effect.gen(function*() {
      const client = yield* start
      let exit: ExitInfo | undefined
      let ended = -1
      let closedEnded: number | undefined = -1
      const { id } = yield* client.spawn({
        argv: ["sh", "-c", "setsid sleep 3401 & (setsid sh -c 'sleep 3402 & sleep 3403' &); sleep 3404"],
        cwd: dir,
        env: { PATH: "/usr/bin:/bin" }
      }, {
        onStdout: () => {},
        onStderr: () => {},
        onExit: (e, n) => {
          exit = e
          ended = n
        },
        onClosed: (n) => (closedEnded = n)
      })
      const sleeps = () => readdirSync("/proc").filter((entry) => {
        try {
          const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0")
          return /^\d+$/.test(entry) && argv[0] === "sleep" && /^340[1-4]$/.test(argv[1] ?? "")
        } catch {
          return false
        }
      })
      for (let i = 0; i < 100 && sleeps().length < 4; i++) yield* Effect.sleep("10 millis")
      assert.strictEqual(sleeps().length, 4)
      client.signal(id, "SIGKILL")
      for (let i = 0; i < 300 && closedEnded === -1; i++) yield* Effect.sleep("10 millis")
      assert.deepStrictEqual(exit, { exitCode: null, signal: "SIGKILL" })
      // its inner sh and the four sleeps; the process itself (sh) is not counted: its exit says how it ended
      assert.strictEqual(ended, 5)
      assert.strictEqual(closedEnded, 0)
      assert.deepStrictEqual(sleeps(), [])
    }))

  it.scopedLive("says once, in a LOG frame, when it cannot clear the capability bounding set", () =>
    Effect.gen(function*() {
      const binaries = yield* NativeBinaries.locate("host")
      const logs: Array<string> = []
      // An unprivileged agent keeps the full bounding set it inherited but lacks CAP_SETPCAP.
      const client = yield* AgentLauncher.make("host", {
        file: "/usr/bin/setpriv",
        args: ["--reuid=65534", "--regid=65534", "--clear-groups", "--", binaries.agent, "--caps", "drop"],
        cwd: "/",
        env: {},
        channel: join(dir, `log-${Math.random().toString(36).slice(2)}.fifo`)
      }, { onLog: (text) => logs.push(text) })
      let out = ""
      let closed = false
      yield* client.spawn({ argv: ["grep", "-E", "^(CapEff|CapPrm|NoNewPrivs|Seccomp):", "/proc/self/status"], cwd: "/", env: { PATH: "/usr/bin:/bin" } }, {
        onStdout: (data) => (out += Buffer.from(data).toString()),
        onStderr: () => {},
        onExit: () => {},
        onClosed: () => (closed = true)
      })
      for (let i = 0; i < 300 && !closed; i++) yield* Effect.sleep("10 millis")
      assert.strictEqual(logs.length, 1)
      assert.match(logs[0]!, /cannot clear the capability bounding set \(Operation not permitted; \d+ capabilities remain/)
      assert.strictEqual(out, "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n")
    }))

  it.scopedLive("SPAWN_DIRECT execs plain words itself, with PWD, and falls back to the shell when nothing can run", () =>
    Effect.gen(function*() {
      const client = yield* start
      const run = (direct: ReadonlyArray<string>, env: Record<string, string> = {}) =>
        Effect.gen(function*() {
          let out = ""
          let exit: ExitInfo | undefined
          let closed = false
          yield* client.spawn({
            argv: ["sh", "-c", "echo via-shell"],
            direct,
            cwd: dir,
            env: { PATH: "/usr/bin:/bin", ...env }
          }, {
            onStdout: (data) => (out += Buffer.from(data).toString()),
            onStderr: () => {},
            onExit: (e) => (exit = e),
            onClosed: () => (closed = true)
          })
          for (let i = 0; i < 500 && !closed; i++) yield* Effect.sleep("10 millis")
          assert.isTrue(closed)
          return { out, exit }
        })
      // Run without the shell: `env` prints the environment it was given, PWD replaced by the cwd.
      const env = yield* run(["env"], { PWD: "/elsewhere", MARK: "1" })
      assert.notInclude(env.out, "via-shell")
      assert.include(`\n${env.out}`, `\nPWD=${dir}\n`)
      assert.notInclude(env.out, "/elsewhere")
      assert.include(env.out, "MARK=1\n")
      assert.deepStrictEqual(env.exit, { exitCode: 0, signal: null })
      // Searched on the env's PATH, empty entries meaning the directory, as a shell searches.
      const found = yield* run(["expr", "2", "+", "3"], { PATH: "/nonexistent::/usr/bin:/bin" })
      assert.strictEqual(found.out, "5\n")
      // Not found, a script without #!, a file that is not executable: the shell takes over.
      assert.strictEqual((yield* run(["kt-no-such-command"])).out, "via-shell\n")
      writeFileSync(join(dir, "no-shebang"), "echo script\n", { mode: 0o755 })
      assert.strictEqual((yield* run(["./no-shebang"])).out, "via-shell\n")
      writeFileSync(join(dir, "plain"), "x", { mode: 0o644 })
      assert.strictEqual((yield* run([join(dir, "plain")])).out, "via-shell\n")
    }))
})
