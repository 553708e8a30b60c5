import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs"
import { type AddressInfo, connect, createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { Duplex } from "node:stream"
import { afterAll } from "vitest"
import type { AgentClient, WatchHandlers } from "../../../../src/layers/backends/agent/AgentClient.js"
import * as AgentLauncher from "../../../../src/layers/backends/agent/AgentLauncher.js"
import { newKey } from "../../../../src/layers/backends/agent/AgentHandshake.js"
import { encodeFrame, FrameType, HEADER_SIZE } from "../../../../src/layers/backends/agent/AgentProtocol.js"
import * as NativeBinaries from "../../../../src/layers/backends/agent/NativeBinaries.js"
import type { ExitInfo } from "../../../../src/services/Backend.js"
import * as Frames from "../../../support/AgentFrames.js"

const PATH = { PATH: "/usr/bin:/bin" }

/** What a watch heard. */
const watcher = () => {
  const seen = { out: "", err: "", exit: undefined as ExitInfo | undefined, ended: -1, closed: false, closedEnded: -2 as number | undefined, offsets: [] as Array<number> }
  const handlers: WatchHandlers = {
    onOutput: (stream, offset, data) => {
      if (stream === "stdout") {
        seen.offsets.push(offset)
        seen.out += Buffer.from(data).toString("latin1")
      } else {
        seen.err += Buffer.from(data).toString("latin1")
      }
    },
    onExit: (exit, ended) => {
      seen.exit = exit
      seen.ended = ended
    },
    onClosed: (ended) => {
      seen.closed = true
      seen.closedEnded = ended
    }
  }
  return { seen, handlers }
}

const until = (condition: () => boolean, tries = 500) =>
  Effect.gen(function*() {
    for (let i = 0; i < tries && !condition(); i++) yield* Effect.sleep("10 millis")
    assert.isTrue(condition(), "the condition did not hold in time")
  })

describe("AgentClient (unsandboxed agent)", () => {
  const root = mkdtempSync(join(tmpdir(), "kt-agent-test-"))
  afterAll(() => rmSync(root, { recursive: true, force: true }))

  /** A computer's directory and key, with the agent's command in it. */
  const computer = (extra: ReadonlyArray<string> = []) =>
    Effect.gen(function*() {
      const binaries = yield* NativeBinaries.locate("host")
      const dir = join(root, Math.random().toString(36).slice(2))
      mkdirSync(dir)
      const place: AgentLauncher.AgentPlace = { socket: join(dir, "agent.sock"), key: newKey() }
      const command: AgentLauncher.AgentCommand = {
        file: binaries.agent,
        args: ["--listen", place.socket, "--store", join(dir, "store"), "--caps", "keep", "--no-seccomp", ...extra],
        cwd: dir,
        env: {}
      }
      // A durable agent outlives the test's connections: it is ended with the test.
      yield* Effect.addFinalizer(() => AgentLauncher.stop("host", place))
      return { dir, place, command, binaries }
    })

  const open = (c: { readonly place: AgentLauncher.AgentPlace; readonly command: AgentLauncher.AgentCommand }, bound = false, options = {}) =>
    AgentLauncher.open("host", c.place, Effect.succeed({ ...c.command, args: [...c.command.args, ...(bound ? ["--bound"] : [])] }), bound, options)

  /** A connection in a Scope of its own, to end it in the middle of a test. */
  const openApart = (c: Parameters<typeof open>[0], bound = false) =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const client = yield* Scope.extend(open(c, bound), scope)
      return { client, close: Scope.close(scope, Exit.void) }
    })

  it.scopedLive("a process started through one connection is listed, read, written to and killed through another", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const a = yield* open(c)
      const started = watcher()
      const { handle } = yield* a.spawn({ argv: ["sh", "-c", "echo ready; read line; echo got $line; sleep 600"], cwd: c.dir, env: PATH, meta: "{\"command\":\"reader\",\"cwd\":\"/\"}" }, started.handlers)
      yield* until(() => started.seen.out === "ready\n")
      const b = yield* open(c)
      const listed = yield* b.list
      assert.deepStrictEqual(listed.map((r) => [r.handle, r.state, r.meta]), [[handle, "running", "{\"command\":\"reader\",\"cwd\":\"/\"}"]])
      const followed = watcher()
      yield* b.watch(handle, { stdout: 6, stderr: 0 }, followed.handlers)
      b.write(handle, Buffer.from("hello\n"))
      yield* until(() => followed.seen.out === "got hello\n")
      // The first connection follows it too: both see the same bytes.
      yield* until(() => started.seen.out === "ready\ngot hello\n")
      const read = yield* b.read(handle, "stdout", 0, 100)
      assert.deepStrictEqual([read.start, read.total, read.data.toString()], [0, 16, "ready\ngot hello\n"])
      b.note(handle, "killed with SIGKILL (kill tool)")
      b.signal(handle, "SIGKILL")
      yield* until(() => started.seen.closed && followed.seen.closed)
      assert.deepStrictEqual(started.seen.exit, { exitCode: null, signal: "SIGKILL" })
      const after = yield* a.list
      assert.deepStrictEqual(after.map((r) => [r.state, r.exit, r.note]), [["closed", { kind: "signal", value: 9 }, "killed with SIGKILL (kill tool)"]])
    }))

  it.scopedLive("a durable agent outlives the connection that started it: a new connection finds the process under its handle", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const first = yield* openApart(c)
      const seen = watcher()
      const { handle } = yield* first.client.spawn({ argv: ["sh", "-c", "echo before; sleep 1; echo after; exit 7"], cwd: c.dir, env: PATH }, seen.handlers)
      yield* until(() => seen.seen.out === "before\n")
      yield* first.close
      // The watch ends with its connection; the process does not.
      assert.isTrue(seen.seen.closed)
      assert.strictEqual(seen.seen.closedEnded, undefined)
      const later = yield* open(c)
      assert.strictEqual(later.boot, first.client.boot)
      const again = watcher()
      yield* later.watch(handle, { stdout: 0, stderr: 0 }, again.handlers)
      yield* until(() => again.seen.closed)
      assert.strictEqual(again.seen.out, "before\nafter\n")
      assert.deepStrictEqual(again.seen.exit, { exitCode: 7, signal: null })
    }))

  it.scopedLive("a bound agent ends, with every process, when its launcher's stdin closes (its server is gone)", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const owner = yield* openApart(c, true)
      const seen = watcher()
      const { handle } = yield* owner.client.spawn({ argv: ["sleep", "3377"], cwd: c.dir, env: PATH }, seen.handlers)
      assert.isAbove(handle, 0)
      const sleeps = () => readdirSync("/proc").filter((entry) => {
        try {
          return /^\d+$/.test(entry) && readFileSync(`/proc/${entry}/cmdline`, "utf8") === "sleep\0" + "3377\0"
        } catch {
          return false
        }
      })
      yield* until(() => sleeps().length === 1)
      yield* owner.close
      yield* until(() => sleeps().length === 0)
      const after = yield* Effect.either(AgentLauncher.attach("host", c.place))
      assert.strictEqual(after._tag, "Left")
    }))

  it.scopedLive("a second start for the same computer finds its agent running (status 3) and attaches to it", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const [a, b] = yield* Effect.all([open(c), open(c)], { concurrency: 2 })
      assert.strictEqual(a.boot, b.boot)
    }))

  it.scopedLive("an attach without the computer's key ends only that attempt; a replayed proof is refused", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const good = yield* open(c)
      const forged = yield* Effect.either(Effect.scoped(AgentLauncher.attach("host", { socket: c.place.socket, key: newKey() })))
      assert.strictEqual(forged._tag, "Left")
      // Record a real AUTH frame, then play it on a new connection (a fresh agent nonce).
      const raw = (send: (hello: Buffer) => Buffer | undefined) =>
        Effect.async<boolean>((resume) => {
          const socket = connect(c.place.socket)
          let got = Buffer.alloc(0)
          let sent = false
          socket.on("data", (chunk) => {
            got = Buffer.concat([got, chunk])
            if (!sent && got.length >= HEADER_SIZE + 52) {
              sent = true
              const frame = send(got.subarray(0, HEADER_SIZE + 52))
              if (frame) socket.write(frame)
            } else if (sent && got.length > HEADER_SIZE + 52) resume(Effect.succeed(true))
          })
          socket.on("close", () => resume(Effect.succeed(false)))
          socket.on("error", () => {})
        })
      const { createHmac } = yield* Effect.promise(() => import("node:crypto"))
      let recorded: Buffer | undefined
      const accepted = yield* raw((hello) => {
        const boot = hello.subarray(HEADER_SIZE + 4, HEADER_SIZE + 20)
        const nonce = hello.subarray(HEADER_SIZE + 20, HEADER_SIZE + 52)
        const serverNonce = Buffer.alloc(32, 7)
        const proof = createHmac("sha256", Buffer.from(c.place.key, "hex")).update("kt-agent-v3 server").update(boot).update(nonce).update(serverNonce).digest()
        recorded = encodeFrame(FrameType.Auth, 0, Buffer.concat([serverNonce, proof, Frames.u32(0)]))
        return recorded
      })
      assert.isTrue(accepted, "a correct proof is welcomed")
      const replayed = yield* raw(() => recorded)
      assert.isFalse(replayed, "the same proof on another connection is refused")
      // The computer and its other servers are untouched.
      assert.strictEqual(good.failure, undefined)
      assert.deepStrictEqual(yield* good.list, [])
    }))

  it.scopedLive("a listener that cannot prove the computer's key is not taken for its agent", () =>
    Effect.gen(function*() {
      const dir = mkdtempSync(join(root, "fake-"))
      const socket = join(dir, "agent.sock")
      const server = createServer((connection) => {
        connection.write(Frames.hello())
        connection.once("data", () => connection.write(Frames.welcome()))
        connection.on("error", () => {})
      })
      yield* Effect.acquireRelease(Effect.async<void>((resume) => void server.listen(socket, () => resume(Effect.void))), () => Effect.sync(() => server.close()))
      const attempt = yield* Effect.flip(Effect.scoped(AgentLauncher.attach("host", { socket, key: newKey() })))
      assert.match(attempt.message, /did not prove its key/)
    }))

  it.scopedLive("output beyond the store's head and tail is read by range, and what fell out is exactly where it says", () =>
    Effect.gen(function*() {
      const c = yield* computer(["--retain", "4000"]) // a head of 1000 bytes, a tail of 3000
      const client = yield* open(c)
      const seen = watcher()
      const { handle } = yield* client.spawn({ argv: ["seq", "1", "20000"], cwd: c.dir, env: PATH }, seen.handlers)
      yield* until(() => seen.seen.closed)
      const full = Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join("")
      const total = full.length
      for (const [from, expectStart] of [[0, 0], [999, 999], [1000, total - 3000], [50000, total - 3000], [total - 10, total - 10]] as const) {
        const read = yield* client.read(handle, "stdout", from, 500)
        assert.strictEqual(read.total, total)
        assert.strictEqual(read.start, expectStart, `from ${from}`)
        // A read ends where the head does (what follows it fell out), or at most bytes asked.
        const end = read.start < 1000 ? Math.min(1000, read.start + 500) : Math.min(total, read.start + 500)
        assert.strictEqual(read.data.toString(), full.slice(read.start, end), `from ${from}`)
      }
      // The watch followed it live: its pieces are the stream's bytes at the offsets it was told.
      assert.isTrue(full.startsWith(seen.seen.out.slice(0, 1000)))
      assert.isTrue(full.endsWith(seen.seen.out.slice(-3000)))
    }))

  it.scopedLive("a server that stops reading falls behind without holding the process up; its watch jumps over what fell out", () =>
    Effect.gen(function*() {
      const c = yield* computer(["--retain", "65536"])
      const client = yield* open(c)
      const seen = watcher()
      const { handle } = yield* client.spawn({ argv: ["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x; echo done >&2"], cwd: c.dir, env: PATH }, seen.handlers)
      client.holdOutput(handle, true)
      // The process finishes while nothing is read.
      for (let i = 0; i < 500; i++) {
        const [record] = yield* (yield* open(c)).list
        if (record?.state !== "running") break
        yield* Effect.sleep("10 millis")
      }
      const [record] = yield* (yield* open(c)).list
      assert.strictEqual(record!.state, "closed")
      client.holdOutput(handle, false)
      yield* until(() => seen.seen.closed)
      assert.strictEqual(seen.seen.err, "done\n")
      assert.deepStrictEqual(seen.seen.exit, { exitCode: 0, signal: null })
      // Some bytes fell out: the watch got the head and a later run, and said where each started.
      const last = seen.seen.offsets.at(-1)!
      assert.isAbove(seen.seen.offsets.length, 1)
      assert.isTrue(seen.seen.offsets.some((offset, i) => i > 0 && offset > seen.seen.offsets[i - 1]! + 1))
      assert.isAtMost(last, 5_000_000)
      assert.isBelow(seen.seen.out.length, 5_000_000)
    }))

  it.scopedLive("handles are never reused: an agent started again on the same store goes on counting", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const first = yield* openApart(c)
      const a = watcher()
      const { handle } = yield* first.client.spawn({ argv: ["true"], cwd: c.dir, env: PATH }, a.handlers)
      yield* first.close
      yield* AgentLauncher.stop("host", c.place)
      const second = yield* open(c)
      const b = watcher()
      const next = yield* second.spawn({ argv: ["true"], cwd: c.dir, env: PATH }, b.handlers)
      assert.isAbove(next.handle, handle)
    }))

  it.scopedLive("the lifecycle lease is held by one connection at a time, and let go when that connection ends", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const a = yield* openApart(c)
      const b = yield* open(c)
      assert.deepStrictEqual(yield* a.client.step(true, "restart"), { granted: true, holder: "" })
      assert.deepStrictEqual(yield* b.step(true, "delete"), { granted: false, holder: "restart" })
      yield* a.close
      assert.deepStrictEqual(yield* b.step(true, "delete"), { granted: true, holder: "" })
    }))

  it.scopedLive("a port opened through one connection answers that connection only, and its stream is reset when that connection ends", () =>
    Effect.gen(function*() {
      // A web server on the loopback (the unsandboxed agent's loopback is the test's): it echoes.
      const accepted: Array<{ closed: boolean }> = []
      const server = createServer((socket) => {
        const seen = { closed: false }
        accepted.push(seen)
        socket.on("data", (data) => socket.write(data))
        socket.on("error", () => {})
        socket.on("close", () => (seen.closed = true))
      })
      const port = yield* Effect.acquireRelease(
        Effect.async<number>((resume) => void server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))),
        () => Effect.sync(() => server.close())
      )
      const echo = (socket: Duplex, text: string) =>
        Effect.gen(function*() {
          let got = ""
          socket.on("data", (data: Buffer) => (got += data.toString()))
          socket.write(text)
          yield* until(() => got === text)
        })
      const c = yield* computer()
      const a = yield* openApart(c)
      const b = yield* open(c)
      // Each connection's first stream has the same id: the agent tells them apart by connection.
      const fromA = yield* a.client.openPort(port)
      const fromB = yield* b.openPort(port)
      yield* echo(fromA, "through a")
      yield* echo(fromB, "through b")
      assert.strictEqual(accepted.length, 2)
      yield* a.close
      yield* until(() => accepted[0]!.closed)
      assert.isFalse(accepted[1]!.closed)
      yield* echo(fromB, ", still")
      // A port nothing listens on is refused, to the connection that asked.
      const refused = yield* Effect.flip(b.openPort(1))
      assert.match(refused.message, /nothing accepts connections on that port/)
      yield* echo(fromB, ", and on")
    }))

  it.scopedLive("passes exactly the given environment and reports exec failures", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const client = yield* open(c)
      const seen = watcher()
      yield* client.spawn({ argv: ["env"], cwd: c.dir, env: { PATH: "/usr/bin:/bin", ONLY: "this" } }, seen.handlers)
      yield* until(() => seen.seen.closed)
      assert.strictEqual(seen.seen.out, "PATH=/usr/bin:/bin\nONLY=this\n")
      const failed = yield* Effect.flip(client.spawn({ argv: ["/nonexistent/x"], cwd: c.dir, env: {} }, watcher().handlers))
      assert.strictEqual(failed._tag, "SpawnFailed")
    }))

  it.scopedLive("SIGKILL tears the whole tree down and EXIT says how many other processes it ended", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const client = yield* open(c)
      const seen = watcher()
      const { handle } = yield* client.spawn({
        argv: ["sh", "-c", "setsid sleep 3401 & (setsid sh -c 'sleep 3402 & sleep 3403' &); sleep 3404"],
        cwd: c.dir,
        env: PATH
      }, seen.handlers)
      const sleeps = () => readdirSync("/proc").filter((entry) => {
        try {
          const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0")
          return /^\d+$/.test(entry) && argv[0] === "sleep" && /^340[1-4]$/.test(argv[1] ?? "")
        } catch {
          return false
        }
      })
      yield* until(() => sleeps().length === 4)
      client.signal(handle, "SIGKILL")
      yield* until(() => seen.seen.closed)
      assert.deepStrictEqual(seen.seen.exit, { exitCode: null, signal: "SIGKILL" })
      // its inner sh and the four sleeps; the process itself (sh) is not counted: its exit says how it ended
      assert.strictEqual(seen.seen.ended, 5)
      assert.strictEqual(seen.seen.closedEnded, 0)
      assert.deepStrictEqual(sleeps(), [])
    }))

  it.scopedLive("says once, in a LOG frame, when it cannot clear the capability bounding set", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      // The unprivileged agent makes its socket and store in a directory it may reach and write.
      chmodSync(root, 0o711)
      chmodSync(c.dir, 0o777)
      const logs: Array<string> = []
      const client = yield* AgentLauncher.open("host", c.place, Effect.succeed({
        ...c.command,
        file: "/usr/bin/setpriv",
        args: ["--reuid=65534", "--regid=65534", "--clear-groups", "--", c.binaries.agent, "--listen", c.place.socket, "--store", join(c.dir, "store"), "--caps", "drop"]
      }), false, { onLog: (text: string) => logs.push(text) })
      const seen = watcher()
      yield* client.spawn({ argv: ["grep", "-E", "^(CapEff|CapPrm|NoNewPrivs|Seccomp):", "/proc/self/status"], cwd: "/", env: PATH }, seen.handlers)
      yield* until(() => seen.seen.closed)
      yield* until(() => logs.length > 0)
      assert.strictEqual(logs.length, 1)
      assert.match(logs[0]!, /cannot clear the capability bounding set \(Operation not permitted; \d+ capabilities remain/)
      assert.strictEqual(seen.seen.out, "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n")
    }))

  it.scopedLive("SPAWN_DIRECT execs plain words itself, with PWD, and falls back to the shell when nothing can run", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const client: AgentClient = yield* open(c)
      const run = (direct: ReadonlyArray<string>, env: Record<string, string> = {}) =>
        Effect.gen(function*() {
          const seen = watcher()
          yield* client.spawn({ argv: ["sh", "-c", "echo via-shell"], direct, cwd: c.dir, env: { ...PATH, ...env } }, seen.handlers)
          yield* until(() => seen.seen.closed)
          return { out: seen.seen.out, exit: seen.seen.exit }
        })
      // Run without the shell: `env` prints the environment it was given, PWD replaced by the cwd.
      const env = yield* run(["env"], { PWD: "/elsewhere", MARK: "1" })
      assert.notInclude(env.out, "via-shell")
      assert.include(`\n${env.out}`, `\nPWD=${c.dir}\n`)
      assert.notInclude(env.out, "/elsewhere")
      assert.include(env.out, "MARK=1\n")
      assert.deepStrictEqual(env.exit, { exitCode: 0, signal: null })
      // Searched on the env's PATH, empty entries meaning the directory, as a shell searches.
      const found = yield* run(["expr", "2", "+", "3"], { PATH: "/nonexistent::/usr/bin:/bin" })
      assert.strictEqual(found.out, "5\n")
      // Not found, a script without #!, a file that is not executable: the shell takes over.
      assert.strictEqual((yield* run(["kt-no-such-command"])).out, "via-shell\n")
      writeFileSync(join(c.dir, "no-shebang"), "echo script\n", { mode: 0o755 })
      assert.strictEqual((yield* run(["./no-shebang"])).out, "via-shell\n")
      writeFileSync(join(c.dir, "plain"), "x", { mode: 0o644 })
      assert.strictEqual((yield* run([join(c.dir, "plain")])).out, "via-shell\n")
    }))

  it.scopedLive("a stream's file in the store is made with its first byte: silent processes leave none, and what one wrote is read back", () =>
    Effect.gen(function*() {
      const c = yield* computer()
      const client = yield* open(c)
      const store = join(c.dir, "store")
      const agent = readdirSync("/proc").find((entry) => {
        try {
          const argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0")
          return /^\d+$/.test(entry) && argv[0] === c.command.file && argv.includes(store)
        } catch {
          return false
        }
      })
      assert.isDefined(agent, "the agent's process")
      /** The agent's open files in its store (unnamed: `#inode (deleted)`, or a deleted `.kt-` name). */
      const storeFiles = () =>
        readdirSync(`/proc/${agent}/fd`).filter((fd) => {
          try {
            return readlinkSync(`/proc/${agent}/fd/${fd}`).startsWith(`${store}/`)
          } catch {
            return false
          }
        }).length
      const run = (script: string) =>
        Effect.gen(function*() {
          const seen = watcher()
          const { handle } = yield* client.spawn({ argv: ["sh", "-c", script], cwd: c.dir, env: PATH }, seen.handlers)
          yield* until(() => seen.seen.closed)
          return handle
        })
      const before = storeFiles()
      for (let i = 0; i < 3; i++) yield* run("true")
      assert.strictEqual(storeFiles(), before, "no file for streams that stayed empty")
      const wrote = yield* run("echo kept")
      assert.strictEqual(storeFiles(), before + 1, "one file: stdout's; stderr stayed empty")
      const out = yield* client.read(wrote, "stdout", 0, 100)
      assert.deepStrictEqual([out.start, out.total, out.data.toString()], [0, 5, "kept\n"])
      const err = yield* client.read(wrote, "stderr", 0, 100)
      assert.deepStrictEqual([err.start, err.total, err.data.length], [0, 0, 0])
    }))
})
