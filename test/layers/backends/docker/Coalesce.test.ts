/**
 * One read shared by callers at once: a caller gets the answer of a run that started after it asked,
 * at most one run at a time, and an interrupted run answers nobody else.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { coalesce } from "../../../../src/layers/backends/docker/Coalesce.js"

/** A read whose runs are counted and held until `release`. */
const gatedRead = Effect.gen(function*() {
  let runs = 0
  let gate = yield* Deferred.make<void>()
  const read = Effect.gen(function*() {
    const run = ++runs
    yield* Deferred.await(gate)
    return run
  })
  const release = Effect.gen(function*() {
    const open = gate
    gate = yield* Deferred.make<void>()
    yield* Deferred.succeed(open, undefined)
  })
  return { read, release, runs: () => runs }
})

const settle = Effect.gen(function*() {
  for (let i = 0; i < 50; i++) yield* Effect.yieldNow()
})

describe("coalesce", () => {
  it.effect("callers arriving during a run share the next one; the first gets the run it started", () =>
    Effect.gen(function*() {
      const gated = yield* gatedRead
      const shared = yield* coalesce(gated.read)
      const first = yield* Effect.fork(shared)
      yield* settle
      const later = yield* Effect.forEach([1, 2, 3], () => Effect.fork(shared))
      yield* settle
      assert.strictEqual(gated.runs(), 1, "one run at a time")
      yield* gated.release
      assert.strictEqual(yield* Fiber.join(first), 1)
      yield* settle
      assert.strictEqual(gated.runs(), 2, "the three waiting callers share one run")
      yield* gated.release
      assert.deepStrictEqual(yield* Effect.forEach(later, Fiber.join), [2, 2, 2])
      // Asked after every run ended: a run of its own, never an old answer.
      const alone = yield* Effect.fork(shared)
      yield* settle
      yield* gated.release
      assert.strictEqual(yield* Fiber.join(alone), 3)
    }))

  it.effect("a failure is shared like an answer; an interrupted run answers nobody else", () =>
    Effect.gen(function*() {
      let runs = 0
      const failing = yield* coalesce(Effect.suspend(() => Effect.fail(`failed ${++runs}`)))
      assert.strictEqual(yield* Effect.flip(failing), "failed 1")
      assert.strictEqual(yield* Effect.flip(failing), "failed 2")

      const gated = yield* gatedRead
      const shared = yield* coalesce(gated.read)
      const interrupted = yield* Effect.fork(shared)
      yield* settle
      const waiting = yield* Effect.fork(shared)
      yield* settle
      yield* Fiber.interrupt(interrupted)
      yield* settle
      assert.strictEqual(gated.runs(), 2, "the waiting caller runs again")
      yield* gated.release
      assert.strictEqual(yield* Fiber.join(waiting), 2)
    }))
})
