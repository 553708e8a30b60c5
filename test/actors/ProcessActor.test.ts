import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Queue, Scope, TestClock } from "effect"
import * as ProcessActor from "../../src/actors/ProcessActor.js"
import type { LiveOutput } from "../../src/services/Processes.js"
import * as ScriptedProcess from "../support/ScriptedProcess.js"

const encoder = new TextEncoder()
const bytes = (text: string) => encoder.encode(text)
const decode = (data: Uint8Array) => new TextDecoder().decode(data)

/** Lets forked fibers run until the condition holds (bounded: no wall clock). */
const eventually = (condition: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1_000 && !condition(); i++) yield* Effect.yieldNow()
    assert.isTrue(condition(), "condition not reached")
  })

const eventuallyEffect = <A>(read: Effect.Effect<A>, holds: (value: A) => boolean) =>
  Effect.gen(function*() {
    let value = yield* read
    for (let i = 0; i < 1_000 && !holds(value); i++) {
      yield* Effect.yieldNow()
      value = yield* read
    }
    assert.isTrue(holds(value), `condition not reached: ${JSON.stringify(value)}`)
    return value
  })

/**
 * A process actor over a scripted process, in its own Scope (closing it is the computer stopping
 * the process), with every onExit call recorded.
 */
const started = (
  command: string,
  options: {
    readonly headBytes?: number
    readonly tailBytes?: number
    readonly mailboxCapacity?: number
    readonly tty?: { cols: number; rows: number }
    readonly outputLimit?: { readonly bytes: number; readonly reason: string }
  } = {}
) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const exits: Array<string> = []
    const scripted = yield* ScriptedProcess.make(ScriptedProcess.spec(command, options.tty), { pid: 42, generation: 1 }).pipe(Scope.extend(scope))
    const actor = yield* ProcessActor.make(scripted.process, {
      id: "p1",
      computerId: "box",
      command,
      cwd: "/home/agent",
      tty: options.tty,
      headBytes: options.headBytes ?? 1024,
      tailBytes: options.tailBytes ?? 1024,
      mailboxCapacity: options.mailboxCapacity ?? 16,
      outputLimit: options.outputLimit,
      onExit: (self) => Effect.sync(() => void exits.push(self.id))
    }).pipe(Scope.extend(scope))
    return { actor, scripted, scope, exits }
  })

