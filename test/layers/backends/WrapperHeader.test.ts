import { assert, describe, it } from "@effect/vitest"
import { WrapperHeaderDecoder } from "../../../src/layers/backends/WrapperHeader.js"

const bytes = (text: string) => Buffer.from(text, "utf8")
const text = (data: Uint8Array) => Buffer.from(data).toString("utf8")

describe("the wrapper's header", () => {
  it("waits for the whole line, then gives the pid and the bytes after it (Docker: no terminal field)", () => {
    const decoder = new WrapperHeaderDecoder()
    assert.deepStrictEqual(decoder.push(bytes("KT12")), { _tag: "Pending" })
    const result = decoder.push(bytes("3\nhello"))
    assert.strictEqual(result._tag, "Started")
    if (result._tag !== "Started") return
    assert.strictEqual(result.pid, 123)
    assert.isUndefined(result.tty)
    assert.strictEqual(text(result.rest), "hello")
  })

  it("reads Modal's terminal field, where '-' means pipes, and a terminal's \\r\\n", () => {
    const tty = new WrapperHeaderDecoder().push(bytes("KT7 /dev/pts/4\r\nprompt$ "))
    assert.deepStrictEqual(tty._tag === "Started" ? [tty.pid, tty.tty, text(tty.rest)] : [], [7, "/dev/pts/4", "prompt$ "])
    const pipes = new WrapperHeaderDecoder().push(bytes("KT8 -\n"))
    assert.deepStrictEqual(pipes._tag === "Started" ? [pipes.pid, pipes.tty, pipes.rest.length] : [], [8, undefined, 0])
  })

  it("KTE is a reason not to start", () => {
    assert.deepStrictEqual(new WrapperHeaderDecoder().push(bytes("KTE'nope': command not found (PATH=/bin)\n")), {
      _tag: "Failed",
      reason: "'nope': command not found (PATH=/bin)"
    })
  })

  it("skips lines that are not ours, also several in one chunk, and keeps them for the error", () => {
    const decoder = new WrapperHeaderDecoder()
    const result = decoder.push(bytes("motd line one\nmotd line two\nKT9\nout"))
    assert.deepStrictEqual(result._tag === "Started" ? [result.pid, text(result.rest)] : [], [9, "out"])
    const failed = new WrapperHeaderDecoder()
    assert.strictEqual(failed.push(bytes("OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd\n"))._tag, "Pending")
    assert.strictEqual(failed.push(bytes("partial"))._tag, "Pending")
    assert.strictEqual(failed.leftover(), "OCI runtime exec failed: exec failed: unable to start container process: chdir to cwd\npartial")
  })

  it("a header split at every byte is still found", () => {
    const decoder = new WrapperHeaderDecoder()
    const input = bytes("KT4242\nrest")
    let result = decoder.push(input.subarray(0, 1))
    for (let i = 1; i < input.length && result._tag === "Pending"; i++) result = decoder.push(input.subarray(i, i + 1))
    assert.deepStrictEqual(result._tag === "Started" ? result.pid : undefined, 4242)
  })

  it("KT followed by anything but digits is not a header", () => {
    const decoder = new WrapperHeaderDecoder()
    assert.strictEqual(decoder.push(bytes("KTX12\nKT12x\n"))._tag, "Pending")
    assert.strictEqual(decoder.leftover(), "KTX12\nKT12x")
  })

  it("keeps what is not a header bounded, however much arrives", () => {
    const long = new WrapperHeaderDecoder()
    for (let i = 0; i < 100; i++) assert.strictEqual(long.push(Buffer.alloc(10_000, 0x61))._tag, "Pending")
    assert.isAtMost(long.leftover().length, 4096)
    const lines = new WrapperHeaderDecoder()
    for (let i = 0; i < 1000; i++) lines.push(bytes("noise noise noise noise\n"))
    assert.isAtMost(lines.leftover().length, 4096)
    // Still finds the header after the noise.
    assert.strictEqual(lines.push(bytes("KT5\n"))._tag, "Started")
  })
})
