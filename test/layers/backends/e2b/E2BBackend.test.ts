// The E2B provider against the fake (the real `e2b` SDK, real processes): its calls directly where
// they are the point (labels, processes and their bytes, errors), and what a computer lives
// through on E2B (release, pause and resume, expiry, loss, reaping) through the kernel.
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Logger, Option, Redacted, Ref } from "effect"
import { Sandbox } from "e2b"
import { spawnSync } from "node:child_process"
import { hostname } from "node:os"
import { afterAll, beforeAll } from "vitest"
import { labelKey } from "../../../../src/domain/ComputerMetadata.js"
import * as E2BBackend from "../../../../src/layers/backends/e2b/E2BBackend.js"
import { processStartTime } from "../../../../src/layers/server/ProcessOwner.js"
import * as ProcessScript from "../../../../src/layers/backends/e2b/ProcessScript.js"
import { Backend } from "../../../../src/services/Backend.js"
import * as E2BFake from "../../../support/E2BFake.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"
import {
  advance,
  alignClocks,
  buildBackend,
  collect,
  computerId,
  count,
  ENV,
  eventually,
  exec,
  metadataFor,
  opened,
  options,
  run,
  services,
  spec,
  text,
  waitFor,
  withKernel
} from "./E2BTestKit.js"

const started = bwrapWorks ? E2BFake.start({ defaultTimeoutSec: 120 }) : undefined
// Time stands still at this one until a test moves it, with the kernel's TestClock.
const startedTimed = bwrapWorks ? E2BFake.start({ manualClock: true }) : undefined
let fake: E2BFake.E2BFake
let timed: E2BFake.E2BFake
beforeAll(async () => {
  if (started) fake = await started
  if (startedTimed) timed = await startedTimed
})
afterAll(async () => {
  await fake?.close()
  await timed?.close()
})

const provider = <A, E>(body: Effect.Effect<A, E, Backend>, overrides: Partial<E2BBackend.E2BBackendOptions> = {}) =>
  Effect.scoped(Effect.provide(body, E2BBackend.layer(options(fake, overrides))))

const ID_KEY = labelKey("dashed", "id")
const sandboxOf = (id: string) => fake.sandboxes().filter((s) => s.metadata[ID_KEY] === id)

