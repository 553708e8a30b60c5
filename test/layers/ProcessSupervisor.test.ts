import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, TestClock } from "effect"
import * as Runtime from "../../src/layers/Runtime.js"
import { decoding, Processes } from "../../src/services/Processes.js"
import { Settings } from "../../src/services/Settings.js"
import * as ScriptedBackend from "../support/ScriptedBackend.js"

const withRuntime = <A, E>(
  body: (processes: ReturnType<typeof decoding>, scripted: Effect.Effect.Success<ReturnType<typeof ScriptedBackend.make>>) => Effect.Effect<A, E>,
  overrides: Partial<Parameters<typeof Settings.make>[0]> = {}
) =>
  Effect.gen(function*() {
    const scripted = yield* ScriptedBackend.make()
    const context = yield* Layer.build(Runtime.layer(Settings.make(overrides), scripted.layer))
    // Inputs as a client sends them, decoded on the way in (the boundary's one decode).
    const processes = decoding(yield* Effect.provide(Processes, context))
    return yield* body(processes, scripted)
  })

describe("ProcessSupervisor", () => {
  it.scoped("a spawn that outlives its timeout returns running and the process keeps running", () =>
    withRuntime((processes, scripted) =>
      Effect.gen(function*() {
        const call = yield* Effect.fork(processes.spawn("s1", { command: "server", timeoutMs: 5_000 }))
        yield* TestClock.adjust("4999 millis")
        assert.isNull(call.unsafePoll())
        yield* TestClock.adjust("1 millis")
        const result = yield* Fiber.join(call)
        assert.strictEqual(result.status, "running")
        assert.isUndefined(result.exitCode)
        const [info] = (yield* processes.list("s1")).processes
        assert.strictEqual(info!.status, "running")
        assert.deepStrictEqual(scripted.spawned[0]!.signals, [])
        yield* TestClock.adjust("1 hour")
        assert.strictEqual((yield* processes.list("s1")).processes[0]!.status, "running")
      })
    ))

  it.scoped("a process that fails fast returns at once with its stderr", () =>
    withRuntime((processes) =>
      Effect.gen(function*() {
        const call = yield* Effect.fork(processes.spawn("s1", { command: "fail-fast", timeoutMs: 60_000 }))
        const result = yield* Fiber.join(call)
        assert.strictEqual(result.status, "terminated")
        assert.strictEqual(result.exitCode, 1)
        assert.strictEqual(result.stderr, "boom\n")
      })
    ))

  it.scoped("background returns at once and timeoutMs is capped by the maximum", () =>
    withRuntime((processes) =>
      Effect.gen(function*() {
        const background = yield* processes.spawn("s1", { command: "server", background: true })
        assert.strictEqual(background.status, "running")
        const call = yield* Effect.fork(processes.spawn("s1", { command: "server", timeoutMs: 10_000_000 }))
        yield* TestClock.adjust("1000 millis")
        const capped = yield* Fiber.join(call)
        assert.strictEqual(capped.status, "running")
      }), { maxTimeoutMs: 1_000 }))

  it.scoped("a failed spawn is a SpawnFailed error", () =>
    withRuntime((processes) =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(processes.spawn("s1", { command: "missing" }))
        assert.strictEqual(error._tag, "SpawnFailed")
      })
    ))

  it.scopedLive("the mailbox is bounded: a process that does not take input answers MailboxFull", () =>
    withRuntime((processes) =>
      Effect.gen(function*() {
        const { pid: id } = yield* processes.spawn("s1", { command: "hang-stdin", background: true })
        // One write is being handled (it never completes); the mailbox holds 4 more.
        const pending = yield* Effect.forEach([1, 2, 3, 4, 5], () => Effect.fork(processes.stdin("s1", { id, input: "x", eof: false })))
        yield* Effect.yieldNow()
        const error = yield* Effect.flip(processes.stdin("s1", { id, input: "x", eof: false }))
        assert.strictEqual(error._tag, "MailboxFull")
        yield* Effect.forEach(pending, Fiber.interrupt)
        // Signals do not queue behind stdin: the stuck process can still be killed.
        const killed = yield* processes.kill("s1", { id, signal: "SIGKILL" })
        assert.strictEqual(killed.status, "terminated")
      }), { mailboxCapacity: 4 }))

  it.scoped("kill records the signal and ps says why", () =>
    withRuntime((processes, scripted) =>
      Effect.gen(function*() {
        const { pid: id } = yield* processes.spawn("s1", { command: "server", background: true })
        const killed = yield* processes.kill("s1", { id, signal: "int" })
        assert.strictEqual(killed.signal, "SIGINT")
        assert.strictEqual(killed.status, "terminated")
        assert.deepStrictEqual(scripted.spawned[0]!.signals, ["SIGINT"])
        const [info] = (yield* processes.list("s1")).processes
        assert.strictEqual(info!.signal, "SIGINT")
        assert.match(info!.reason ?? "", /kill tool/)
        const again = yield* Effect.flip(processes.kill("s1", { id }))
        assert.strictEqual(again._tag, "ProcessExited")
      })
    ))

  it.scoped("finished processes stay listable, oldest evicted first", () =>
    withRuntime((processes) =>
      Effect.gen(function*() {
        for (let i = 0; i < 5; i++) yield* processes.spawn("s1", { command: "fail-fast" })
        const ids = (yield* processes.list("s1")).processes.map((p) => p.pid)
        assert.deepStrictEqual(ids, ["p5", "p4", "p3"])
        const gone = yield* Effect.flip(processes.read("s1", { id: "p1" }))
        assert.strictEqual(gone._tag, "ProcessNotFound")
      }), { maxFinished: 3 }))

  it.scoped("bad input is a clear error", () =>
    withRuntime((processes) =>
      Effect.gen(function*() {
        const { pid: id } = yield* processes.spawn("s1", { command: "server", background: true })
        assert.strictEqual((yield* Effect.flip(processes.kill("s1", { id, signal: "SIGNOPE" })))._tag, "InvalidInput")
        assert.strictEqual((yield* Effect.flip(processes.stdin("s1", { id, input: "bad \\q escape", eof: false })))._tag, "InvalidInput")
        assert.strictEqual((yield* Effect.flip(processes.stdin("s1", { id: "p999", input: "x", eof: false })))._tag, "ProcessNotFound")
        assert.strictEqual((yield* Effect.flip(processes.spawn("s1", { command: "  " })))._tag, "InvalidInput")
        assert.strictEqual((yield* Effect.flip(processes.wait("s1", { id, pattern: "(" })))._tag, "InvalidInput")
        assert.strictEqual(
          (yield* Effect.flip(processes.exec("s1", { command: "x", args: ["y"] })))._tag,
          "InvalidInput"
        )
        assert.strictEqual(
          (yield* Effect.flip(processes.spawn("s1", { command: "x", computer_id: "Bad_Id" })))._tag,
          "InvalidInput"
        )
      })
    ))
})
