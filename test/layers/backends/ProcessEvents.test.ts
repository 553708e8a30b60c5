import { assert, describe, it } from "@effect/vitest"
import { Chunk, Effect, Stream } from "effect"
import { ProcessEvents } from "../../../src/layers/backends/ProcessEvents.js"
import { type BackendProcess, forEachEventChunk, ownedEvents, type ProcessEvent } from "../../../src/services/Backend.js"

const text = (event: ProcessEvent | undefined) => (event === undefined || event._tag === "Exit" ? "" : Buffer.from(event.data).toString())

/** A process whose output is `events` (the pull is its one output interface). */
const processOf = (events: ProcessEvents): BackendProcess => ({
  pid: 1,
  pull: events.pull,
  write: () => Effect.void,
  closeStdin: Effect.void,
  signal: () => Effect.void,
  resize: () => Effect.void
})

describe("a process's output", () => {
  it.effect("a pulled chunk's bytes are borrowed: two pulls later the backend has filled that memory again", () =>
    Effect.gen(function*() {
      const events = new ProcessEvents()
      events.data(Buffer.from("first"))
      const first = Chunk.unsafeGet(yield* events.pull, 0)
      assert.strictEqual(text(first), "first")
      events.data(Buffer.from("other"))
      yield* events.pull
      events.data(Buffer.from("third"))
      yield* events.pull
      // Why the contract is a pull and not a Stream: a combinator that kept `first` would now hold "third".
      assert.strictEqual(text(first), "third")
    }))

  it.effect("ownedEvents is a Stream whose bytes stay: a buffering combinator sees every byte as it was written", () =>
    Effect.gen(function*() {
      const events = new ProcessEvents()
      const process = processOf(events)
      const writes = ["alpha", "beta", "gamma", "delta"]
      const collected = yield* Effect.fork(Stream.runCollect(ownedEvents(process).pipe(Stream.rechunk(1))))
      for (const write of writes) {
        events.data(Buffer.from(write))
        yield* Effect.yieldNow()
      }
      events.exit({ exitCode: 0, signal: null })
      events.end()
      const all = Chunk.toReadonlyArray(yield* collected)
      assert.strictEqual(all.map(text).join(""), writes.join(""))
      assert.deepStrictEqual(all[all.length - 1], { _tag: "Exit", exit: { exitCode: 0, signal: null } })
    }))

  it.effect("forEachEventChunk reads every event once, to the end, as the kernel does", () =>
    Effect.gen(function*() {
      const events = new ProcessEvents()
      events.data(Buffer.from("out"))
      events.stderr(Buffer.from("err"))
      events.exit({ exitCode: 3, signal: null })
      events.end()
      const seen: Array<string> = []
      yield* forEachEventChunk(processOf(events), (chunk) =>
        Effect.sync(() => {
          for (const event of chunk) seen.push(event._tag === "Exit" ? `exit ${event.exit.exitCode}` : `${event._tag} ${text(event)}`)
        }))
      assert.deepStrictEqual(seen, ["Stdout out", "Stderr err", "exit 3"])
    }))
})
