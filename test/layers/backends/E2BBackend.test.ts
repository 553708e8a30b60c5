import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Logger, Option, Redacted, Ref, Stream } from "effect"
import { Sandbox } from "e2b"
import { spawnSync } from "node:child_process"
import { hostname } from "node:os"
import { afterAll, beforeAll } from "vitest"
import * as E2BBackend from "../../../src/layers/backends/E2BBackend.js"
import type { BackendComputer, BackendProcess, ExitInfo, SpawnSpec } from "../../../src/services/Backend.js"
import { Backend } from "../../../src/services/Backend.js"
import * as E2BFake from "../../support/E2BFake.js"
import { bwrapWorks, describeIf } from "../../support/Requirements.js"

const run = Math.random().toString(36).slice(2, 8)
let counter = 0
const computerId = (what: string) => `e${run}-${what}-${counter++}`
const ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: E2BFake.FAKE_HOME, LANG: "C.UTF-8" }

const started = bwrapWorks ? E2BFake.start({ defaultTimeoutSec: 120 }) : undefined
let fake: E2BFake.E2BFake
beforeAll(async () => {
  if (started) fake = await started
})
afterAll(async () => {
  await fake?.close()
})

const options = (overrides: Partial<E2BBackend.E2BBackendOptions> = {}): E2BBackend.E2BBackendOptions => ({
  apiKey: Redacted.make(fake.apiKey),
  template: "base",
  sandboxTimeoutSec: 120,
  metadata: { suite: `e2b-test-${run}` },
  envs: { FROM_SANDBOX: "yes" },
  apiUrl: fake.url,
  sandboxUrl: fake.url,
  domain: undefined,
  instanceId: `test-${run}-${Math.random().toString(36).slice(2, 6)}`,
  home: E2BFake.FAKE_HOME,
  requestTimeoutMs: 10_000,
  ...overrides
})

const backendLayer = (overrides: Partial<E2BBackend.E2BBackendOptions> = {}) => E2BBackend.layer(options(overrides))

interface Result {
  readonly stdout: Uint8Array
  readonly stderr: string
  readonly exit: ExitInfo | undefined
}

const collect = (process: BackendProcess) =>
  process.events.pipe(
    Stream.runFold({ stdout: new Uint8Array(0), stderr: "", exit: undefined } as Result, (acc, event) =>
      event._tag === "Exit"
        ? { ...acc, exit: event.exit }
        : event._tag === "Stdout"
        ? { ...acc, stdout: Buffer.concat([acc.stdout, event.data]) }
        : { ...acc, stderr: acc.stderr + Buffer.from(event.data).toString() })
  )

const spec = (argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}): SpawnSpec => ({
  argv,
  cwd: E2BFake.FAKE_HOME,
  env: ENV,
  ...extra
})

const exec = (computer: BackendComputer, argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}) =>
  Effect.scoped(Effect.flatMap(computer.spawn(spec(argv, extra)), collect))

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8")

/** Reads events until `pattern` shows up in stdout; gives the fiber that keeps reading. */
const waitFor = (process: BackendProcess, pattern: RegExp) =>
  Effect.gen(function*() {
    const seen = yield* Deferred.make<void>()
    const output = yield* Ref.make("")
    const exit = yield* Deferred.make<ExitInfo>()
    const fiber = yield* process.events.pipe(
      Stream.runForEach((event) =>
        event._tag === "Exit"
          ? Deferred.succeed(exit, event.exit)
          : Ref.updateAndGet(output, (o) => o + Buffer.from(event.data).toString()).pipe(
            Effect.flatMap((o) => (pattern.test(o) ? Deferred.succeed(seen, undefined) : Effect.void))
          )
      ),
      Effect.fork
    )
    yield* Deferred.await(seen).pipe(Effect.timeout("20 seconds"))
    return { fiber, output, exit }
  })

const sandboxOf = (id: string) => fake.sandboxes().filter((s) => s.metadata[E2BBackend.META.computerId] === id)

