import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Fiber, TestClock } from "effect"
import * as RequestBudget from "../../../../src/layers/backends/fly/RequestBudget.js"

const exec = { action: "exec", scope: "machine-1" }
const rate = RequestBudget.SAFETY // tokens per second at Fly's 1/s, as our side counts them

/** Forks `take`, then says whether it finished after `ms` more of test time. */
const doneAfter = (effect: Effect.Effect<void>, ms: number) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(effect)
    yield* TestClock.adjust(Duration.millis(ms))
    const done = fiber.unsafePoll() !== null
    if (!done) yield* Fiber.interrupt(fiber)
    return done
  })

describe("RequestBudget", () => {
  it.effect("a burst of 3, then one request per second (a little slower than Fly, never faster)", () =>
    Effect.gen(function*() {
      const budget = yield* RequestBudget.make({ perAction: RequestBudget.FLY_LIMITS.perAction })
      for (let i = 0; i < 3; i++) assert.isTrue(yield* doneAfter(budget.take(exec), 0), `burst token ${i + 1}`)
      assert.isFalse(yield* doneAfter(budget.take(exec), 999), "no fourth token within a second")
      // The interrupted waiter took nothing: the next token is there once a full token has refilled.
      assert.isTrue(yield* doneAfter(budget.take(exec), Math.ceil(1000 / rate) - 999 + 1))
      assert.isFalse(yield* doneAfter(budget.take(exec), 900))
    }))

  it.effect("buckets are per action and machine; Get Machine has its own, larger limit", () =>
    Effect.gen(function*() {
      const budget = yield* RequestBudget.make(RequestBudget.FLY_LIMITS)
      for (let i = 0; i < 3; i++) yield* budget.take(exec)
      assert.isTrue(yield* doneAfter(budget.take({ action: "exec", scope: "machine-2" }), 0), "another machine")
      assert.isTrue(yield* doneAfter(budget.take({ action: "start", scope: "machine-1" }), 0), "another action")
      for (let i = 0; i < 10; i++) assert.isTrue(yield* doneAfter(budget.take({ action: "get", scope: "machine-1" }), 0), `get ${i + 1}`)
      assert.isFalse(yield* doneAfter(budget.take({ action: "get", scope: "machine-1" }), 150))
    }))

  it.effect("a reserve leaves tokens for others: a poll waits for two and takes one", () =>
    Effect.gen(function*() {
      const budget = yield* RequestBudget.make({ perAction: RequestBudget.FLY_LIMITS.perAction })
      yield* budget.take(exec)
      yield* budget.take(exec)
      // One token left: a poll with reserve 1 waits, an operation does not.
      assert.isFalse(yield* doneAfter(budget.take(exec, { reserve: 1 }), 500))
      assert.isTrue(yield* doneAfter(budget.take(exec), 0))
      assert.isTrue(yield* doneAfter(budget.take(exec, { reserve: 1 }), Math.ceil(2000 / rate)))
      // A reserve larger than the burst cannot wait forever.
      assert.isTrue(yield* doneAfter(budget.take(exec, { reserve: 10 }), Math.ceil(3000 / rate)))
    }))

  it.effect("a refusal without Retry-After holds every taker back one refill period, then lets one through", () =>
    Effect.gen(function*() {
      const budget = yield* RequestBudget.make({ perAction: RequestBudget.FLY_LIMITS.perAction })
      yield* budget.refused(exec, undefined)
      assert.isFalse(yield* doneAfter(budget.take(exec), 990))
      assert.isTrue(yield* doneAfter(budget.take(exec), 11))
      assert.isFalse(yield* doneAfter(budget.take(exec), 500), "the bucket restarts from empty")
    }))

  it.effect("a refusal with Retry-After waits that long", () =>
    Effect.gen(function*() {
      const budget = yield* RequestBudget.make({ perAction: RequestBudget.FLY_LIMITS.perAction })
      yield* budget.refused(exec, 3000)
      assert.isFalse(yield* doneAfter(budget.take(exec), 2990))
      assert.isTrue(yield* doneAfter(budget.take(exec), 11))
      assert.strictEqual(Math.round(yield* budget.available(exec)), 0)
    }))
})
