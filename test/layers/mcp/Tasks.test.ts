import { assert, describe, it } from "@effect/vitest"
import type { CallToolResult } from "@modelcontextprotocol/server"
import { Effect, Fiber, TestClock } from "effect"
import { noteSubject } from "../../../src/services/Progress.js"
import * as TaskIds from "../../../src/layers/mcp/TaskIds.js"
import * as Tasks from "../../../src/layers/mcp/Tasks.js"

const result = (text: string): CallToolResult => ({ content: [{ type: "text", text }] })

/** A call that names its process, reports progress, and ends after `ms` of the Clock. */
const slowCall = (ms: number, ended: Array<string>) => (progress: (p: { progress: number; message: string }) => Effect.Effect<void>) =>
  Effect.gen(function*() {
    yield* noteSubject("steady-otter-a31f", "p7")
    yield* progress({ progress: 1, message: "still going" })
    yield* Effect.sleep(`${ms} millis`)
    return result("done")
  }).pipe(Effect.onInterrupt(() => Effect.sync(() => ended.push("interrupted"))))

describe("Tasks", () => {
  it.scoped("a call that ends within the budget answers with its result, and leaves no task", () =>
    Effect.gen(function*() {
      const tasks = yield* Tasks.make(Tasks.defaults, TaskIds.keyFrom([]))
      const started = yield* Effect.fork(tasks.run("alice", "sandbox_exec", slowCall(500, []), () => Effect.void))
      yield* TestClock.adjust("600 millis")
      const answer = yield* Fiber.join(started)
      assert.deepStrictEqual(answer, { _tag: "Result", result: result("done") })
      assert.strictEqual(yield* tasks.size, 0)
    }))

  it.scoped("a call whose process starts past the budget is waited for, so that its id carries the process; one that never names it gets a plain id", () =>
    Effect.gen(function*() {
      const key = TaskIds.keyFrom(["token"])
      const tasks = yield* Tasks.make(Tasks.defaults, key)
      const lateProcess = () =>
        Effect.gen(function*() {
          yield* Effect.sleep("3 seconds")
          yield* noteSubject("steady-otter-a31f", "p9")
          yield* Effect.sleep("60 seconds")
          return result("done")
        })
      const late = yield* Effect.fork(tasks.run("alice", "sandbox_exec", lateProcess, () => Effect.void, 30))
      yield* TestClock.adjust("3 seconds")
      const named = yield* Fiber.join(late)
      assert.strictEqual(named._tag, "Task")
      if (named._tag !== "Task") return
      assert.deepStrictEqual(TaskIds.open(key, "alice", named.task.taskId), {
        claim: { tool: "sandbox_exec", computer_id: "steady-otter-a31f", pid: "p9", createdAt: 0, timeoutSec: 30 }
      })
      const never = yield* Effect.fork(tasks.run("alice", "spawn", () => Effect.as(Effect.sleep("60 seconds"), result("done")), () => Effect.void))
      yield* TestClock.adjust("11 seconds")
      const plain = yield* Fiber.join(never)
      assert.strictEqual(plain._tag, "Task")
      if (plain._tag !== "Task") return
      assert.isFalse(TaskIds.isCarried(plain.task.taskId))
      assert.strictEqual((yield* tasks.get("alice", plain.task.taskId)).status, "working")
    }))

  it.scoped("a call that outlives the budget becomes a task that names its process and completes with the call's result", () =>
    Effect.gen(function*() {
      const tasks = yield* Tasks.make(Tasks.defaults, TaskIds.keyFrom([]))
      const started = yield* Effect.fork(tasks.run("alice", "sandbox_exec", slowCall(5_000, []), () => Effect.void))
      yield* TestClock.adjust("1 second")
      const answer = yield* Fiber.join(started)
      assert.strictEqual(answer._tag, "Task")
      if (answer._tag !== "Task") return
      const id = answer.task.taskId
      assert.strictEqual(answer.task.status, "working")
      assert.deepStrictEqual(answer.task._meta, { [Tasks.processMeta]: { computer_id: "steady-otter-a31f", pid: "p7" } })
      assert.strictEqual((yield* tasks.get("alice", id)).statusMessage, "still going")
      yield* TestClock.adjust("4 seconds")
      const done = yield* tasks.get("alice", id)
      assert.strictEqual(done.status, "completed")
      assert.deepStrictEqual(done.result, result("done"))
      // Another session never sees it.
      assert.strictEqual((yield* Effect.flip(tasks.get("alice/other-key", id)))._tag, "TaskNotFound")
      assert.strictEqual((yield* Effect.flip(tasks.get("bob", id)))._tag, "TaskNotFound")
    }))

  it.scoped("cancelling a sandbox_exec task kills its process; a wait's task only ends the wait; an ended task cannot be cancelled", () =>
    Effect.gen(function*() {
      const tasks = yield* Tasks.make(Tasks.defaults, TaskIds.keyFrom([]))
      const killed: Array<string> = []
      const execEnded: Array<string> = []
      const waitEnded: Array<string> = []
      const exec = yield* Effect.fork(tasks.run("alice", "sandbox_exec", slowCall(60_000, execEnded), (pid) => Effect.sync(() => killed.push(pid))))
      const wait = yield* Effect.fork(tasks.run("alice", "wait", slowCall(60_000, waitEnded), (pid) => Effect.sync(() => killed.push(pid))))
      yield* TestClock.adjust("1 second")
      const execTask = yield* Fiber.join(exec)
      const waitTask = yield* Fiber.join(wait)
      if (execTask._tag !== "Task" || waitTask._tag !== "Task") return assert.fail("both calls became tasks")
      yield* tasks.cancel("alice", execTask.task.taskId)
      yield* tasks.cancel("alice", waitTask.task.taskId)
      assert.deepStrictEqual(killed, ["p7"], "only sandbox_exec's process is killed")
      assert.deepStrictEqual([execEnded, waitEnded], [["interrupted"], ["interrupted"]])
      const cancelled = yield* tasks.get("alice", waitTask.task.taskId)
      assert.strictEqual(cancelled.status, "cancelled")
      assert.strictEqual(cancelled.statusMessage, "cancelled: the wait ended; the process runs on")
      const again = yield* Effect.flip(tasks.cancel("alice", execTask.task.taskId))
      assert.strictEqual(again._tag, "TaskEnded")
      assert.match(again.message, /has already been cancelled/)
    }))

  it.scoped("tasks expire after their time to live, once ended", () =>
    Effect.gen(function*() {
      const tasks = yield* Tasks.make({ taskAfterMs: 100, keepMs: 10_000, maxTasks: 10 }, TaskIds.keyFrom([]))
      const started = yield* Effect.fork(tasks.run("alice", "spawn", slowCall(1_000, []), () => Effect.void))
      yield* TestClock.adjust("100 millis")
      const task = yield* Fiber.join(started)
      if (task._tag !== "Task") return assert.fail("the call became a task")
      yield* TestClock.adjust("9 seconds")
      assert.strictEqual((yield* tasks.get("alice", task.task.taskId)).status, "completed")
      yield* TestClock.adjust("1 second")
      assert.strictEqual((yield* Effect.flip(tasks.get("alice", task.task.taskId)))._tag, "TaskNotFound")
    }))
})
