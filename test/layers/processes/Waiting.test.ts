import { assert, describe as describeEffect, it } from "@effect/vitest"
import { Clock, Effect, TestClock } from "effect"
import { describe, expect } from "vitest"
import * as ProcessActor from "../../../src/actors/ProcessActor.js"
import { screenForMatch, screenSettled, settle, SETTLE_MS, TTY_SETTLE_MS } from "../../../src/layers/processes/Waiting.js"
import * as ScriptedProcess from "../../support/ScriptedProcess.js"

describe("what a wait's pattern sees of a terminal's screen", () => {
  it("keeps the spaces before the cursor on its row: a prompt's trailing space", () => {
    expect(screenForMatch({ text: "/dev/pts/0\n20 100\nname?", cursor: { x: 6, y: 2 } })).toBe("/dev/pts/0\n20 100\nname? ")
    expect(screenForMatch({ text: ">>>", cursor: { x: 4, y: 0 } })).toBe(">>> ")
  })

  it("adds the cursor's row below the last row with text, and nothing where the cursor is within the text", () => {
    expect(screenForMatch({ text: "done", cursor: { x: 2, y: 2 } })).toBe("done\n\n  ")
    expect(screenForMatch({ text: "name? kiln", cursor: { x: 6, y: 0 } })).toBe("name? kiln")
    expect(screenForMatch({ text: "a\nb", cursor: { x: 0, y: 0 } })).toBe("a\nb")
  })

  it("is empty without a screen (pipes)", () => {
    expect(screenForMatch(undefined)).toBe("")
  })
})

/** A process actor over a scripted process, on a terminal or on pipes, in the test's Scope. */
const actor = (tty: boolean) =>
  Effect.gen(function*() {
    const scripted = yield* ScriptedProcess.make(ScriptedProcess.spec("app", tty ? { cols: 40, rows: 10 } : undefined), { pid: 7, generation: 1 })
    const process = yield* ProcessActor.make(scripted.process, {
      id: "p1",
      computerId: "box",
      command: "app",
      cwd: "/home/agent",
      tty: tty ? { cols: 40, rows: 10 } : undefined,
      headBytes: 1024,
      tailBytes: 1024,
      mailboxCapacity: 4,
      onExit: () => Effect.void
    })
    const output = (text: string) =>
      Effect.gen(function*() {
        const before = (yield* process.totals).stdout
        yield* scripted.emit({ _tag: "Stdout", data: new TextEncoder().encode(text) })
        for (let i = 0; i < 1_000 && (yield* process.totals).stdout === before; i++) yield* Effect.yieldNow()
      })
    return { process, scripted, output }
  })

/** Forks `wait` and reports the TestClock time at which it completed (undefined: not yet). */
const timed = (wait: Effect.Effect<void>) =>
  Effect.gen(function*() {
    let doneAt: number | undefined
    yield* Effect.fork(Effect.zipRight(wait, Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sync(() => void (doneAt = now)))))
    yield* Effect.yieldNow()
    return () => doneAt
  })

describeEffect("a terminal's result waits for its screen to settle", () => {
  it.scoped("screenSettled returns once the output paused for TTY_SETTLE_MS, counted from the last write", () =>
    Effect.gen(function*() {
      const { output, process } = yield* actor(true)
      yield* output("\"notes.txt\" [New]")
      const doneAt = yield* timed(screenSettled(process, 10_000))
      yield* TestClock.adjust(TTY_SETTLE_MS - 50)
      yield* output("~\r\n~\r\n")
      yield* TestClock.adjust(TTY_SETTLE_MS - 1)
      assert.isUndefined(doneAt(), "the screen is still being drawn")
      yield* TestClock.adjust(1)
      yield* Effect.yieldNow()
      assert.strictEqual(doneAt(), 2 * TTY_SETTLE_MS - 50)
    }))

  it.scoped("screenSettled is bounded by the call's budget when the output never pauses, and ends with the process", () =>
    Effect.gen(function*() {
      const { output, process, scripted } = yield* actor(true)
      const doneAt = yield* timed(screenSettled(process, 1_000))
      for (let t = 0; t < 1_200; t += 100) {
        yield* output(`tick ${t}\r\n`)
        yield* TestClock.adjust(100)
      }
      assert.strictEqual(doneAt(), 1_000)
      const ended = yield* timed(screenSettled(process, 10_000))
      yield* output("bye")
      yield* scripted.emit({ _tag: "Exit", exit: { exitCode: 0, signal: null } })
      for (let i = 0; i < 100 && ended() === undefined; i++) yield* Effect.yieldNow()
      assert.strictEqual(ended(), 1_200, "the exit is its own answer: no pause to wait for")
    }))

  it.scoped("pipes do not wait; no budget left, no wait", () =>
    Effect.gen(function*() {
      const pipes = yield* actor(false)
      yield* pipes.output("serving\n")
      assert.isDefined((yield* timed(screenSettled(pipes.process, 10_000)))())
      const tty = yield* actor(true)
      yield* tty.output("drawing")
      assert.isDefined((yield* timed(screenSettled(tty.process, 0)))())
    }))

  it.scoped("stdin's settle waits TTY_SETTLE_MS after the answer on a terminal, SETTLE_MS on pipes", () =>
    Effect.gen(function*() {
      for (const [tty, pause] of [[true, TTY_SETTLE_MS], [false, SETTLE_MS]] as const) {
        const { output, process } = yield* actor(tty)
        const since = yield* Clock.currentTimeMillis
        const doneAt = yield* timed(settle(process, since, 5_000))
        yield* TestClock.adjust(10)
        yield* output(":wq")
        yield* TestClock.adjust(pause - 1)
        assert.isUndefined(doneAt(), `tty ${tty}`)
        yield* TestClock.adjust(1)
        yield* Effect.yieldNow()
        assert.strictEqual(doneAt(), since + 10 + pause, `tty ${tty}`)
      }
    }))
})