describe("E2B shell quoting", () => {
  it("quotes every word so the shell gives back exactly argv", () => {
    const argv = ["printf", "%s|", "a b", "it's", "$HOME", "", "back\\slash", "new\nline", "*", "-n", "é ü", "`id`", "a=b"]
    const result = spawnSync("sh", ["-c", ProcessScript.shellJoin(argv)], { encoding: "utf8" })
    assert.strictEqual(result.stdout, argv.slice(2).map((a) => `${a}|`).join(""))
    assert.strictEqual(ProcessScript.shellQuote("plain-word_1.txt"), "plain-word_1.txt")
    assert.strictEqual(ProcessScript.shellQuote(""), "''")
    assert.strictEqual(ProcessScript.shellQuote("it's"), `'it'\\''s'`)
  })

  it("maps envd's end events to exit codes and signals", () => {
    assert.deepStrictEqual(ProcessScript.exitInfo({ exitCode: 3, status: "exit status 3" }), { exitCode: 3, signal: null })
    assert.deepStrictEqual(ProcessScript.exitInfo({ exitCode: -1, status: "signal: terminated" }), { exitCode: null, signal: "SIGTERM" })
    assert.deepStrictEqual(ProcessScript.exitInfo({ exitCode: -1, status: "signal: killed" }), { exitCode: null, signal: "SIGKILL" })
    assert.deepStrictEqual(ProcessScript.exitInfo({ exitCode: -1, status: "signal: segmentation fault (core dumped)" }), {
      exitCode: null,
      signal: "SIGSEGV"
    })
  })
})

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B provider calls (real SDK against the fake)", () => {
  it.live("labels: ours on the sandbox, --e2b-metadata beside them without winning, found back with E2B's end as the lease", () =>
    provider(Effect.gen(function*() {
      const backend = yield* Backend
      const id = computerId("labels")
      const metadata = { ...(yield* metadataFor(id, true)), owner: { host: "h", pid: 42, start: "777" }, expires: "2000-01-01T00:00:00.000Z" }
      const created = yield* backend.create(metadata)
      const [stored] = sandboxOf(id)
      assert.strictEqual(stored?.sandboxID, created.providerId)
      assert.deepInclude(stored?.metadata, {
        kilntainers: "true",
        "kilntainers-computer-id": id,
        "kilntainers-temporary": "true",
        "kilntainers-image": "base",
        "kilntainers-instance": `test-${run}`,
        "kilntainers-owner-pid": "42",
        "kilntainers-create-nonce": metadata.nonce,
        suite: `e2b-test-${run}`
      })
      assert.notProperty(stored?.metadata, "kilntainers-expires", "E2B metadata cannot change: the lease is the sandbox's own timeout")
      assert.strictEqual(stored?.envVars["FROM_SANDBOX"], "yes")
      assert.strictEqual(stored?.autoPause, false)

      const [found] = yield* backend.find({ id })
      const { expires: _ignored, ...asked } = metadata
      assert.deepStrictEqual(found?.metadata, { ...asked, expires: stored!.endAt })
      assert.strictEqual(found?.state, "running")
      assert.strictEqual(found?.endsAt, Date.parse(stored!.startedAt) + 3600_000, "start plus the Base plan's hour")
      assert.isAtMost(created.endsAt!, found!.endsAt!, "the end known at create is never later than E2B's")
      assert.deepStrictEqual(yield* backend.find({ id, temporary: false }), [])
      yield* backend.remove(created)
      yield* backend.remove(created) // already gone: still removed
      assert.deepStrictEqual(sandboxOf(id), [])
    }), { metadata: { suite: `e2b-test-${run}`, "kilntainers-computer-id": "forged" } }), 60_000)

  it.live("--allow-host and --egress-header reach E2B as the sandbox's network rules (on a team with header rules)", () =>
    Effect.ensuring(Effect.suspend(() => {
      fake.team.networkTransformRules = true
      return provider(Effect.gen(function*() {
        const backend = yield* Backend
        const id = computerId("egress")
        yield* backend.create(yield* metadataFor(id, true))
        const create = fake.requests.find((r) =>
          r.method === "POST" && r.path.endsWith("/sandboxes") && JSON.stringify(r.body).includes(id)
        )
        assert.isDefined(create)
        assert.deepStrictEqual((create!.body as { network?: unknown }).network, {
          allowOut: ["pypi.org", "*.github.com"],
          denyOut: ["0.0.0.0/0"],
          rules: { "api.github.com": [{ transform: { headers: { Authorization: "Bearer egress-value" } } }] }
        })
      }), {
        network: {
          allowOut: ["pypi.org", "*.github.com"],
          denyOut: ["0.0.0.0/0"],
          rules: { "api.github.com": [{ transform: { headers: { Authorization: "Bearer egress-value" } } }] }
        }
      })
    }), Effect.sync(() => (fake.team.networkTransformRules = false))), 60_000)

  it.live("finds only sandboxes that are ours: old ones without image or creation time, never strangers", () =>
    provider(Effect.gen(function*() {
      const backend = yield* Backend
      const old = computerId("old")
      const stranger = computerId("stranger")
      const make = (metadata: Record<string, string>) =>
        Effect.promise(() => Sandbox.create("base", { apiKey: fake.apiKey, apiUrl: fake.url, sandboxUrl: fake.url, metadata }))
      const a = yield* make({ kilntainers: "true", [ID_KEY]: old, "kilntainers-temporary": "false" })
      const b = yield* make({ [ID_KEY]: stranger, "kilntainers-temporary": "false" })
      const [found] = yield* backend.find({ id: old })
      assert.strictEqual(found?.metadata.image, "base", "the template stands in for the image")
      assert.strictEqual(found?.metadata.created, sandboxOf(old)[0]?.startedAt)
      assert.deepStrictEqual(yield* backend.find({ id: stranger }), [])
      yield* Effect.promise(() => a.kill())
      yield* Effect.promise(() => b.kill())
    })), 60_000)

  it.live("runs processes: exit codes, stderr, exact bytes, argv, environment and cwd", () =>
    provider(Effect.gen(function*() {
      const { connection } = yield* opened(computerId("basic"))
      assert.strictEqual(connection.home, E2BFake.FAKE_HOME)
      const failed = yield* exec(connection, ["sh", "-c", "printf '\\000\\001\\377\\376'; echo broken >&2; exit 3"])
      assert.deepStrictEqual([...failed.stdout], [0, 1, 255, 254])
      assert.strictEqual(failed.stderr, "broken\n")
      assert.deepStrictEqual(failed.exit, { exitCode: 3, signal: null })
      const argv = ["printf", "%s|", "a b", "it's", "$HOME", "", "back\\slash", "new\nline", "*", "a=b"]
      const args = yield* exec(connection, argv)
      assert.strictEqual(text(args.stdout), argv.slice(2).map((a) => `${a}|`).join(""))
      const env = yield* exec(connection, ["sh", "-c", "echo \"$MINE|$FROM_SANDBOX|$PATH|$(pwd)\""], {
        env: { ...ENV, MINE: "x y" },
        cwd: "/tmp"
      })
      assert.strictEqual(text(env.stdout), `x y|yes|${ENV.PATH}|/tmp\n`)
      // The sandbox's agent execs a plain word itself, as on host and Docker: a missing program is a
      // failed start (the kernel's shell reports 127), not a process.
      const missing = yield* Effect.flip(exec(connection, ["no-such-program-here"]))
      assert.strictEqual(missing._tag, "SpawnFailed")
      assert.match(missing.message, /No such file or directory/)
    }).pipe(Effect.scoped)), 60_000)

  it.live("stdin: write, then EOF ends the reader", () =>
    provider(Effect.gen(function*() {
      const { connection } = yield* opened(computerId("stdin"))
      const process = yield* connection.spawn(spec(["wc", "-c"]))
      yield* process.write(new TextEncoder().encode("12345\n"))
      yield* process.write(new Uint8Array([0, 255]))
      yield* process.closeStdin
      const result = yield* collect(process)
      assert.strictEqual(text(result.stdout).trim(), "8")
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
    }).pipe(Effect.scoped)), 60_000)

  // envd's own path (EnvdProcess.ts: a second command signals the group, and envd's names are
  // normalised); the agent's signals are the conformance suite's "kill ends a whole process tree".
  it.live("signals reach the whole process group", () =>
    provider(Effect.gen(function*() {
      const { connection } = yield* opened(computerId("signals"))
      const trapped = yield* connection.spawn(spec(["sh", "-c", "trap 'echo got INT; exit 7' INT; echo ready; while :; do sleep 0.1; done"]))
      const { exit, fiber, output } = yield* waitFor(trapped, /ready/)
      yield* trapped.signal("SIGINT")
      assert.deepStrictEqual(yield* Deferred.await(exit).pipe(Effect.timeout("20 seconds")), { exitCode: 7, signal: null })
      yield* Fiber.join(fiber)
      assert.match(yield* Ref.get(output), /got INT/)

      const tree = yield* connection.spawn(spec(["sh", "-c", "sleep 271 & sleep 271; echo never"]))
      yield* eventually(Effect.map(count(connection, "sleep 271"), (n) => n === "2"))
      yield* tree.signal("TERM")
      const ended = yield* collect(tree)
      assert.deepStrictEqual(ended.exit, { exitCode: null, signal: "SIGTERM" })
      yield* eventually(Effect.map(count(connection, "sleep 271"), (n) => n === "0"), 5)
      const bad = yield* Effect.flip(tree.signal("SIGNOPE"))
      assert.strictEqual(bad._tag, "ProviderError")
      assert.strictEqual(bad._tag === "ProviderError" && bad.reason, "Invalid")
    }).pipe(Effect.scoped), { processes: "envd" }), 60_000)

  it.live("a TTY process has a terminal of the asked size, takes input and resizes", () =>
    provider(Effect.gen(function*() {
      const { connection } = yield* opened(computerId("pty"))
      const process = yield* connection.spawn(
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
      const pipes = yield* connection.spawn(spec(["true"]))
      assert.strictEqual((yield* Effect.flip(pipes.resize(10, 10)))._tag, "Unsupported")
    }).pipe(Effect.scoped)), 60_000)

  it.live("the public SDK output path (string callbacks) works too", () =>
    provider(Effect.gen(function*() {
      const { connection } = yield* opened(computerId("public"))
      const result = yield* exec(connection, ["sh", "-c", "echo out; echo err >&2; exit 4"])
      assert.strictEqual(text(result.stdout), "out\n")
      assert.strictEqual(result.stderr, "err\n")
      assert.deepStrictEqual(result.exit, { exitCode: 4, signal: null })
      const cat = yield* connection.spawn(spec(["cat"]))
      yield* cat.write(new TextEncoder().encode("through stdin"))
      yield* cat.closeStdin
      assert.strictEqual(text((yield* collect(cat)).stdout), "through stdin")
      // TTY: SDK's pty.create (an interactive bash) that then execs the command.
      const tty = yield* connection.spawn(spec(["sh", "-c", "stty size; read x; echo \"got $x\""], { tty: { cols: 90, rows: 30 } }))
      const { exit, fiber, output } = yield* waitFor(tty, /30 90/)
      yield* tty.write(new TextEncoder().encode("it\r"))
      assert.deepStrictEqual(yield* Deferred.await(exit).pipe(Effect.timeout("20 seconds")), { exitCode: 0, signal: null })
      yield* Fiber.join(fiber)
      assert.match(yield* Ref.get(output), /got it/)
    }).pipe(Effect.scoped), { outputApi: "public" }), 60_000)

  it.live("a sandbox killed from outside: the connection's watch reports it lost, without any process to notice", () =>
    provider(Effect.gen(function*() {
      const { connection, instance } = yield* opened(computerId("watched"))
      assert.isTrue(yield* Effect.promise(() => fake.kill(instance.providerId)))
      const reason = yield* connection.lost.pipe(Effect.timeout("10 seconds"))
      assert.strictEqual(reason, `its sandbox ${instance.providerId} is gone (killed outside kilntainers or past its timeout)`)
    }).pipe(Effect.scoped), { watchIntervalMs: 300 }), 60_000)

  it.live("5xx: idempotent calls are retried, a failing create is a clear error and leaves nothing", () =>
    Effect.gen(function*() {
      fake.inject({ method: "GET", path: /^\/v2\/sandboxes$/, status: 500, times: 1 })
      const id = computerId("fail")
      const error = yield* provider(Effect.gen(function*() {
        const backend = yield* Backend // built although the first list answered 500
        fake.inject({ method: "POST", path: /^\/v2\/sandboxes$/, status: 500, times: 1 })
        return yield* Effect.flip(Effect.flatMap(metadataFor(id, true), backend.create))
      }))
      assert.strictEqual(error._tag, "ProviderError")
      assert.strictEqual(error.reason, "Unavailable")
      assert.strictEqual(error.message, "e2b backend: cannot create the sandbox: the E2B service failed (500: injected fault 500)")
      assert.deepStrictEqual(sandboxOf(id), [])
      fake.inject({ method: "GET", path: /^\/v2\/sandboxes$/, status: 503, times: 3 })
      const down = yield* Effect.flip(buildBackend(fake))
      assert.match(down.message, /^e2b backend: cannot list sandboxes: the E2B service failed \(Service temporarily unavailable/)
      fake.clearFaults()
    }), 60_000)

  it.live("a create that times out is a clear error and leaves no sandbox behind", () =>
    Effect.gen(function*() {
      const id = computerId("slow")
      fake.inject({ method: "POST", path: /^\/v2\/sandboxes$/, delayMs: 2500, times: 1 })
      const error = yield* provider(
        Effect.flatMap(Backend, (backend) => Effect.flip(Effect.flatMap(metadataFor(id, true), backend.create))),
        { requestTimeoutMs: 1000 }
      )
      assert.strictEqual(error.reason, "Timeout")
      assert.strictEqual(error.message, "e2b backend: cannot create the sandbox: E2B did not answer within 1000 ms (no answer in time)")
      yield* Effect.sleep("2500 millis")
      assert.deepStrictEqual(sandboxOf(id), [])
      fake.clearFaults()
    }), 60_000)
})

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B computers through the kernel", () => {
  it.live("a permanent computer is paused on release, listed and found again by a new server; delete kills it", () =>
    Effect.gen(function*() {
      const id = computerId("perm")
      const providerId = yield* withKernel(fake, Effect.gen(function*() {
        const { computers, processes } = yield* services
        const computer = yield* computers.create("s1", { computer_id: id, temporary: false })
        const wrote = yield* processes.exec("s1", { computer_id: id, command: "echo persisted > mine.txt" })
        assert.strictEqual(wrote.exit_code, 0)
        return yield* computer.providerId
      }))
      const [stored] = sandboxOf(id)
      assert.strictEqual(stored?.sandboxID, providerId)
      assert.strictEqual(stored?.state, "paused", "released by the last holder: paused, not killed")
      assert.strictEqual(stored?.autoPause, true, "a permanent sandbox pauses instead of dying at its timeout")
      assert.strictEqual(stored?.metadata["kilntainers-temporary"], "false")

      yield* withKernel(fake, Effect.gen(function*() {
        const { computers, processes } = yield* services
        const listed = (yield* computers.list("s2")).find((c) => c.computer_id === id)
        assert.deepInclude(listed, { computer_id: id, temporary: false, sandbox_id: providerId, image: "base", state: "paused" })
        assert.isUndefined(listed?.ends_at, "a paused sandbox has no end of runtime")
        const wrong = yield* Effect.flip(computers.resolve("s2", { computer_id: id, temporary: true }))
        assert.match(wrong.message, /exists as a permanent computer/)
        const read = yield* processes.exec("s2", { computer_id: id, command: "cat mine.txt" })
        assert.strictEqual(read.stdout, "persisted\n")
        assert.strictEqual(sandboxOf(id)[0]?.sandboxID, providerId, "resumed, not recreated")
        assert.strictEqual(sandboxOf(id)[0]?.state, "running")
        yield* computers.delete("s2", id)
        assert.deepStrictEqual(sandboxOf(id), [])
      }))
      assert.deepStrictEqual(sandboxOf(id), [])
    }), 90_000)

  it.live("a temporary computer is killed when its server shuts down", () =>
    Effect.gen(function*() {
      const id = computerId("temp")
      yield* withKernel(fake, Effect.gen(function*() {
        const { computers } = yield* services
        yield* computers.create("s1", { computer_id: id })
        assert.strictEqual(sandboxOf(id).length, 1)
        assert.strictEqual(sandboxOf(id)[0]?.metadata["kilntainers-temporary"], "true")
      }))
      assert.deepStrictEqual(sandboxOf(id), [])
    }), 60_000)

  it.live("restart pauses and resumes: files kept, every process gone (a cold boot), the same sandbox", () =>
    withKernel(fake, Effect.gen(function*() {
      const { computers, processes } = yield* services
      const id = computerId("restart")
      const computer = yield* computers.create("s1", { computer_id: id })
      const before = yield* computer.providerId
      // Detached from every process group the kernel could end: only a cold boot ends it.
      yield* processes.exec("s1", { computer_id: id, command: "echo kept > kept.txt; setsid sleep 273 >/dev/null 2>&1 &" })
      const sleepers = processes.exec("s1", { computer_id: id, command: "ps -eo args | grep -c '^sleep 273$' || true" })
      assert.strictEqual((yield* sleepers).stdout.trim(), "1")
      yield* computers.restart("s1", id)
      const pauses = fake.requests.filter((r) => r.path === `/sandboxes/${before}/pause`).map((r) => r.status)
      assert.deepStrictEqual(pauses, [204])
      assert.strictEqual(yield* computer.providerId, before)
      assert.strictEqual((yield* processes.exec("s1", { computer_id: id, command: "cat kept.txt" })).stdout, "kept\n")
      assert.strictEqual((yield* sleepers).stdout.trim(), "0")
    })), 60_000)

  it.live("factory reset recreates the sandbox from the recorded template", () =>
    withKernel(fake, Effect.gen(function*() {
      const { computers, processes } = yield* services
      const id = computerId("reset")
      yield* computers.create("s1", { computer_id: id })
      yield* processes.exec("s1", { computer_id: id, command: "echo gone > gone.txt" })
      const before = sandboxOf(id)[0]!.sandboxID
      yield* computers.factoryReset("s1", id)
      const after = sandboxOf(id)
      assert.strictEqual(after.length, 1)
      assert.notStrictEqual(after[0]!.sandboxID, before)
      assert.strictEqual(after[0]!.templateID, "base")
      const read = yield* processes.exec("s1", { computer_id: id, command: "cat gone.txt" })
      assert.notStrictEqual(read.exit_code, 0)
    })), 60_000)

  it.scoped("the kernel's renewals keep a short-lived sandbox alive while it is held", () =>
    withKernel(timed, Effect.gen(function*() {
      const { computers, processes } = yield* services
      const id = computerId("keepalive")
      yield* alignClocks(timed)
      const computer = yield* computers.create("s1", { computer_id: id })
      const sandboxId = yield* computer.providerId
      yield* advance(timed, 4_500, 250)
      assert.strictEqual(timed.sandboxes().filter((s) => s.metadata[ID_KEY] === id).length, 1, "a 2 s sandbox is still there after 4.5 s")
      const renewals = timed.requests.filter((r) => r.path === `/sandboxes/${sandboxId}/timeout` && r.status === 204)
      assert.strictEqual(renewals.length, 9, "one every 500 ms")
      for (const renewal of renewals) assert.strictEqual((renewal.body as { timeout: number }).timeout, 2)
      assert.strictEqual((yield* processes.exec("s1", { computer_id: id, command: "echo alive" })).stdout, "alive\n")
    }), { sandboxTimeoutSec: 2, keepAliveIntervalMs: 500 }), 60_000)

  it.live("without renewals the sandbox expires: the computer is lost, its processes end saying why, and the next use makes a new one", () =>
    withKernel(fake, Effect.gen(function*() {
      const { computers, processes } = yield* services
      const id = computerId("expire")
      const computer = yield* computers.create("s1", { computer_id: id })
      const first = yield* computer.providerId
      const { pid } = yield* processes.spawn("s1", { computer_id: id, command: "sleep 300", background: true })
      // Its 8 s (the agent's start fits in them on a loaded machine), then E2B deletes it.
      const done = yield* processes.wait("s1", { id: pid, timeoutMs: 30_000 })
      assert.strictEqual(done.status, "terminated")
      assert.match(done.reason ?? "", /computer lost: its sandbox \S+ is gone \(killed outside kilntainers or past its timeout\)/)
      assert.strictEqual((yield* computers.list("s1")).find((c) => c.computer_id === id)?.state, "lost")
      const again = yield* processes.exec("s1", { computer_id: id, command: "echo back" })
      assert.strictEqual(again.stdout, "back\n")
      assert.notStrictEqual(yield* computer.providerId, first, "E2B deleted it: a new sandbox")
    }), { sandboxTimeoutSec: 8, keepAliveIntervalMs: 60_000 }), 60_000)

  it.live("a sandbox killed from outside: its processes end, the computer is lost saying why", () =>
    withKernel(fake, Effect.gen(function*() {
      const { computers, processes } = yield* services
      const id = computerId("killed")
      const computer = yield* computers.create("s1", { computer_id: id })
      const { pid } = yield* processes.spawn("s1", { computer_id: id, command: "echo started; sleep 300", pattern: "started" })
      const sandboxId = yield* computer.providerId
      assert.isTrue(yield* Effect.promise(() => fake.kill(sandboxId)))
      const done = yield* processes.wait("s1", { id: pid, timeoutMs: 20_000 })
      assert.strictEqual(done.status, "terminated")
      assert.strictEqual(done.signal, "SIGKILL")
      assert.match(done.reason ?? "", /computer lost: its sandbox \S+ is gone/)
    }), { keepAliveIntervalMs: 60_000 }), 60_000)

  it.live("the API key never shows in errors or logs", () =>
    Effect.gen(function*() {
      const logs: Array<string> = []
      const logger = Logger.make(({ message }) => logs.push(JSON.stringify(message)))
      const wrongKey = "e2b_0123456789abcdef0123456789abcdef01234567"
      const rejected = yield* Effect.flip(buildBackend(fake, { apiKey: Redacted.make(wrongKey) }))
      assert.strictEqual(rejected.message, "e2b backend: cannot list sandboxes: E2B rejected the API key (--e2b-api-key / E2B_API_KEY) (check the credentials)")
      assert.notInclude(JSON.stringify(rejected), wrongKey)
      assert.notInclude(String(rejected), wrongKey)
      // A full round with failures and warnings, logs captured: the release of a permanent computer fails.
      yield* withKernel(fake, Effect.gen(function*() {
        const { processes } = yield* services
        yield* processes.exec("s1", { computer_id: computerId("key"), temporary: false, command: "true" })
        fake.inject({ path: /\/pause$/, status: 500 })
      })).pipe(
        Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
        Effect.withUnhandledErrorLogLevel(Option.none())
      )
      fake.clearFaults()
      assert.isTrue(logs.some((line) => /cannot pause the sandbox/.test(line)), logs.join("\n"))
      for (const line of logs) assert.notInclude(line, fake.apiKey)
      assert.isTrue(fake.requests.some((r) => r.apiKey === fake.apiKey), "the key was sent as X-API-Key")
    }), 60_000)

  it.live("the reaper: temporary sandboxes of dead servers on this host are killed, others are left", () =>
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
      yield* make(alive, { "kilntainers-owner-pid": String(process.pid), "kilntainers-owner-start": processStartTime("self")! })
      yield* make(permanent, { "kilntainers-temporary": "false" })
      // The reaper's first pass runs in the background as the server starts.
      yield* withKernel(fake, eventually(Effect.sync(() => sandboxOf(orphan).length === 0)))
      assert.strictEqual(sandboxOf(elsewhere).length, 1)
      assert.strictEqual(sandboxOf(alive).length, 1)
      assert.strictEqual(sandboxOf(permanent).length, 1)
      for (const id of [elsewhere, alive, permanent]) yield* Effect.promise(() => fake.kill(sandboxOf(id)[0]!.sandboxID))
    }), 60_000)
})