describe("E2B shell quoting", () => {
  it("quotes every word so the shell gives back exactly argv", () => {
    const argv = ["printf", "%s|", "a b", "it's", "$HOME", "", "back\\slash", "new\nline", "*", "-n", "é ü", "`id`", "a=b"]
    const result = spawnSync("sh", ["-c", E2BBackend.shellJoin(argv)], { encoding: "utf8" })
    assert.strictEqual(result.stdout, argv.slice(2).map((a) => `${a}|`).join(""))
    assert.strictEqual(E2BBackend.shellQuote("plain-word_1.txt"), "plain-word_1.txt")
    assert.strictEqual(E2BBackend.shellQuote(""), "''")
    assert.strictEqual(E2BBackend.shellQuote("it's"), `'it'\\''s'`)
  })

  it("maps envd's end events to exit codes and signals", () => {
    assert.deepStrictEqual(E2BBackend.exitInfo({ exitCode: 3, status: "exit status 3" }), { exitCode: 3, signal: null })
    assert.deepStrictEqual(E2BBackend.exitInfo({ exitCode: -1, status: "signal: terminated" }), { exitCode: null, signal: "SIGTERM" })
    assert.deepStrictEqual(E2BBackend.exitInfo({ exitCode: -1, status: "signal: killed" }), { exitCode: null, signal: "SIGKILL" })
    assert.deepStrictEqual(E2BBackend.exitInfo({ exitCode: -1, status: "signal: segmentation fault (core dumped)" }), {
      exitCode: null,
      signal: "SIGSEGV"
    })
  })
})

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B backend (real SDK against the fake)", () => {
  it.live("runs processes: exit codes, stderr, exact bytes, argv, environment and cwd", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("basic"), temporary: true })
      assert.strictEqual(computer.home, E2BFake.FAKE_HOME)
      const failed = yield* exec(computer, ["sh", "-c", "printf '\\000\\001\\377\\376'; echo broken >&2; exit 3"])
      assert.deepStrictEqual([...failed.stdout], [0, 1, 255, 254])
      assert.strictEqual(failed.stderr, "broken\n")
      assert.deepStrictEqual(failed.exit, { exitCode: 3, signal: null })
      const argv = ["printf", "%s|", "a b", "it's", "$HOME", "", "back\\slash", "new\nline", "*", "a=b"]
      const args = yield* exec(computer, argv)
      assert.strictEqual(text(args.stdout), argv.slice(2).map((a) => `${a}|`).join(""))
      const env = yield* exec(computer, ["sh", "-c", "echo \"$MINE|$FROM_SANDBOX|$PATH|$(pwd)\""], {
        env: { ...ENV, MINE: "x y" },
        cwd: "/tmp"
      })
      assert.strictEqual(text(env.stdout), `x y|yes|${ENV.PATH}|/tmp\n`)
      const missing = yield* exec(computer, ["no-such-program-here"])
      assert.strictEqual(missing.exit?.exitCode, 127)
    }).pipe(Effect.scoped, Effect.provide(backendLayer())), 60_000)

  it.live("stdin: write, then EOF ends the reader", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("stdin"), temporary: true })
      const process = yield* computer.spawn(spec(["wc", "-c"]))
      yield* process.write(new TextEncoder().encode("12345\n"))
      yield* process.write(new Uint8Array([0, 255]))
      yield* process.closeStdin
      const result = yield* collect(process)
      assert.strictEqual(text(result.stdout).trim(), "8")
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
    }).pipe(Effect.scoped, Effect.provide(backendLayer())), 60_000)

  it.live("signals reach the whole process group", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("signals"), temporary: true })
      const trapped = yield* computer.spawn(spec(["sh", "-c", "trap 'echo got INT; exit 7' INT; echo ready; while :; do sleep 0.1; done"]))
      const { exit, fiber, output } = yield* waitFor(trapped, /ready/)
      yield* trapped.signal("SIGINT")
      assert.deepStrictEqual(yield* Deferred.await(exit).pipe(Effect.timeout("20 seconds")), { exitCode: 7, signal: null })
      yield* Fiber.join(fiber)
      assert.match(yield* Ref.get(output), /got INT/)

      const tree = yield* computer.spawn(spec(["sh", "-c", "sleep 271 & sleep 271; echo never"]))
      yield* Effect.sleep("300 millis")
      const before = yield* exec(computer, ["sh", "-c", "ps -eo args | grep -c '^sleep 271' || true"])
      assert.strictEqual(text(before.stdout).trim(), "2")
      yield* tree.signal("TERM")
      const ended = yield* collect(tree)
      assert.deepStrictEqual(ended.exit, { exitCode: null, signal: "SIGTERM" })
      let left = "2"
      for (let i = 0; i < 50 && left !== "0"; i++) {
        yield* Effect.sleep("100 millis")
        left = text((yield* exec(computer, ["sh", "-c", "ps -eo args | grep -c '^sleep 271' || true"])).stdout).trim()
      }
      assert.strictEqual(left, "0")
      const bad = yield* Effect.flip(tree.signal("SIGNOPE"))
      assert.strictEqual(bad._tag, "BackendError")
    }).pipe(Effect.scoped, Effect.provide(backendLayer())), 60_000)

  it.live("a TTY process has a terminal of the asked size, takes input and resizes", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("pty"), temporary: true })
      const process = yield* computer.spawn(
        spec(["sh", "-c", "tty; stty size; printf 'name? '; read name; stty size; echo \"hello $name\""], {
          tty: { cols: 100, rows: 20 },
          env: { ...ENV, TERM: "xterm-256color" }
        })
      )
      const { exit, fiber, output } = yield* waitFor(process, /name\? /)
      yield* process.resize(120, 40)
      yield* process.write(new TextEncoder().encode("kiln\r"))
      assert.deepStrictEqual(yield* Deferred.await(exit).pipe(Effect.timeout("20 seconds")), { exitCode: 0, signal: null })
      yield* Fiber.join(fiber)
      const screen = yield* Ref.get(output)
      assert.match(screen, /\/dev\/pts\/\d+/)
      assert.match(screen, /20 100/)
      assert.match(screen, /40 120/)
      assert.match(screen, /hello kiln/)
      const pipes = yield* computer.spawn(spec(["true"]))
      assert.strictEqual((yield* Effect.flip(pipes.resize(10, 10)))._tag, "Unsupported")
    }).pipe(Effect.scoped, Effect.provide(backendLayer())), 60_000)

  it.live("a permanent computer is paused on release, listed and reconnected by a fresh layer; destroy kills it", () =>
    Effect.gen(function*() {
      const id = computerId("perm")
      const providerId = yield* Effect.gen(function*() {
        const backend = yield* Backend
        const computer = yield* backend.open({ id, temporary: false })
        const wrote = yield* exec(computer, ["sh", "-c", "echo persisted > mine.txt"])
        assert.strictEqual(wrote.exit?.exitCode, 0)
        return computer.providerId
      }).pipe(Effect.scoped, Effect.provide(backendLayer()))
      const [stored] = sandboxOf(id)
      assert.strictEqual(stored?.sandboxID, providerId)
      assert.strictEqual(stored?.state, "paused")
      assert.strictEqual(stored?.autoPause, true, "a permanent sandbox pauses instead of dying at its timeout")
      assert.strictEqual(stored?.metadata["kilntainers"], "true")
      assert.strictEqual(stored?.metadata["kilntainers-temporary"], "false")
      assert.strictEqual(stored?.metadata["kilntainers-image"], "base")
      assert.strictEqual(stored?.metadata["suite"], `e2b-test-${run}`)
      assert.strictEqual(stored?.envVars["FROM_SANDBOX"], "yes")

      yield* Effect.gen(function*() {
        const backend = yield* Backend
        const listed = (yield* backend.list).find((c) => c.id === id)
        assert.deepInclude(listed, { id, temporary: false, providerId, image: "base", state: "paused" })
        const wrong = yield* Effect.flip(backend.open({ id, temporary: true }))
        assert.match(wrong.reason, /permanent/)
        const computer = yield* backend.open({ id, temporary: false })
        assert.strictEqual(computer.providerId, providerId)
        assert.strictEqual(sandboxOf(id)[0]?.state, "running")
        const read = yield* exec(computer, ["cat", "mine.txt"])
        assert.strictEqual(text(read.stdout), "persisted\n")
        yield* computer.destroy
        assert.deepStrictEqual(sandboxOf(id), [])
      }).pipe(Effect.scoped, Effect.provide(backendLayer()))
      assert.deepStrictEqual(sandboxOf(id), [])
    }), 90_000)

  it.live("a temporary computer is killed with its scope", () =>
    Effect.gen(function*() {
      const id = computerId("temp")
      yield* Effect.gen(function*() {
        const backend = yield* Backend
        yield* backend.open({ id, temporary: true })
        assert.strictEqual(sandboxOf(id).length, 1)
        assert.strictEqual(sandboxOf(id)[0]?.metadata["kilntainers-temporary"], "true")
      }).pipe(Effect.scoped, Effect.provide(backendLayer()))
      assert.deepStrictEqual(sandboxOf(id), [])
    }), 60_000)

  it.live("restart pauses and resumes: files kept, processes gone, old processes untouched", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("restart"), temporary: true })
      yield* exec(computer, ["sh", "-c", "echo kept > kept.txt"])
      const old = yield* computer.spawn(spec(["sleep", "300"]))
      const oldEvents = yield* collect(old).pipe(Effect.fork)
      yield* computer.restart
      const exit = yield* Fiber.join(oldEvents)
      assert.strictEqual(exit.exit?.signal, "SIGKILL")
      yield* old.signal("SIGTERM") // a no-op: the process belongs to the previous boot
      assert.strictEqual((yield* Effect.flip(old.write(new Uint8Array([1])))).reason, "the computer was restarted; this process is gone")
      const read = yield* exec(computer, ["cat", "kept.txt"])
      assert.strictEqual(text(read.stdout), "kept\n")
      const ps = yield* exec(computer, ["sh", "-c", "ps -eo args | grep -c '^sleep 300' || true"])
      assert.strictEqual(text(ps.stdout).trim(), "0")
    }).pipe(Effect.scoped, Effect.provide(backendLayer())), 60_000)

  it.live("factory reset recreates from the recorded template", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const id = computerId("reset")
      const computer = yield* backend.open({ id, temporary: true })
      yield* exec(computer, ["sh", "-c", "echo gone > gone.txt"])
      const before = sandboxOf(id)[0]!.sandboxID
      yield* computer.factoryReset
      const after = sandboxOf(id)
      assert.strictEqual(after.length, 1)
      assert.notStrictEqual(after[0]!.sandboxID, before)
      assert.strictEqual(after[0]!.templateID, "base")
      const read = yield* exec(computer, ["cat", "gone.txt"])
      assert.notStrictEqual(read.exit?.exitCode, 0)
    }).pipe(Effect.scoped, Effect.provide(backendLayer())), 60_000)

  it.live("keep-alive extends the timeout while the computer is open", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const id = computerId("keepalive")
      const computer = yield* backend.open({ id, temporary: true })
      const sandboxId = computer.providerId
      yield* Effect.sleep("4500 millis")
      assert.strictEqual(sandboxOf(id).length, 1, "a 2 s sandbox is still there after 4.5 s")
      const renewals = fake.requests.filter((r) => r.path === `/sandboxes/${sandboxId}/timeout` && r.status === 204)
      assert.isAtLeast(renewals.length, 3)
      const hello = yield* exec(computer, ["echo", "alive"])
      assert.strictEqual(text(hello.stdout), "alive\n")
    }).pipe(Effect.scoped, Effect.provide(backendLayer({ sandboxTimeoutSec: 2, keepAliveIntervalMs: 500 }))), 60_000)

  it.live("without keep-alive renewals the sandbox expires: lost, and its processes end", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("expire"), temporary: true })
      const process = yield* computer.spawn(spec(["sleep", "300"]))
      const result = yield* collect(process).pipe(Effect.timeout("20 seconds"))
      assert.deepStrictEqual(result.exit, { exitCode: null, signal: "SIGKILL" })
      const reason = yield* computer.lost.pipe(Effect.timeout("20 seconds"))
      assert.match(reason, /gone \(killed outside kilntainers or past its timeout\)/)
    }).pipe(Effect.scoped, Effect.provide(backendLayer({ sandboxTimeoutSec: 2, keepAliveIntervalMs: 60_000 }))), 60_000)

  it.live("a sandbox killed from outside: lost completes and its processes end", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("killed"), temporary: true })
      const process = yield* computer.spawn(spec(["sh", "-c", "echo started; sleep 300"]))
      const { exit, fiber } = yield* waitFor(process, /started/)
      assert.isTrue(yield* Effect.promise(() => fake.kill(computer.providerId)))
      assert.deepStrictEqual(yield* Deferred.await(exit).pipe(Effect.timeout("20 seconds")), { exitCode: null, signal: "SIGKILL" })
      yield* Fiber.join(fiber)
      const reason = yield* computer.lost.pipe(Effect.timeout("20 seconds"))
      assert.match(reason, /was lost: its sandbox .* is gone/)
      const failed = yield* Effect.flip(exec(computer, ["true"]))
      assert.strictEqual(failed._tag, "SpawnFailed")
    }).pipe(Effect.scoped, Effect.provide(backendLayer({ keepAliveIntervalMs: 60_000 }))), 60_000)

  it.live("5xx: idempotent calls are retried, a failing create is a clear error and leaves nothing", () =>
    Effect.gen(function*() {
      fake.inject({ method: "GET", path: /^\/v2\/sandboxes$/, status: 500, times: 1 })
      const id = computerId("fail")
      const error = yield* Effect.gen(function*() {
        const backend = yield* Backend // built although the first list answered 500
        fake.inject({ method: "POST", path: /^\/v2\/sandboxes$/, status: 500, times: 1 })
        return yield* Effect.flip(backend.open({ id, temporary: true }))
      }).pipe(Effect.scoped, Effect.provide(backendLayer()))
      assert.strictEqual(error._tag, "BackendError")
      assert.match(error.message, /^e2b backend: creating the sandbox: the E2B service failed \(500: injected fault 500\)$/)
      assert.deepStrictEqual(sandboxOf(id), [])
      fake.inject({ method: "GET", path: /^\/v2\/sandboxes$/, status: 503, times: 3 })
      const down = yield* Effect.flip(Layer.build(backendLayer()).pipe(Effect.scoped))
      assert.match(down.message, /^e2b backend: listing sandboxes: the E2B service failed \(Service temporarily unavailable/)
      fake.clearFaults()
    }), 60_000)

  it.live("a create that times out is a clear error and leaves no sandbox behind", () =>
    Effect.gen(function*() {
      const id = computerId("slow")
      fake.inject({ method: "POST", path: /^\/v2\/sandboxes$/, delayMs: 2500, times: 1 })
      const error = yield* Effect.gen(function*() {
        const backend = yield* Backend
        return yield* Effect.flip(backend.open({ id, temporary: true }))
      }).pipe(Effect.scoped, Effect.provide(backendLayer({ requestTimeoutMs: 1000 })))
      assert.strictEqual(error.message, "e2b backend: creating the sandbox: no answer from E2B within 1000 ms")
      yield* Effect.sleep("2500 millis")
      assert.deepStrictEqual(sandboxOf(id), [])
      fake.clearFaults()
    }), 60_000)

  it.live("the API key never shows in errors or logs", () =>
    Effect.gen(function*() {
      const logs: Array<string> = []
      const logger = Logger.make(({ message }) => logs.push(JSON.stringify(message)))
      const wrongKey = "e2b_0123456789abcdef0123456789abcdef01234567"
      const rejected = yield* Effect.flip(Layer.build(backendLayer({ apiKey: Redacted.make(wrongKey) })).pipe(Effect.scoped))
      assert.match(rejected.message, /the E2B API key was rejected/)
      assert.notInclude(JSON.stringify(rejected), wrongKey)
      assert.notInclude(String(rejected), wrongKey)
      // A full round with failures and warnings, logs captured.
      yield* Effect.gen(function*() {
        const backend = yield* Backend
        const computer = yield* backend.open({ id: computerId("key"), temporary: false })
        fake.inject({ path: /\/pause$/, status: 500 })
        yield* exec(computer, ["true"])
      }).pipe(
        Effect.scoped,
        Effect.provide(backendLayer()),
        Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
        Effect.withUnhandledErrorLogLevel(Option.none())
      )
      fake.clearFaults()
      assert.isTrue(logs.some((line) => /cannot pause/.test(line)), logs.join("\n"))
      for (const line of logs) assert.notInclude(line, fake.apiKey)
      assert.isTrue(fake.requests.some((r) => r.apiKey === fake.apiKey), "the key was sent as X-API-Key")
    }), 60_000)

  it.live("reaper: temporary sandboxes of dead servers on this host are killed, others are left", () =>
    Effect.gen(function*() {
      const dead = spawnSync("true").pid!
      const make = (id: string, meta: Record<string, string>) =>
        Effect.promise(() =>
          Sandbox.create("base", {
            apiKey: fake.apiKey,
            apiUrl: fake.url,
            sandboxUrl: fake.url,
            metadata: {
              kilntainers: "true",
              "kilntainers-computer-id": id,
              "kilntainers-temporary": "true",
              "kilntainers-instance": "gone-instance",
              "kilntainers-owner-host": hostname(),
              "kilntainers-owner-pid": String(dead),
              "kilntainers-owner-start": "1",
              ...meta
            }
          })
        )
      const orphan = computerId("orphan")
      const elsewhere = computerId("elsewhere")
      const alive = computerId("alive")
      const permanent = computerId("kept")
      yield* make(orphan, {})
      yield* make(elsewhere, { "kilntainers-owner-host": "another-host" })
      yield* make(alive, { "kilntainers-owner-pid": String(process.pid), "kilntainers-owner-start": ownStart() })
      yield* make(permanent, { "kilntainers-temporary": "false" })
      yield* Layer.build(backendLayer()).pipe(Effect.scoped)
      assert.deepStrictEqual(sandboxOf(orphan), [])
      assert.strictEqual(sandboxOf(elsewhere).length, 1)
      assert.strictEqual(sandboxOf(alive).length, 1)
      assert.strictEqual(sandboxOf(permanent).length, 1)
      for (const id of [elsewhere, alive, permanent]) yield* Effect.promise(() => fake.kill(sandboxOf(id)[0]!.sandboxID))
    }), 60_000)

  it.live("the public SDK output path (string callbacks) works too", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("public"), temporary: true })
      const result = yield* exec(computer, ["sh", "-c", "echo out; echo err >&2; exit 4"])
      assert.strictEqual(text(result.stdout), "out\n")
      assert.strictEqual(result.stderr, "err\n")
      assert.deepStrictEqual(result.exit, { exitCode: 4, signal: null })
      const cat = yield* computer.spawn(spec(["cat"]))
      yield* cat.write(new TextEncoder().encode("through stdin"))
      yield* cat.closeStdin
      assert.strictEqual(text((yield* collect(cat)).stdout), "through stdin")
      // TTY: SDK's pty.create (an interactive bash) that then execs the command.
      const tty = yield* computer.spawn(spec(["sh", "-c", "stty size; read x; echo \"got $x\""], { tty: { cols: 90, rows: 30 } }))
      const { exit, fiber, output } = yield* waitFor(tty, /30 90/)
      yield* tty.write(new TextEncoder().encode("it\r"))
      assert.deepStrictEqual(yield* Deferred.await(exit).pipe(Effect.timeout("20 seconds")), { exitCode: 0, signal: null })
      yield* Fiber.join(fiber)
      assert.match(yield* Ref.get(output), /got it/)
    }).pipe(Effect.scoped, Effect.provide(backendLayer({ publicOutputApi: true }))), 60_000)
})

