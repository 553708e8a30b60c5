import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Logger } from "effect"
import * as Runtime from "../../src/layers/Runtime.js"
import { Computers } from "../../src/services/Computers.js"
import { Processes } from "../../src/services/Processes.js"
import { Settings } from "../../src/services/Settings.js"
import * as ScriptedBackend from "../support/ScriptedBackend.js"

type Scripted = Effect.Effect.Success<ReturnType<typeof ScriptedBackend.make>>

const withRegistry = <A, E>(
  body: (kernel: { readonly computers: Computers["Type"]; readonly processes: Processes["Type"]; readonly scripted: Scripted }) => Effect.Effect<A, E>,
  options: ScriptedBackend.ScriptedOptions = {},
  settings: Partial<Settings["Type"]> = {}
) =>
  Effect.gen(function*() {
    const scripted = yield* ScriptedBackend.make(options)
    const context = yield* Layer.build(Runtime.layer(Settings.make({ killGraceMs: 100, ...settings }), scripted.layer, "this-server"))
    const computers = yield* Effect.provide(Computers, context)
    const processes = yield* Effect.provide(Processes, context)
    return yield* body({ computers, processes, scripted })
  })

/** Lets forked fibers run until the condition holds (bounded: no wall clock). */
const eventually = (condition: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1_000 && !condition(); i++) yield* Effect.yieldNow()
    assert.isTrue(condition(), "condition not reached")
  })

describe("ComputerRegistry", () => {
  it.scoped("a session's default computer is made once and kept; deleting it frees the default", () =>
    withRegistry(({ computers, scripted }) =>
      Effect.gen(function*() {
        const first = yield* computers.resolve("s1", {})
        assert.strictEqual((yield* computers.resolve("s1", {})).id, first.id)
        const other = yield* computers.resolve("s2", {})
        assert.notStrictEqual(other.id, first.id, "each session has its own")
        yield* computers.delete("s1", first.id)
        const next = yield* computers.resolve("s1", {})
        assert.notStrictEqual(next.id, first.id)
        assert.strictEqual(scripted.calls.filter((c) => c === `create ${first.id}`).length, 1)
      })
    ))

  it.scoped("a shared temporary computer lives while any session holds it", () =>
    withRegistry(({ computers, scripted }) =>
      Effect.gen(function*() {
        yield* computers.create("s1", { computer_id: "team", shared: true })
        yield* computers.resolve("s2", { computer_id: "team" })
        yield* computers.release("s1")
        assert.notInclude(scripted.calls, "remove team", "s2 still holds it")
        assert.strictEqual((yield* computers.resolve("s2", { computer_id: "team" })).id, "team")
        yield* computers.release("s2")
        assert.include(scripted.calls, "remove team")
        assert.isUndefined(scripted.byId("team"))
      })
    ))

  it.scoped("an existing computer's lifecycle mode cannot be changed, in the words Kilntainers' fork uses", () =>
    withRegistry(({ computers, scripted }) =>
      Effect.gen(function*() {
        yield* computers.create("s1", { computer_id: "fixed", temporary: false })
        const refused = yield* Effect.flip(computers.resolve("s1", { computer_id: "fixed", temporary: true }))
        assert.strictEqual(refused._tag, "InvalidInput")
        assert.include(refused.message, "lifecycle mode cannot be changed")
        assert.include(refused.message, "already exists as a permanent computer")
        assert.strictEqual((yield* computers.resolve("s1", { computer_id: "fixed", temporary: false })).temporary, false)
        assert.strictEqual(scripted.calls.filter((c) => c === "create fixed").length, 1)
      })
    ))

  it.scoped("a call racing a delete of its computer fails clearly; afterwards the id makes a new computer", () =>
    withRegistry(({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        const before = yield* computers.resolve("s1", { computer_id: "box" })
        const providerId = yield* before.providerId
        const open = yield* scripted.gate("remove")
        const deleting = yield* Effect.fork(computers.delete("s1", "box"))
        yield* eventually(() => scripted.calls.includes("remove box"))
        const racing = yield* Effect.flip(processes.spawn("s1", { command: "server", computer_id: "box", background: true }))
        assert.strictEqual(racing._tag, "ComputerUnavailable")
        assert.strictEqual(racing.message, "computer 'box' is deleting")
        yield* open
        yield* Fiber.join(deleting)
        const after = yield* computers.resolve("s1", { computer_id: "box" })
        assert.notStrictEqual(after, before)
        assert.notStrictEqual(yield* after.providerId, providerId)
        const started = yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })
        assert.strictEqual(started.status, "running")
      })
    ))

  it.scoped("a restart and a spawn at once: the spawn runs on the computer before or after, never on a closed connection", () =>
    withRegistry(({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        yield* computers.resolve("s1", { computer_id: "box" })
        const open = yield* scripted.gate("restart")
        const restarting = yield* Effect.fork(computers.restart("s1", "box"))
        yield* eventually(() => scripted.calls.includes("restart box"))
        const during = yield* Effect.flip(processes.spawn("s1", { command: "server", computer_id: "box", background: true }))
        assert.strictEqual(during._tag, "ComputerUnavailable")
        assert.match(during.message, /is restarting/)
        yield* open
        yield* Fiber.join(restarting)
        const after = yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })
        assert.strictEqual(after.status, "running")
        assert.strictEqual(scripted.spawned.at(-1)!.generation, 2)
      })
    ))

  it.scoped("a pooled computer that cannot be handed out is dropped, and a fresh one is made under the asked id", () => {
    const logs: Array<string> = []
    return withRegistry(({ computers, scripted }) =>
      Effect.gen(function*() {
        for (let i = 0; i < 1_000 && (yield* computers.pool)!.ready < 1; i++) yield* Effect.yieldNow()
        yield* scripted.failNext("adopt", "rename refused")
        const computer = yield* computers.create("s1", { computer_id: "fast" })
        assert.strictEqual(computer.id, "fast")
        assert.include(scripted.calls, "create fast")
        assert.isTrue(scripted.calls.some((c) => /^remove pool-/.test(c)), "the member is released")
        assert.isTrue(logs.some((line) => /warm pool: cannot hand out pool-.*rename refused.*creating fast instead/.test(line)), logs.join("\n"))
        assert.strictEqual(yield* computer.providerId, scripted.byId("fast")!.instance.providerId)
      }).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => {
        logs.push(Array.isArray(message) ? message.join(" ") : String(message))
      })))), {}, { warmPool: 1 })
  })
})