describe("ProcessActor", () => {
  it.effect("keeps the head and the tail of each stream, counts every byte, and marks what it left out", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* started("server", { headBytes: 4, tailBytes: 4 })
      yield* scripted.emit({ _tag: "Stdout", data: bytes("0123456789") })
      yield* scripted.emit({ _tag: "Stderr", data: bytes("abc") })
      yield* eventuallyEffect(actor.totals, (t) => t.stdout === 10 && t.stderr === 3)
      const view = yield* actor.read({})
      assert.strictEqual(view.stdout.text, "0123\n[… 2 bytes omitted …]\n6789")
      assert.strictEqual(view.stdout.omitted, 2)
      assert.strictEqual(view.stdout.total, 10)
      assert.strictEqual(view.stdout.next, 10)
      assert.strictEqual(view.stderr.text, "abc")
      // A cursor reads on from where the last read ended.
      yield* scripted.emit({ _tag: "Stdout", data: bytes("AB") })
      yield* eventuallyEffect(actor.totals, (t) => t.stdout === 12)
      const next = yield* actor.read({ stdoutCursor: view.stdout.next })
      assert.strictEqual(next.stdout.text, "AB")
      assert.strictEqual(next.stdout.from, 10)
    }))

  it.effect("copies output it keeps: the backend may reuse an event's memory after the next pull", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* started("server")
      const reused = bytes("first")
      yield* scripted.emit({ _tag: "Stdout", data: reused })
      yield* eventuallyEffect(actor.totals, (t) => t.stdout === 5)
      reused.set(bytes("XXXXX"))
      assert.strictEqual((yield* actor.read({})).stdout.text, "first")
    }))

  // xterm parses between real timers: this runs on the live clock.
  it.live("a terminal's screen shows the bytes as they were, though the backend refills their memory at once", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* started("vim", { tty: { cols: 40, rows: 10 } })
      const reused = Buffer.from("\x1b[2;1Hdrawn")
      yield* scripted.emit({ _tag: "Stdout", data: reused })
      yield* eventuallyEffect(actor.totals, (t) => t.stdout === reused.length)
      reused.fill(0x58)
      assert.strictEqual((yield* actor.read({})).screen!.text, "\ndrawn")
    }))

  it.effect("records the exit with the Clock's time, calls onExit once, and closes after the stream ends", () =>
    Effect.gen(function*() {
      const { actor, scripted, exits } = yield* started("server")
      yield* TestClock.adjust("3 seconds")
      yield* scripted.emit({ _tag: "Stdout", data: bytes("bye\n") })
      yield* scripted.emit({ _tag: "Exit", exit: { exitCode: 3, signal: null, descendantsKilled: 2 } })
      assert.deepStrictEqual(yield* actor.exited, { exitCode: 3, signal: null, descendantsKilled: 2 })
      // Output of children that outlive it may still follow, until the stream ends.
      yield* scripted.emit({ _tag: "Stdout", data: bytes("late\n") })
      yield* scripted.end
      yield* actor.closed
      const info = yield* actor.info
      assert.strictEqual(info.status, "terminated")
      assert.strictEqual(info.exitCode, 3)
      assert.strictEqual(info.descendantsKilled, 2)
      assert.strictEqual(info.osPid, 42)
      assert.strictEqual(info.createdAt, new Date(0).toISOString())
      assert.strictEqual(info.endedAt, new Date(3_000).toISOString())
      assert.isUndefined(info.reason, "a process that exited by itself has no reason")
      assert.strictEqual((yield* actor.read({})).stdout.text, "bye\nlate\n")
      assert.deepStrictEqual(exits, ["p1"])
    }))

  it.effect("lastActivity follows output on the Clock", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* started("server")
      assert.strictEqual(yield* actor.lastActivity, 0)
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(yield* actor.lastActivity, 0, "no output, no activity")
      yield* scripted.emit({ _tag: "Stderr", data: bytes("tick") })
      yield* eventuallyEffect(actor.lastActivity, (at) => at === 10_000)
    }))

  it.effect("a signal reaches the process and its reason is recorded with the exit", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* started("server")
      yield* actor.signal("SIGTERM", "killed by process_kill")
      const exit = yield* actor.exited
      assert.deepStrictEqual(exit, { exitCode: null, signal: "SIGTERM" })
      assert.deepStrictEqual(scripted.signals, ["SIGTERM"])
      const info = yield* actor.info
      assert.strictEqual(info.signal, "SIGTERM")
      assert.strictEqual(info.reason, "killed by process_kill")
      // Nothing more reaches a process that has exited.
      assert.strictEqual((yield* Effect.flip(actor.signal("SIGKILL")))._tag, "ProcessExited")
      assert.strictEqual((yield* Effect.flip(actor.write(bytes("x"))))._tag, "ProcessExited")
      assert.deepStrictEqual(scripted.signals, ["SIGTERM"])
    }))

  it.effect("past its output limit, stdout and stderr together, the process is killed and the record says why", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* started("server", { outputLimit: { bytes: 10, reason: "output limit exceeded (10 bytes, sandbox_exec)" } })
      yield* scripted.emit({ _tag: "Stdout", data: bytes("012345") })
      yield* scripted.emit({ _tag: "Stderr", data: bytes("6789") })
      yield* eventuallyEffect(actor.totals, (totals) => totals.stdout + totals.stderr === 10)
      assert.deepStrictEqual(scripted.signals, [], "at the limit it runs on")
      yield* scripted.emit({ _tag: "Stdout", data: bytes("x") })
      const exit = yield* actor.exited
      assert.deepStrictEqual(exit, { exitCode: null, signal: "SIGKILL" })
      assert.deepStrictEqual(scripted.signals, ["SIGKILL"])
      assert.strictEqual((yield* actor.info).reason, "output limit exceeded (10 bytes, sandbox_exec)")
      assert.deepStrictEqual(yield* actor.totals, { stdout: 7, stderr: 4 })
    }))

  it.effect("stdin is written in order; after EOF further writes and a second EOF are refused", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* started("echo-stdin")
      yield* actor.write(bytes("one\n"))
      yield* actor.write(bytes("two\n"))
      assert.deepStrictEqual(scripted.writes.map(decode), ["one\n", "two\n"])
      yield* eventuallyEffect(actor.totals, (t) => t.stdout === 8)
      assert.strictEqual((yield* actor.read({})).stdout.text, "one\ntwo\n")
      yield* actor.closeStdin
      assert.strictEqual(scripted.eofs, 1)
      assert.strictEqual((yield* Effect.flip(actor.write(bytes("three\n"))))._tag, "StdinClosed")
      assert.strictEqual((yield* Effect.flip(actor.closeStdin))._tag, "StdinClosed")
      assert.strictEqual(scripted.eofs, 1)
      assert.strictEqual(scripted.writes.length, 2)
    }))

  it.effect("on a terminal, EOF is Ctrl-D: it may be sent again, and resizes reach the process and the screen", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* started("shell", { tty: { cols: 40, rows: 10 } })
      assert.isTrue(actor.tty)
      yield* actor.closeStdin
      yield* actor.closeStdin
      assert.strictEqual(scripted.eofs, 2)
      yield* scripted.emit({ _tag: "Stdout", data: bytes("hello from the terminal") })
      yield* eventuallyEffect(actor.totals, (t) => t.stdout === 23)
      yield* actor.resize(60, 12)
      assert.deepStrictEqual(scripted.resizes, [[60, 12]])
      const view = yield* actor.read({})
      assert.strictEqual(view.screen!.cols, 60)
      assert.strictEqual(view.screen!.rows, 12)
      assert.include(view.screen!.text, "hello from the terminal")
      assert.strictEqual(view.stdout.text, "", "a terminal's raw bytes only when asked for")
      assert.include((yield* actor.read({ raw: true })).stdout.text, "hello from the terminal")
    }))

  // xterm parses between real timers: these run on the live clock.
  it.live("on a terminal, input sent right after an app's query follows the terminal's answer to it", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* started("vim", { tty: { cols: 40, rows: 10 } })
      let total = 0
      for (let round = 0; round < 20; round++) {
        // The app asks where the cursor is and what the terminal is; the client types as soon as
        // the server has the query (the terminal has not parsed it yet: it does so between timers).
        const query = bytes(`\r\nline ${round}\x1b[6n\x1b[>c`)
        total += query.length
        yield* scripted.emit({ _tag: "Stdout", data: query })
        yield* eventuallyEffect(actor.totals, (t) => t.stdout === total)
        yield* actor.write(bytes(`key ${round}`))
      }
      const written = scripted.writes.map(decode)
      assert.lengthOf(written, 60, JSON.stringify(written))
      for (let round = 0; round < 20; round++) {
        const [position, attributes, key] = written.slice(round * 3, round * 3 + 3)
        assert.match(position!, /^\x1b\[\d+;\d+R$/, JSON.stringify(written))
        assert.strictEqual(attributes, "\x1b[>0;276;0c")
        assert.strictEqual(key, `key ${round}`)
      }
    }))

  it.live("on a terminal, an answer no input waits for is written on its own", () =>
    Effect.gen(function*() {
      const { scripted } = yield* started("app", { tty: { cols: 40, rows: 10 } })
      yield* scripted.emit({ _tag: "Stdout", data: bytes("abc\x1b[6n") })
      yield* Effect.gen(function*() {
        while (scripted.writes.length === 0) yield* Effect.sleep("5 millis")
      }).pipe(Effect.timeout("5 seconds"))
      assert.deepStrictEqual(scripted.writes.map(decode), ["\x1b[1;4R"])
    }))

  it.effect("a stream that ends without an exit is a lost process; a later loss of its computer explains it", () =>
    Effect.gen(function*() {
      const { actor, scripted, exits } = yield* started("server")
      yield* scripted.end
      assert.deepStrictEqual(yield* actor.exited, { exitCode: null, signal: "SIGKILL" })
      assert.strictEqual((yield* actor.info).reason, "the backend lost the process")
      assert.deepStrictEqual(exits, ["p1"])
      yield* actor.explainEnd("computer lost: the container was removed")
      assert.strictEqual((yield* actor.info).reason, "computer lost: the container was removed")
    }))

  it.effect("explainEnd leaves a plain exit and a known reason alone", () =>
    Effect.gen(function*() {
      const plain = yield* started("server")
      yield* plain.scripted.emit({ _tag: "Exit", exit: { exitCode: 0, signal: null } })
      yield* plain.actor.exited
      yield* plain.actor.explainEnd("computer lost")
      assert.isUndefined((yield* plain.actor.info).reason)
      const killed = yield* started("server")
      yield* killed.actor.signal("SIGKILL", "killed by process_kill")
      yield* killed.actor.exited
      yield* killed.actor.explainEnd("computer lost")
      assert.strictEqual((yield* killed.actor.info).reason, "killed by process_kill")
    }))

  it.effect("stopped from outside before it exited: the record says SIGKILL and why", () =>
    Effect.gen(function*() {
      const { actor, scope, exits } = yield* started("server")
      yield* actor.noteReason("computer box restarted")
      // A second note does not replace the first: the first cause is the true one.
      yield* actor.noteReason("server shutting down")
      yield* Scope.close(scope, Exit.void)
      const info = yield* actor.info
      assert.strictEqual(info.status, "terminated")
      assert.strictEqual(info.signal, "SIGKILL")
      assert.strictEqual(info.reason, "computer box restarted")
      assert.deepStrictEqual(exits, ["p1"], "onExit once, though both the stream and the finalizer saw the end")
      const bare = yield* started("server")
      yield* Scope.close(bare.scope, Exit.void)
      assert.strictEqual((yield* bare.actor.info).reason, "stopped by kilntainers")
    }))

  it.effect("the mailbox is bounded: past its capacity a write is refused at once, and queued ones are answered when the process stops", () =>
    Effect.gen(function*() {
      const { actor, scripted, scope } = yield* started("hang-stdin", { mailboxCapacity: 1 })
      // The first write is taken by the mailbox's fiber and hangs in the backend.
      const first = yield* Effect.fork(actor.write(bytes("1")))
      yield* eventually(() => first.unsafePoll() === null)
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      // The second waits in the mailbox, which is now full.
      const second = yield* Effect.fork(actor.write(bytes("2")))
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      const third = yield* Effect.flip(actor.write(bytes("3")))
      assert.strictEqual(third._tag, "MailboxFull")
      // Signals do not queue behind stdin: a process that stopped reading can still be killed.
      yield* actor.signal("SIGKILL", "killed by process_kill")
      assert.deepStrictEqual(scripted.signals, ["SIGKILL"])
      yield* actor.exited
      yield* Scope.close(scope, Exit.void)
      const answers = [yield* Effect.flip(Fiber.join(first)), yield* Effect.flip(Fiber.join(second))]
      assert.deepStrictEqual(answers.map((error) => error._tag), ["ProcessExited", "ProcessExited"])
    }))

  it.effect("a subscriber sees live output from now on and the exit; the logs keep everything", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* started("server")
      yield* scripted.emit({ _tag: "Stdout", data: bytes("before ") })
      yield* eventuallyEffect(actor.totals, (t) => t.stdout === 7)
      const seen = yield* Effect.scoped(Effect.gen(function*() {
        const live = yield* actor.subscribe
        // a Buffer, as the backends hand out: its `slice` would be a view of the same memory
        const reused = Buffer.from("after")
        yield* scripted.emit({ _tag: "Stdout", data: reused })
        yield* scripted.emit({ _tag: "Stderr", data: bytes("warn") })
        yield* scripted.emit({ _tag: "Exit", exit: { exitCode: 0, signal: null } })
        const events: Array<LiveOutput> = []
        while (events.at(-1)?._tag !== "Exit") events.push(yield* Queue.take(live))
        reused.set(bytes("XXXXX"))
        return events
      }))
      assert.deepStrictEqual(seen.map((e) => e._tag === "Exit" ? `exit ${e.exit.exitCode}` : `${e._tag} ${decode(e.data)}`), [
        "Stdout after",
        "Stderr warn",
        "exit 0"
      ])
      assert.strictEqual((yield* actor.read({})).stdout.text, "before after")
    }))
})
