import { assert, describe, it } from "@effect/vitest"
import { MarkerScanner } from "../../../../src/layers/backends/modal/WrapperOutput.js"

const text = (chunks: ReadonlyArray<Uint8Array>) => chunks.map((c) => Buffer.from(c).toString("latin1")).join("")

describe("the end marker", () => {
  it("is found across chunks; only a possible marker prefix is held back", () => {
    const scanner = new MarkerScanner("n1")
    const first = scanner.push(Buffer.from("name? "))
    assert.strictEqual(text(first.before), "name? ")
    const second = scanner.push(Buffer.from("abc\0KT"))
    assert.strictEqual(text(second.before), "abc")
    assert.isUndefined(scanner.push(Buffer.from("Xn1:4")).code)
    const last = scanner.push(Buffer.from("2\0after"))
    assert.strictEqual(last.code, 42)
    assert.strictEqual(text(last.after), "after")
    assert.strictEqual(text(scanner.push(Buffer.from("more")).after), "more")
  })

  it("another nonce's marker is output, and a held tail is flushed at the end", () => {
    const scanner = new MarkerScanner("mine")
    const other = scanner.push(Buffer.from("\0KTXtheirs:1\0x\0K"))
    assert.isUndefined(other.code)
    assert.strictEqual(text(other.before), "\0KTXtheirs:1\0x")
    assert.strictEqual(text(scanner.flush()), "\0K")
  })
})
