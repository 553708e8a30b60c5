import { assert, describe, it } from "@effect/vitest"
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js"
import { PassThrough, Writable } from "node:stream"
import { RequestIdScanner } from "../../../src/layers/mcp/RequestIdScanner.js"
import { StdioTransport } from "../../../src/layers/mcp/StdioTransport.js"

const open = async (maxMessageBytes = 1024) => {
  const stdin = new PassThrough()
  const stdout = new PassThrough()
  const received: Array<JSONRPCMessage> = []
  const warnings: Array<string> = []
  let written = ""
  stdout.on("data", (chunk: Buffer) => (written += chunk.toString()))
  const transport = new StdioTransport(stdin, stdout, { maxMessageBytes, warn: (m) => warnings.push(m) })
  transport.onmessage = (message) => received.push(message)
  await transport.start()
  const settle = () => new Promise((resolve) => setImmediate(resolve))
  const replies = () => written.split("\n").filter((line) => line !== "").map((line) => JSON.parse(line))
  return { stdin, transport, received, warnings, replies, settle }
}

const request = (id: number, params: unknown = {}) => JSON.stringify({ jsonrpc: "2.0", id, method: "tools/list", params })

const idOf = (json: string) => {
  const scanner = new RequestIdScanner()
  for (let i = 0; i < json.length; i += 7) scanner.feed(Buffer.from(json.slice(i, i + 7)))
  return scanner.id()
}

describe("RequestIdScanner", () => {
  it("reads the top-level id wherever it stands, never a nested one", () => {
    assert.strictEqual(idOf(`{"jsonrpc":"2.0","id":7,"method":"x"}`), 7)
    assert.strictEqual(idOf(`{"params":{"id":99,"list":[{"id":1}],"s":"\\"id\\":5"},"id" : "abc\\"d" ,"method":"x"}`), "abc\"d")
    assert.strictEqual(idOf(`{"jsonrpc":"2.0","method":"notifications/x","params":{"id":3}}`), undefined)
    assert.strictEqual(idOf(`{"id":{"nested":1}}`), undefined)
    assert.strictEqual(idOf(`{"id":12`), undefined)
  })
})

describe("StdioTransport", () => {
  it("delivers messages however the bytes are split, with LF or CR LF", async () => {
    const { received, settle, stdin } = await open()
    const text = `${request(1)}\n${request(2)}\r\n\n${request(3)}\n`
    for (const char of text) stdin.write(char)
    await settle()
    assert.deepStrictEqual(received.map((m) => (m as { id: number }).id), [1, 2, 3])
  })

  it("answers an oversize request with an error for its id, then keeps serving", async () => {
    const { received, replies, settle, stdin, warnings } = await open(1024)
    const huge = JSON.stringify({ jsonrpc: "2.0", method: "tools/call", params: { content: "x".repeat(50_000) }, id: 41 })
    for (let i = 0; i < huge.length; i += 4096) stdin.write(huge.slice(i, i + 4096))
    stdin.write(`\n${request(42)}\n`)
    await settle()
    const [refusal] = replies()
    assert.strictEqual(refusal.id, 41)
    assert.strictEqual(refusal.error.code, -32600)
    assert.match(refusal.error.message, /^message of 50\d{3} bytes is over the 1024 bytes limit of one MCP message/)
    assert.deepStrictEqual(received.map((m) => (m as { id: number }).id), [42])
    assert.strictEqual(warnings.length, 1)
  })

  it("skips an oversize message without an id with a warning only", async () => {
    const { received, replies, settle, stdin, warnings } = await open(1024)
    stdin.write(`{"jsonrpc":"2.0","method":"notifications/x","params":{"a":"${"y".repeat(5000)}"}}\n${request(5)}\n`)
    await settle()
    assert.deepStrictEqual(replies(), [])
    assert.match(warnings[0]!, /without a readable id/)
    assert.deepStrictEqual(received.map((m) => (m as { id: number }).id), [5])
  })

  it("answers a line that is not JSON, or not JSON-RPC, and goes on", async () => {
    const { received, replies, settle, stdin } = await open()
    stdin.write(`{not json\n{"id":9,"hello":1}\n${request(10)}\n`)
    await settle()
    const [parse, invalid] = replies()
    assert.deepStrictEqual([parse.id, parse.error.code], [null, -32700])
    assert.deepStrictEqual([invalid.id, invalid.error.code], [9, -32600])
    assert.deepStrictEqual(received.map((m) => (m as { id: number }).id), [10])
  })

  it("a stdout that breaks (the client closed its end) fails the sends, and nothing is thrown", async () => {
    const stdin = new PassThrough()
    // A pipe whose reader is gone: each write fails with EPIPE, as process.stdout does then.
    const stdout = new Writable({
      highWaterMark: 1,
      write: (_chunk, _encoding, done) => done(Object.assign(new Error("write EPIPE"), { code: "EPIPE" }))
    })
    const errors: Array<string> = []
    const transport = new StdioTransport(stdin, stdout, { maxMessageBytes: 1024, warn: () => {} })
    transport.onerror = (error) => errors.push(error.message)
    await transport.start()
    const first = await transport.send({ jsonrpc: "2.0", id: 1, result: {} }).then(() => "sent", (error: Error) => error.message)
    const second = await transport.send({ jsonrpc: "2.0", id: 2, result: {} }).then(() => "sent", (error: Error) => error.message)
    assert.strictEqual(first, "write EPIPE")
    assert.strictEqual(second, "write EPIPE")
    assert.deepStrictEqual(errors, ["write EPIPE"])
    await transport.close()
  })
})
