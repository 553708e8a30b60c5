import { assert, describe, it } from "@effect/vitest"
import { type Duration, Effect, ExecutionStrategy, Option, Scope, TestClock } from "effect"
import * as ComputerActor from "../../src/actors/ComputerActor.js"
import * as WarmPool from "../../src/layers/WarmPool.js"
import * as ScriptedBackend from "../support/ScriptedBackend.js"

type Scripted = Effect.Effect.Success<ReturnType<typeof ScriptedBackend.make>>

const server = { instanceId: "this-server", owner: { host: "test-host", pid: 1, start: "0" } }

/** A pool over the scripted provider: each member a pooled computer actor in its own scope. */
const pool = (scripted: Scripted, size: number, concurrency = size, quiet?: Duration.DurationInput) =>
  Effect.gen(function*() {
    const root = yield* Effect.scope
    let made = 0
    const open = Effect.gen(function*() {
      const scope = yield* Scope.fork(root, ExecutionStrategy.sequential)
      const actor = yield* ComputerActor.make(scripted.backend, {
        id: `pool-${++made}`,
        temporary: true,
        shared: false,
        session: "",
        incarnation: made,
        killGraceMs: 100,
        server
      }, { _tag: "Create", pooled: true }).pipe(Scope.extend(scope))
      return { actor, scope }
    })
    return yield* WarmPool.make({ size, concurrency, open, quiet })
  })

/** Lets forked fibers run until the condition holds (bounded: no wall clock). */
const eventually = <A>(read: Effect.Effect<A>, holds: (value: A) => boolean) =>
  Effect.gen(function*() {
    let value = yield* read
    for (let i = 0; i < 1_000 && !holds(value); i++) {
      yield* Effect.yieldNow()
      value = yield* read
    }
    assert.isTrue(holds(value), `condition not reached: ${JSON.stringify(value)}`)
    return value
  })

const settle = Effect.gen(function*() {
  for (let i = 0; i < 100; i++) yield* Effect.yieldNow()
})

const creates = (scripted: Scripted) => Effect.sync(() => scripted.calls.filter((c) => c.startsWith("create ")).length)

describe("WarmPool", () => {
  it.scoped("keeps its size ready, preparing at most `concurrency` at once", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make({ gateCreate: true })
      const warm = yield* pool(scripted, 3, 1)
      yield* eventually(creates(scripted), (n) => n === 1)
      yield* settle
      assert.strictEqual(yield* creates(scripted), 1, "one at a time")
      assert.deepStrictEqual(yield* warm.status, { size: 3, ready: 0, starting: 3, handedOut: 0 })
      yield* scripted.openCreate
      yield* eventually(warm.status, (s) => s.ready === 3)
      assert.strictEqual(yield* creates(scripted), 3)
      assert.isTrue([...scripted.computers.values()].every((c) => c.instance.metadata.pooled === true))
    }))

  it.scoped("take hands out a ready member at once (none when empty) and the pool refills behind it", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      const warm = yield* pool(scripted, 1)
      yield* eventually(warm.status, (s) => s.ready === 1)
      const member = warm.take()
      assert.isTrue(Option.isSome(member))
      assert.isTrue(Option.isNone(warm.take()), "the only member is taken: nothing until the refill")
      yield* eventually(warm.status, (s) => s.ready === 1)
      assert.deepStrictEqual(yield* warm.status, { size: 1, ready: 1, starting: 0, handedOut: 1 })
      assert.strictEqual(yield* creates(scripted), 2)
      if (Option.isSome(member)) assert.strictEqual(yield* member.value.actor.state, "running")
    }))

  it.scoped("a member lost while it waits is dropped and replaced at the next look, on the Clock", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      const warm = yield* pool(scripted, 2)
      yield* eventually(warm.status, (s) => s.ready === 2)
      yield* scripted.byId("pool-1")!.lose("its container was removed outside kilntainers")
      yield* eventually(Effect.sync(() => scripted.calls), (calls) => calls.includes("disconnect pool-1"))
      yield* settle
      assert.strictEqual(yield* creates(scripted), 2, "not replaced before the pool looks")
      yield* TestClock.adjust("5 seconds")
      yield* eventually(warm.status, (s) => s.ready === 2 && s.starting === 0)
      assert.strictEqual(yield* creates(scripted), 3)
      assert.include(scripted.calls, "remove pool-1", "the lost member is released")
      const taken = [warm.take(), warm.take()].map((m) => Option.map(m, (member) => member.actor.id))
      assert.deepStrictEqual(taken, [Option.some("pool-2"), Option.some("pool-3")])
    }))

  it.scoped("while creation keeps failing, the refill backs off on the Clock: 1 s, then 2 s", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      yield* scripted.failNext("create", "quota exceeded")
      const warm = yield* pool(scripted, 1)
      yield* eventually(creates(scripted), (n) => n === 1)
      yield* scripted.failNext("create", "quota exceeded")
      yield* TestClock.adjust("999 millis")
      yield* settle
      assert.strictEqual(yield* creates(scripted), 1)
      yield* TestClock.adjust("1 millis")
      yield* eventually(creates(scripted), (n) => n === 2)
      yield* TestClock.adjust("1999 millis")
      yield* settle
      assert.strictEqual(yield* creates(scripted), 2, "the second failure doubles the wait")
      yield* TestClock.adjust("1 millis")
      yield* eventually(warm.status, (s) => s.ready === 1)
      assert.strictEqual(yield* creates(scripted), 3)
    }))

  it.scoped("the refill waits until hand-outs pause for `quiet` (a burst is not slowed by it), bounded to ten pauses", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      const warm = yield* pool(scripted, 3, 3, "100 millis")
      yield* eventually(warm.status, (s) => s.ready === 3)
      assert.isTrue(Option.isSome(warm.take()))
      yield* settle
      yield* TestClock.adjust("60 millis")
      assert.isTrue(Option.isSome(warm.take()), "a second hand-out within the pause")
      yield* TestClock.adjust("60 millis")
      yield* settle
      assert.strictEqual(yield* creates(scripted), 3, "no refill while hand-outs go on")
      yield* TestClock.adjust("100 millis")
      yield* eventually(warm.status, (s) => s.ready === 3)
      assert.strictEqual(yield* creates(scripted), 5)
    }))

  it.scoped("hand-outs that never pause hold the refill back for ten pauses at most", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      const warm = yield* pool(scripted, 14, 14, "100 millis")
      yield* eventually(warm.status, (s) => s.ready === 14)
      for (let i = 0; i < 13; i++) {
        assert.isTrue(Option.isSome(warm.take()))
        yield* settle
        if (i < 11) assert.strictEqual(yield* creates(scripted), 14, `still waiting at hand-out ${i}`)
        yield* TestClock.adjust("90 millis")
      }
      yield* eventually(creates(scripted), (n) => n > 14)
    }))
})
