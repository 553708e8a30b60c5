import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { omittedMarker } from "../../src/actors/OutputSlice.js"
import { ENDED_WINDOW, ProcessOutput, type StoreRead } from "../../src/actors/ProcessOutput.js"

const text = Array.from({ length: 20000 }, (_, i) => `${String(i).padStart(6, "0")}\n`).join("")
const bytes = Buffer.from(text)

/** A computer's store holding the whole stream, or a head and tail of it (counting what fell out). */
const storeOf = (data: Buffer, keep?: { readonly head: number; readonly tail: number }) => {
  const reads: Array<[number, number]> = []
  const read: StoreRead = (_stream, from, most) =>
    Effect.sync(() => {
      reads.push([from, most])
      const total = data.length
      const headEnd = keep === undefined ? total : Math.min(keep.head, total)
      const tailStart = keep === undefined ? total : Math.max(headEnd, total - keep.tail)
      const start = from < headEnd ? from : Math.max(from, tailStart)
      const end = start < headEnd ? Math.min(headEnd, start + most) : Math.min(total, start + most)
      return { start, total, data: data.subarray(start, end) }
    })
  return { read, reads }
}

/** A process whose window saw everything (it spawned it), or joined at `joinedAt`. */
const outputOf = (store: StoreRead | undefined, window: number, joinedAt = 0) => {
  const output = new ProcessOutput({ headBytes: window, tailBytes: window }, store)
  output.stdout.startAt(joinedAt)
  output.stdout.append(bytes.subarray(joinedAt))
  return output
}

describe("ProcessOutput", () => {
  it.effect("the logs alone: head and tail within the budget, and a reader pages on from the end", () =>
    Effect.gen(function*() {
      const output = outputOf(undefined, 1 << 20)
      const slice = yield* output.read("stdout", { cursor: 0, maxBytes: 100, mode: "inline" })
      assert.strictEqual(slice.text, `${text.slice(0, 50)}\n${omittedMarker(text.length - 100)}\n${text.slice(-50)}`)
      assert.isUndefined(slice.resume)
      assert.strictEqual(slice.next, text.length)
      assert.isFalse(output.held)
    }))

  it.effect("with the store behind, an inline result resumes at the first byte it left out", () =>
    Effect.gen(function*() {
      const output = outputOf(storeOf(bytes).read, 1 << 20)
      const slice = yield* output.read("stdout", { cursor: 0, maxBytes: 100, mode: "inline" })
      assert.strictEqual(slice.resume, 50)
      assert.isTrue(output.held)
    }))

  it.effect("with the store behind, a small window answers inline results alone", () =>
    Effect.gen(function*() {
      const store = storeOf(bytes)
      const output = outputOf(store.read, 1024)
      const slice = yield* output.read("stdout", { cursor: 0, maxBytes: 1000, mode: "inline" })
      assert.strictEqual(slice.text, `${text.slice(0, 500)}\n${omittedMarker(text.length - 1000)}\n${text.slice(-500)}`)
      assert.strictEqual(slice.resume, 500)
      assert.deepStrictEqual(store.reads, [], "no read of the store")
    }))

  it.effect("ranges past the window come from the store: every byte, once, in pages", () =>
    Effect.gen(function*() {
      const store = storeOf(bytes)
      const output = outputOf(store.read, 1024)
      let cursor = 0
      let got = ""
      for (let i = 0; i < 100 && cursor < text.length; i++) {
        const page = yield* output.read("stdout", { cursor, maxBytes: 7001, mode: "range" })
        assert.strictEqual(page.omitted, 0)
        got += page.text
        cursor = page.next
      }
      assert.strictEqual(got, text)
      assert.isAbove(store.reads.length, 0)
    }))

  it.effect("what fell out of the store is marked exactly, and a range goes on after it", () =>
    Effect.gen(function*() {
      const store = storeOf(bytes, { head: 1000, tail: 2000 })
      const output = outputOf(store.read, 100)
      const page = yield* output.read("stdout", { cursor: 900, maxBytes: 300, mode: "range" })
      assert.deepStrictEqual([page.text, page.from, page.next], [text.slice(900, 1000), 900, 1000])
      const after = yield* output.read("stdout", { cursor: 1000, maxBytes: 300, mode: "range" })
      const tailStart = text.length - 2000
      assert.strictEqual(after.text, `${omittedMarker(tailStart - 1000)}\n${text.slice(tailStart, tailStart + 300)}`)
      assert.strictEqual(after.omitted, tailStart - 1000)
      assert.strictEqual(after.next, tailStart + 300)
    }))

  it.effect("a process joined later (another server started it): its head is read from the store", () =>
    Effect.gen(function*() {
      const store = storeOf(bytes)
      const output = outputOf(store.read, 1024, 50_000)
      const slice = yield* output.read("stdout", { cursor: 0, maxBytes: 1000, mode: "inline" })
      assert.strictEqual(slice.text, `${text.slice(0, 500)}\n${omittedMarker(text.length - 1000)}\n${text.slice(-500)}`)
      assert.strictEqual(slice.resume, 500)
      const lines = yield* output.read("stdout", { lines: 3, maxBytes: 1000, mode: "lines" })
      assert.strictEqual(lines.text, text.split("\n").slice(-4).join("\n"))
    }))

  it.effect("a store that cannot answer leaves the window's answer", () =>
    Effect.gen(function*() {
      const output = outputOf(() => Effect.fail("gone"), 100, 50_000)
      const page = yield* output.read("stdout", { cursor: 0, maxBytes: 300, mode: "range" })
      assert.strictEqual(page.text, `${omittedMarker(text.length - 100)}\n${text.slice(-100)}`)
    }))
  it.effect("once ended, a held output keeps small windows and still reads every byte from the store", () =>
    Effect.gen(function*() {
      const store = storeOf(bytes)
      const output = outputOf(store.read, 256 * 1024)
      output.ended()
      assert.strictEqual(output.stdout.total, bytes.length)
      assert.strictEqual(output.stdout.retained, ENDED_WINDOW.headBytes + ENDED_WINDOW.tailBytes)
      // An inline result within the windows is answered without the store.
      const inline = yield* output.read("stdout", { cursor: 0, maxBytes: 24 * 1024, mode: "inline" })
      assert.isTrue(inline.text.startsWith(text.slice(0, 12 * 1024)))
      assert.isTrue(inline.text.endsWith(text.slice(-12 * 1024)))
      const lines = yield* output.read("stdout", { lines: 3, maxBytes: 24 * 1024, mode: "lines" })
      assert.strictEqual(lines.text, text.split("\n").slice(-4).join("\n"))
      assert.deepStrictEqual(store.reads, [], "no read of the store")
      // The middle the windows gave up comes from the store, exactly.
      const middle = yield* output.read("stdout", { cursor: 70_000, maxBytes: 700, mode: "range" })
      assert.strictEqual(middle.text, text.slice(70_000, 70_700))
      assert.strictEqual(middle.next, 70_700)
      assert.isAbove(store.reads.length, 0)
    }))
  it.effect("once ended, an output that only the logs hold keeps all of them", () =>
    Effect.gen(function*() {
      const output = outputOf(undefined, 256 * 1024)
      const before = output.stdout.retained
      output.ended()
      assert.strictEqual(output.stdout.retained, before)
      const middle = yield* output.read("stdout", { cursor: 70_000, maxBytes: 700, mode: "range" })
      assert.strictEqual(middle.text, text.slice(70_000, 70_700))
    }))
})
