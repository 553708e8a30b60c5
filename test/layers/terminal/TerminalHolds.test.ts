/**
 * Who holds a terminal: one person at a time, by token, with a lease their calls renew; a lapsed
 * hold (a closed tab) frees the terminal. On the TestClock.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import * as Holds from "../../../src/layers/terminal/TerminalHolds.js"
import { holdNote } from "../../../src/services/Terminals.js"

describe("terminal holds", () => {
  it.effect("one person holds a terminal until they hand it back; another is refused meanwhile", () =>
    Effect.gen(function*() {
      const holds = yield* Holds.make
      assert.isUndefined(yield* holds.current("p1"))
      const hold = yield* holds.take("p1", "dashboard")
      assert.strictEqual((yield* holds.current("p1"))?.token, hold.token)
      const second = yield* Effect.flip(holds.take("p1", "page"))
      assert.match(second.message, /a person already holds it \(from the dashboard\)/)
      // another terminal is free
      assert.strictEqual((yield* holds.take("p2", "page")).by, "page")
      // a wrong token neither renews nor releases
      assert.match((yield* Effect.flip(holds.renew("p1", "not-the-token"))).message, /you do not hold it/)
      yield* holds.release("p1", "not-the-token")
      assert.isDefined(yield* holds.current("p1"))
      yield* holds.release("p1", hold.token)
      assert.isUndefined(yield* holds.current("p1"))
    }))

  it.effect("a hold its holder stops renewing lapses after the lease; renewing keeps it", () =>
    Effect.gen(function*() {
      const holds = yield* Holds.make
      const hold = yield* holds.take("p1", "page")
      yield* TestClock.adjust(Holds.leaseMs - 1)
      yield* holds.renew("p1", hold.token)
      yield* TestClock.adjust(Holds.leaseMs)
      assert.isDefined(yield* holds.current("p1"))
      yield* TestClock.adjust(1)
      assert.isUndefined(yield* holds.current("p1"))
      assert.match((yield* Effect.flip(holds.renew("p1", hold.token))).message, /you do not hold it/)
      assert.strictEqual((yield* holds.take("p1", "dashboard")).by, "dashboard")
    }))

  it.effect("the agent's note says who holds it and since when", () =>
    Effect.gen(function*() {
      const holds = yield* Holds.make
      const hold = yield* holds.take("p1", "dashboard")
      yield* TestClock.adjust("12 seconds")
      assert.strictEqual(
        holdNote(hold, 12_000),
        "a person holds this terminal (took over 12 s ago, from the dashboard): stdin to it is refused until they hand it back; stdout shows what they do"
      )
    }))
})
