import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { existsSync } from "node:fs"
import { connect } from "node:net"
import { afterAll, assert, beforeAll, it } from "vitest"
import { largestFileWriteAsBase64, maxMessageBytes } from "../../src/layers/mcp/Limits.js"
import { maxFileBytes } from "../../src/layers/FileTransfer.js"
import { binPath, type Harness, startHttpServer, startServer, waitFor } from "../support/McpHarness.js"
import { postMcp } from "../support/RawHttp.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const mib = 1024 * 1024
const sixteenMiB = Buffer.alloc(maxFileBytes, 7).toString("base64")

it("the message limit holds file_write's largest content as base64, with room for the rest", () => {
  assert.strictEqual(maxMessageBytes, 32 * mib)
  assert.strictEqual(sixteenMiB.length, largestFileWriteAsBase64)
  assert.isBelow(largestFileWriteAsBase64 + 64 * 1024, maxMessageBytes)
})

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("a message over the size limit over stdio", () => {
  let server: Harness

  beforeAll(async () => {
    server = await startServer(["--backend", "host"])
  })
  afterAll(async () => {
    await server?.client.close().catch(() => undefined)
  })

  const call = (name: string, args: Record<string, unknown>) =>
    server.client.request({ method: "tools/call", params: { name, arguments: args } }, CallToolResultSchema, { timeout: 120_000 })

  it("is answered with an error for its id; the server, its computer and its files live on", async () => {
    const before = await server.call("sandbox_exec", { command: "echo kept > kept.txt; hostname" })
    const huge = call("file_write", { path: "huge.txt", content: "x".repeat(40 * mib) })
    const refusal = await huge.then(() => "accepted", (error: unknown) => String(error))
    assert.match(refusal, /-32600.*message of 40 MiB is over the 32 MiB limit of one MCP message/)
    // A notification has no id to answer: it is skipped with a line on stderr.
    await server.transport.send({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 1, reason: "z".repeat(33 * mib) } })
    assert.isTrue(await waitFor(() => /skipped a message without a readable id/.test(server.stderr()), 10_000))
    const after = await server.call("sandbox_exec", { command: "cat kept.txt; hostname" })
    assert.strictEqual(after.structured.stdout, `kept\n${before.structured.stdout}`)
    assert.strictEqual(after.structured.computer_id, before.structured.computer_id)
  }, 120_000)

  it("carries file_write's documented maximum, 16 MiB, as base64, and 12 MiB of text (over the SDK's 10 MiB)", async () => {
    const written = await call("file_write", { path: "max.bin", content: sixteenMiB, encoding: "base64" })
    assert.isFalse(written.isError === true, JSON.stringify(written.content))
    assert.strictEqual((written.structuredContent as { bytes: number }).bytes, maxFileBytes)
    const text = await call("file_write", { path: "text.txt", content: "t".repeat(12 * mib) })
    assert.strictEqual((text.structuredContent as { bytes: number }).bytes, 12 * mib)
    const sizes = await server.call("sandbox_exec", { command: "wc -c < max.bin; wc -c < text.txt" })
    assert.strictEqual(sizes.structured.stdout, `${maxFileBytes}\n${12 * mib}\n`)
  }, 120_000)
})

const rawPost = (port: number, headers: Record<string, string>, body: Buffer) => postMcp(port, headers, (req) => req.end(body))

/**
 * A body sent in 1 MiB chunks, without Content-Length (the limit shows only while reading) or with
 * one: either way the client is still writing when the 413 comes.
 */
const chunkedPost = (port: number, headers: Record<string, string>, mebibytes: number) =>
  postMcp(port, headers, (req) => {
    const chunk = Buffer.alloc(mib, 32)
    let sent = 0
    const pump = () => {
      while (sent < mebibytes) {
        sent++
        if (!req.write(chunk)) return void req.once("drain", pump)
      }
      req.end()
    }
    pump()
  })

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("the same limit over HTTP", () => {
  it("refuses a body over 32 MiB with 413, declared or chunked, and carries the 16 MiB file_write", async () => {
    const server = await startHttpServer(["--backend", "host"])
    try {
      const client = new Client({ name: "size", version: "1" })
      const transport = new StreamableHTTPClientTransport(new URL(server.url))
      await client.connect(transport)
      const written = await client.callTool({ name: "file_write", arguments: { path: "max.bin", content: sixteenMiB, encoding: "base64" } }, undefined, {
        timeout: 120_000
      })
      assert.strictEqual((written.structuredContent as { bytes: number }).bytes, maxFileBytes)
      const tooLarge = await rawPost(server.port, { "mcp-session-id": transport.sessionId!, "mcp-protocol-version": "2025-06-18" }, Buffer.alloc(33 * mib, 32))
      assert.strictEqual(tooLarge.status, 413)
      assert.match(tooLarge.body, /request body over 33554432 bytes/)
      const chunked = await chunkedPost(server.port, { "mcp-session-id": transport.sessionId!, "mcp-protocol-version": "2025-06-18" }, 200)
      assert.strictEqual(chunked.status, 413)
      // A client still writing the refused body reads the 413, never a reset connection (EPIPE):
      // the server reads and drops the rest before it closes (a lingering close). Without it, 4 of
      // 10 of these failed here.
      for (let i = 0; i < 8; i++) {
        const declared = await chunkedPost(server.port, { "content-length": String(200 * mib) }, 200)
        assert.strictEqual(declared.status, 413)
      }
      const still = await client.callTool({ name: "sandbox_exec", arguments: { command: "wc -c < max.bin" } })
      assert.strictEqual((still.structuredContent as { stdout: string }).stdout, `${maxFileBytes}\n`)
      await client.close()
    } finally {
      await server.stop()
    }
  }, 120_000)

  it("cuts off a client that goes on sending after the 413, within the linger's 5 s, and serves others meanwhile", async () => {
    const server = await startHttpServer(["--backend", "host"])
    try {
      // A raw socket that declares 1 GiB and sends 64 KiB every 10 ms for at most 30 s, also after
      // the server has ended its side.
      const socket = connect({ port: server.port, host: "127.0.0.1", allowHalfOpen: true })
      await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject))
      socket.on("error", () => {})
      socket.write(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n" +
          `accept: application/json, text/event-stream\r\ncontent-length: ${1024 * mib}\r\n\r\n`
      )
      let answer = ""
      socket.on("data", (chunk: Buffer) => (answer += chunk.toString("latin1")))
      const chunk = Buffer.alloc(64 * 1024, 32)
      const started = Date.now()
      let refusedAt: number | undefined
      const closed = new Promise<number>((resolve) => socket.once("close", () => resolve(Date.now())))
      const pump = setInterval(() => {
        if (refusedAt === undefined && answer.startsWith("HTTP/1.1 413")) refusedAt = Date.now()
        if (Date.now() - started > 30_000) socket.destroy()
        else if (!socket.destroyed) socket.write(chunk)
      }, 10)
      // Meanwhile the server answers others.
      const health = await fetch(`${server.url.replace(/\/mcp$/, "")}/healthz`)
      assert.strictEqual(health.status, 200)
      const end = await closed
      clearInterval(pump)
      assert.match(answer, /^HTTP\/1\.1 413/)
      assert.isDefined(refusedAt)
      const lingered = end - refusedAt!
      assert.isBelow(lingered, 10_000, `the socket closed ${lingered} ms after the 413`)
      assert.isAbove(end - started, 2_000, "the rest was read for a while (a lingering close), not reset at once")
    } finally {
      await server.stop()
    }
  }, 60_000)
})
