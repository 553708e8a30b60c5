/**
 * The process table keys a process by its computer and its id: where computers hold their processes
 * each has its own `p1`, and a call names which with computer_id when the session can reach both.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import * as ProcessTable from "../../../src/layers/processes/ProcessTable.js"
import type { ComputerHandle } from "../../../src/services/Computers.js"
import type { ProcessHandle } from "../../../src/services/Processes.js"

let incarnations = 0
const computer = (id: string, closed: Effect.Effect<void> = Effect.never, visibleTo = (_: string) => true) =>
  ({ id, incarnation: ++incarnations, visibleTo, closed }) as unknown as ComputerHandle
const processOn = (on: ComputerHandle, id: string) => ({ id, computerId: on.id }) as unknown as ProcessHandle

describe("ProcessTable", () => {
  it.scoped("two computers' p1 are two processes; computer_id says which, and without it the id is refused as ambiguous", () =>
    Effect.gen(function*() {
      const table = yield* ProcessTable.make(10)
      const a = computer("alpha")
      const b = computer("beta")
      const onA = processOn(a, "p1")
      const onB = processOn(b, "p1")
      yield* table.add(onA, a)
      yield* table.add(onB, b)
      assert.strictEqual(yield* table.get("s", { id: "p1", computer_id: "alpha" }), onA)
      assert.strictEqual(yield* table.get("s", { id: "p1", computer_id: "beta" }), onB)
      const ambiguous = yield* Effect.flip(table.get("s", { id: "p1" }))
      assert.strictEqual(ambiguous._tag, "InvalidInput")
      assert.match(ambiguous.message, /there is a process 'p1' on computers 'alpha', 'beta': say which with computer_id/)
      assert.deepStrictEqual(yield* table.visible("s", "beta"), [onB])
      assert.deepStrictEqual(yield* table.visible("s", undefined), [onA, onB])
    }))

  it.scoped("an id on one reachable computer needs no computer_id; another session's private computer's p1 does not count", () =>
    Effect.gen(function*() {
      const table = yield* ProcessTable.make(10)
      const mine = computer("mine")
      const theirs = computer("theirs", Effect.never, (session) => session === "other")
      const own = processOn(mine, "p1")
      yield* table.add(own, mine)
      yield* table.add(processOn(theirs, "p1"), theirs)
      assert.strictEqual(yield* table.get("s", { id: "p1" }), own)
      const elsewhere = yield* Effect.flip(table.get("s", { id: "p1", computer_id: "theirs" }))
      assert.match(elsewhere.message, /runs on computer 'mine', not 'theirs'/)
      assert.strictEqual((yield* Effect.flip(table.get("s", { id: "p2" })))._tag, "ProcessNotFound")
    }))

  it.scoped("finished processes beyond maxFinished leave, and a computer that closes takes its processes along", () =>
    Effect.gen(function*() {
      const table = yield* ProcessTable.make(1)
      const gone = yield* Deferred.make<void>()
      const a = computer("alpha", Deferred.await(gone))
      const first = processOn(a, "p1")
      const second = processOn(a, "p2")
      yield* table.add(first, a)
      yield* table.add(second, a)
      yield* table.finished(first)
      yield* table.finished(second)
      assert.deepStrictEqual(yield* table.visible("s", undefined), [second])
      yield* Deferred.succeed(gone, undefined)
      for (let i = 0; i < 10; i++) yield* Effect.yieldNow()
      assert.deepStrictEqual(yield* table.visible("s", undefined), [])
    }))
})
