import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { assert, it } from "vitest"
import { existsSync, readdirSync } from "node:fs"
import { join } from "node:path"
import { binPath, processesWith, startHttpServer, waitFor } from "../support/McpHarness.js"
import { postJson } from "../support/RawHttp.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const connect = async (url: string, token?: string) => {
  const transport = new StreamableHTTPClientTransport(new URL(url), token ? { requestInit: { headers: { authorization: `Bearer ${token}` } } } : {})
  const client = new Client({ name: "kilntainers-http-test", version: "1.0.0" })
  await client.connect(transport)
  const call = async (name: string, args: Record<string, unknown>) => {
    const result = await client.callTool({ name, arguments: args })
    return { isError: result.isError === true, structured: result.structuredContent as any, text: JSON.stringify(result.content) }
  }
  /** A polite goodbye: DELETE the session, then close. */
  const close = async () => {
    await transport.terminateSession()
    await client.close()
  }
  return { client, transport, call, close }
}

const computersOnDisk = (stateDir: string) =>
  existsSync(join(stateDir, "computers")) ? readdirSync(join(stateDir, "computers")) : []

const initialize = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } }
}

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("MCP over Streamable HTTP", () => {
  it("rejects requests without the bearer token and accepts them with it", async () => {
    const server = await startHttpServer(["--backend", "host"], { KILNTAINERS_AUTH_TOKEN: "s3cret-token" })
    try {
      const denied = await postJson(server.port, {}, initialize)
      assert.strictEqual(denied.status, 401)
      assert.match(String(denied.headers["www-authenticate"]), /^Bearer/)
      const wrong = await postJson(server.port, { authorization: "Bearer nope" }, initialize)
      assert.strictEqual(wrong.status, 401)
      const rejected = await connect(server.url).then(() => "connected", () => "rejected")
      assert.strictEqual(rejected, "rejected")
      const { call, close } = await connect(server.url, "s3cret-token")
      const result = await call("sandbox_exec", { command: "echo over-http" })
      assert.strictEqual(result.structured.stdout, "over-http\n")
      await close()
      const health = await fetch(`http://127.0.0.1:${server.port}/healthz`)
      assert.strictEqual(health.status, 200)
      assert.strictEqual((await health.json()).status, "ok")
      assert.notInclude(server.stderr(), "s3cret-token")
    } finally {
      await server.stop()
    }
  })

  it("guards loopback against DNS rebinding (Host and Origin)", async () => {
    const server = await startHttpServer(["--backend", "host"])
    try {
      const badHost = await postJson(server.port, { host: "evil.example:8435" }, initialize)
      assert.strictEqual(badHost.status, 403)
      const badOrigin = await postJson(server.port, { origin: "http://evil.example" }, initialize)
      assert.strictEqual(badOrigin.status, 403)
      const ok = await postJson(server.port, { origin: `http://localhost:${server.port}` }, initialize)
      assert.strictEqual(ok.status, 200)
    } finally {
      await server.stop()
    }
  })

  it("refuses a non-loopback bind without a token, unless told", async () => {
    const { spawnSync } = await import("node:child_process")
    const refused = spawnSync(process.execPath, [binPath, "--transport", "http", "--host", "0.0.0.0", "--port", "0", "--backend", "host"], {
      encoding: "utf8",
      timeout: 20_000,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: "/tmp" }
    })
    assert.strictEqual(refused.status, 1)
    assert.match(refused.stderr, /--auth-token/)
    assert.strictEqual(refused.stdout, "")
  })

  it("gives two clients separate computers and keeps them apart", async () => {
    const server = await startHttpServer(["--backend", "host"])
    try {
      const one = await connect(server.url)
      const two = await connect(server.url)
      const a = await one.call("sandbox_exec", { command: "echo secret-one > note.txt; hostname" })
      const b = await two.call("sandbox_exec", { command: "ls; hostname" })
      assert.notStrictEqual(a.structured.computer_id, b.structured.computer_id)
      assert.notInclude(b.structured.stdout, "note.txt")
      const spawned = await one.call("spawn", { command: "sleep 60", background: true })
      const psTwo = await two.call("ps", {})
      assert.isFalse(psTwo.structured.processes.some((p: any) => p.pid === spawned.structured.pid))
      const steal = await two.call("kill", { id: spawned.structured.pid })
      assert.isTrue(steal.isError)
      const read = await two.call("file_read", { computer_id: a.structured.computer_id, path: "note.txt" })
      assert.isTrue(read.isError)
      const del = await two.call("computer_delete", { computer_id: a.structured.computer_id })
      assert.isTrue(del.isError)
      const list = await two.call("computer_list", {})
      assert.isFalse(list.structured.computers.some((c: any) => c.computer_id === a.structured.computer_id))
      // shared on request
      await one.call("computer_create", { computer_id: "http-shared", shared: true })
      const joined = await two.call("sandbox_exec", { computer_id: "http-shared", command: "echo joined" })
      assert.strictEqual(joined.structured.stdout, "joined\n")
      await one.close()
      await two.close()
    } finally {
      await server.stop()
    }
  })

  it("sends progress notifications and honours cancellation, as over stdio", async () => {
    const server = await startHttpServer(["--backend", "host"])
    try {
      const { client, call, close } = await connect(server.url)
      const progress: Array<unknown> = []
      const slow = await client.request(
        { method: "tools/call", params: { name: "spawn", arguments: { command: "sleep 2.5", timeoutMs: 5_000 } } },
        CallToolResultSchema,
        { onprogress: (p) => progress.push(p) }
      )
      assert.strictEqual((slow.structuredContent as any).status, "terminated")
      assert.isAtLeast(progress.length, 1)
      const bg = await call("spawn", { command: "sleep 30", background: true })
      const controller = new AbortController()
      const pending = client.request(
        { method: "tools/call", params: { name: "wait", arguments: { id: bg.structured.pid, timeoutMs: 30_000 } } },
        CallToolResultSchema,
        { signal: controller.signal }
      )
      setTimeout(() => controller.abort(), 300)
      assert.strictEqual(await pending.then(() => "resolved", () => "rejected"), "rejected")
      const running = await call("ps", { status: "running" })
      assert.isTrue(running.structured.processes.some((p: any) => p.pid === bg.structured.pid))
      await close()
    } finally {
      await server.stop()
    }
  }, 60_000)

  it("closes an idle session and removes its temporary computer, also for a client that vanished", async () => {
    const server = await startHttpServer(["--backend", "host", "--session-timeout", "2"])
    try {
      const polite = await connect(server.url)
      await polite.call("sandbox_exec", { command: "true" })
      // a client that disappears: initialize and use a session over raw HTTP, never DELETE it
      const init = await postJson(server.port, {}, initialize)
      const sessionId = String(init.headers["mcp-session-id"])
      await postJson(server.port, { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-06-18" }, { jsonrpc: "2.0", method: "notifications/initialized" })
      const used = await postJson(server.port, { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-06-18" }, {
        jsonrpc: "2.0",
        id: 2,
        method: "tools/call",
        params: { name: "sandbox_exec", arguments: { command: "echo vanished" } }
      })
      assert.include(used.body, "vanished")
      assert.strictEqual(computersOnDisk(server.stateDir).length, 2)
      assert.isTrue(await waitFor(() => computersOnDisk(server.stateDir).length === 0, 15_000), "both temporary computers removed")
      assert.deepStrictEqual(await (await fetch(`http://127.0.0.1:${server.port}/healthz`)).json(), { status: "ok" })
      assert.match(server.stderr(), new RegExp(`closing MCP session ${sessionId}: idle`))
      const expired = await postJson(server.port, { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-06-18" }, { jsonrpc: "2.0", id: 3, method: "tools/list" })
      assert.strictEqual(expired.status, 404)
      await polite.client.close().catch(() => undefined)
    } finally {
      await server.stop()
    }
  }, 60_000)

  it("a session whose call was cancelled is closed once idle like any other", async () => {
    const server = await startHttpServer(["--backend", "host", "--session-timeout", "2"])
    try {
      const { call, client } = await connect(server.url)
      const bg = await call("spawn", { command: "sleep 30", background: true })
      const controller = new AbortController()
      const pending = client.request(
        { method: "tools/call", params: { name: "wait", arguments: { id: bg.structured.pid, timeoutMs: 30_000 } } },
        CallToolResultSchema,
        { signal: controller.signal }
      )
      setTimeout(() => controller.abort(), 300)
      assert.strictEqual(await pending.then(() => "resolved", () => "rejected"), "rejected")
      assert.isTrue(await waitFor(() => /closing MCP session [0-9a-f-]+: idle/.test(server.stderr()), 15_000), server.stderr())
      assert.isTrue(await waitFor(() => computersOnDisk(server.stateDir).length === 0, 10_000))
      await client.close().catch(() => undefined)
    } finally {
      await server.stop()
    }
  }, 60_000)

  it("SIGTERM closes every session and removes every temporary computer and process", async () => {
    const server = await startHttpServer(["--backend", "host"])
    const marker = `kt-http-term-${process.pid}`
    const one = await connect(server.url)
    await one.call("spawn", { command: `sleep 309; : ${marker}`, background: true })
    const two = await connect(server.url)
    await two.call("spawn", { command: `sleep 310; : ${marker}`, background: true })
    assert.strictEqual(computersOnDisk(server.stateDir).length, 2)
    const code = await server.stop("SIGTERM")
    assert.strictEqual(code, 0)
    assert.deepStrictEqual(computersOnDisk(server.stateDir), [])
    assert.isTrue(await waitFor(async () => (await processesWith(marker)).length === 0, 5_000))
  }, 60_000)

  it("answers every call of 50 concurrent sessions and leaks nothing", async () => {
    const server = await startHttpServer(["--backend", "host", "--log-level", "debug"])
    try {
      const results = await Promise.all(Array.from({ length: 50 }, async (_, i) => {
        const { call, close } = await connect(server.url)
        const outputs: Array<string> = []
        for (let round = 0; round < 4; round++) {
          const exec = await call("sandbox_exec", { command: `echo s${i}-r${round}` })
          outputs.push(exec.structured.stdout)
          const bg = await call("spawn", { command: `sleep 0.2; echo bg${i}`, timeoutMs: 5_000 })
          outputs.push(bg.structured.stdout)
        }
        await close()
        return outputs
      }))
      results.forEach((outputs, i) => {
        assert.deepStrictEqual(outputs, [0, 1, 2, 3].flatMap((round) => [`s${i}-r${round}\n`, `bg${i}\n`]))
      })
      const ended = () => server.stderr().match(/MCP session [0-9a-f-]+ ended/g)?.length ?? 0
      assert.isTrue(await waitFor(() => ended() === 50 && computersOnDisk(server.stateDir).length === 0, 20_000), "no session and no computer left")
      const left = (await processesWith(server.stateDir)).filter((pid) => pid !== server.child.pid)
      assert.deepStrictEqual(left, [], "no sandbox left")
    } finally {
      await server.stop()
    }
  }, 180_000)
})