const ownStart = () => {
  const stat = spawnSync("cat", [`/proc/${process.pid}/stat`], { encoding: "utf8" }).stdout
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]!
}

// Against the real service: only with a key in the environment.
const realKey = process.env.E2B_API_KEY
if (realKey === undefined || realKey === "") {
  process.stderr.write("skipping the E2B real-service smoke test: E2B_API_KEY is not set\n")
}
describe.skipIf(realKey === undefined || realKey === "")("E2B backend against the real service (E2B_API_KEY)", () => {
  it.live("creates a temporary sandbox, runs a command, removes it", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("real"), temporary: true })
      assert.strictEqual(computer.home, E2BBackend.DEFAULT_HOME)
      const result = yield* exec(computer, ["sh", "-c", "echo hi from e2b; printf '\\377'"], { cwd: E2BBackend.DEFAULT_HOME })
      assert.deepStrictEqual([...result.stdout], [...Buffer.from("hi from e2b\n"), 255])
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
    }).pipe(
      Effect.scoped,
      Effect.provide(E2BBackend.layer({
        apiKey: Redacted.make(realKey ?? ""),
        template: "base",
        sandboxTimeoutSec: 300,
        metadata: { purpose: "kilntainers-smoke-test" },
        envs: {},
        apiUrl: undefined,
        sandboxUrl: undefined,
        domain: undefined,
        instanceId: `smoke-${run}`
      }))
    ), 180_000)
})
