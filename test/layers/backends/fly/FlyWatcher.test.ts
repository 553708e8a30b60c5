import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Exit, Scope, TestClock } from "effect"
import type { Machine } from "../../../../src/layers/backends/fly/FlyApi.js"
import { FlyError } from "../../../../src/layers/backends/fly/FlyError.js"
import * as FlyWatcher from "../../../../src/layers/backends/fly/FlyWatcher.js"

/** An API whose machines the test sets; every call is counted. */
const stubApi = () => {
  const machines = new Map<string, string>()
  const calls: Array<string> = []
  const machine = (id: string, state: string): Machine => ({ id, name: `kilntainer-${id}`, state })
  const api: FlyWatcher.WatcherApi = {
    list: () =>
      Effect.sync(() => {
        calls.push("list")
        return [...machines].map(([id, state]) => machine(id, state))
      }),
    get: (id) =>
      Effect.suspend(() => {
        calls.push(`get ${id}`)
        const state = machines.get(id)
        return state === undefined
          ? Effect.fail(new FlyError({ reason: "NotFound", operation: `get machine ${id}`, status: 404, detail: "not found" }))
          : Effect.succeed(machine(id, state))
      })
  }
  return { api, machines, calls }
}

describe("FlyWatcher", () => {
  it.scoped("one list call per period for every watched machine; a machine's own state is asked only when the list shows it down or gone", () =>
    Effect.gen(function*() {
      const { api, machines, calls } = stubApi()
      const watcher = yield* FlyWatcher.make(api, 30_000)
      yield* TestClock.adjust(Duration.seconds(90))
      assert.deepStrictEqual(calls, [], "nothing watched: no call at all")

      machines.set("m1", "started")
      machines.set("m2", "started")
      const told: Array<string> = []
      const scope = yield* Scope.make()
      yield* watcher.watch("m1", (why) => Effect.sync(() => void told.push(`m1: ${why}`))).pipe(Scope.extend(scope))
      yield* watcher.watch("m2", (why) => Effect.sync(() => void told.push(`m2: ${why}`))).pipe(Scope.extend(scope))
      yield* TestClock.adjust(Duration.seconds(30))
      assert.deepStrictEqual(calls, ["list"], "two machines, one call")
      assert.deepStrictEqual(told, [])

      machines.set("m1", "stopped")
      machines.delete("m2")
      yield* TestClock.adjust(Duration.seconds(30))
      assert.deepStrictEqual(calls, ["list", "list", "get m1", "get m2"])
      assert.deepStrictEqual(told, [
        "m1: its machine m1 was stopped outside kilntainers (state stopped)",
        "m2: its machine m2 was destroyed outside kilntainers"
      ])

      // Closed connections are not watched any more.
      yield* Scope.close(scope, Exit.void)
      calls.length = 0
      yield* TestClock.adjust(Duration.seconds(60))
      assert.deepStrictEqual(calls, [])
    }))

  it.effect("check: a machine that cannot be asked right now is not taken for lost", () =>
    Effect.gen(function*() {
      const api: FlyWatcher.WatcherApi = {
        list: () => Effect.succeed([]),
        get: (id) => Effect.fail(new FlyError({ reason: "Unavailable", operation: `get machine ${id}`, status: 503, detail: "down" }))
      }
      const said = yield* FlyWatcher.check(api, "m1")
      assert.strictEqual(said._tag, "None")
    }))
})
