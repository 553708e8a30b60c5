import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import * as BodyBudget from "../../../src/layers/mcp/BodyBudget.js"

const reserve = (budget: BodyBudget.BodyBudget, principal: string) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const reservation = yield* Scope.extend(budget.reserve(principal), scope)
    return { reservation, release: Scope.close(scope, Exit.void) }
  })

describe("BodyBudget", () => {
  it.effect("a principal cannot hold more than its share; another principal still can", () =>
    Effect.gen(function*() {
      const budget = BodyBudget.make({ total: 100, perPrincipal: 60 })
      const alice = yield* reserve(budget, "alice")
      assert.isUndefined(alice.reservation.grow(40))
      const over = alice.reservation.grow(30)
      assert.strictEqual(over?.budget, "principal")
      assert.strictEqual(alice.reservation.held(), 40, "a refused growth takes nothing")
      const bob = yield* reserve(budget, "bob")
      assert.isUndefined(bob.reservation.grow(60))
      assert.strictEqual(budget.inUse().total, 100)
    }))

  it.effect("the server's budget holds across principals, and frees as requests are answered", () =>
    Effect.gen(function*() {
      const budget = BodyBudget.make({ total: 100, perPrincipal: 60 })
      const alice = yield* reserve(budget, "alice")
      const bob = yield* reserve(budget, "bob")
      const carol = yield* reserve(budget, "carol")
      assert.isUndefined(alice.reservation.grow(50))
      assert.isUndefined(bob.reservation.grow(50))
      const refused = carol.reservation.grow(1)
      assert.strictEqual(refused?._tag, "BodyOverBudget")
      assert.strictEqual(refused?.budget, "server")
      assert.match(refused!.message, /request bodies being read take 0 MiB of memory, the server's limit/)
      yield* alice.release
      assert.isUndefined(carol.reservation.grow(50))
      assert.deepStrictEqual([...budget.inUse().byPrincipal.entries()], [["bob", 50], ["carol", 50]])
    }))

  it.effect("a released reservation gives back exactly what it took, once, and counts nothing after", () =>
    Effect.gen(function*() {
      const budget = BodyBudget.make({ total: 100, perPrincipal: 100 })
      const first = yield* reserve(budget, "alice")
      const second = yield* reserve(budget, "alice")
      assert.isUndefined(first.reservation.grow(30))
      assert.isUndefined(second.reservation.grow(20))
      yield* first.release
      yield* first.release
      assert.strictEqual(budget.inUse().total, 20)
      assert.isUndefined(first.reservation.grow(99), "a late chunk of an answered request is not counted")
      assert.strictEqual(budget.inUse().total, 20)
      yield* second.release
      assert.deepStrictEqual(budget.inUse(), { total: 0, byPrincipal: new Map() })
    }))
})
