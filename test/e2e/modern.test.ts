/**
 * MCP 2026-07-28 end to end, through the v2 SDK's Client: stateless requests over HTTP, each
 * carrying its protocol version in `_meta`, with kilntainers' sessions made of the principal and a
 * client-chosen key; and the same revision over stdio. Clients of the 2025 revisions keep working
 * beside them (test/e2e/http.test.ts and stdio.test.ts run the v1 SDK's Client).
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio"
import { Client as LegacyClient } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as LegacyHttpTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { existsSync, mkdtempSync, readdirSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, assert, beforeAll, it } from "vitest"
import { sessionKeyMeta as sessionKey } from "../../src/layers/mcp/SessionLeases.js"
import { binPath, type HttpServerProcess, startHttpServer, waitFor } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const token = "modern-test-token_0123456789"
const bobToken = "modern-test-bob_9876543210"

const modernClient = async (url: string, bearer: string) => {
  const client = new Client({ name: "modern-e2e", version: "1" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } })
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${bearer}` } } }))
  return client
}

interface Structured {
  readonly [key: string]: any
}

const call = async (client: Client, name: string, args: Record<string, unknown>, key?: string) => {
  const result = await client.callTool({ name, arguments: args, ...(key === undefined ? {} : { _meta: { [sessionKey]: key } }) })
  const text = (result.content as Array<{ type: string; text?: string }>).map((c) => c.text ?? "").join("")
  return { isError: result.isError === true, text, structured: result.structuredContent as Structured }
}

/** The host backend's computers of a server: its workspace directories. */
const workspaces = (server: HttpServerProcess) => {
  const dir = join(server.stateDir, "computers")
  return existsSync(dir) ? readdirSync(dir) : []
}

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("MCP 2026-07-28 over HTTP", () => {
  let server: HttpServerProcess

  beforeAll(async () => {
    server = await startHttpServer(["--backend", "host", "--auth-principal", "bob=BOB_TOKEN", "--session-timeout", "2"], {
      KILNTAINERS_AUTH_TOKEN: token,
      BOB_TOKEN: bobToken
    })
  })
  afterAll(async () => {
    await server?.stop()
  })

  it("serves a stateless client: tools/list, then calls whose session is the principal and the client's key", async () => {
    const first = await modernClient(server.url, token)
    assert.strictEqual(first.getNegotiatedProtocolVersion(), "2026-07-28")
    const tools = await first.listTools()
    assert.includeMembers(tools.tools.map((tool) => tool.name), ["sandbox_exec", "spawn", "wait", "computer_list"])
    const made = await call(first, "sandbox_exec", { command: "echo hi > note.txt; hostname" }, "build-7")
    assert.isFalse(made.isError, made.text)
    const computer = made.structured.computer_id as string
    assert.strictEqual(made.structured.stdout, `${computer}\n`)
    await first.close()

    // Another connection (another replica would do as well) with the same key: the same default computer.
    const second = await modernClient(server.url, token)
    const again = await call(second, "sandbox_exec", { command: "cat note.txt; hostname" }, "build-7")
    assert.strictEqual(again.structured.stdout, `hi\n${computer}\n`)
    // Another key: another session, with a default computer of its own that cannot see the first.
    const other = await call(second, "sandbox_exec", { command: "hostname" }, "review-2")
    assert.notStrictEqual(other.structured.computer_id, computer)
    const listed = await call(second, "computer_list", {}, "review-2")
    assert.notInclude(listed.structured.computers.map((c: { computer_id: string }) => c.computer_id), computer)
    await second.close()

    // Another principal with the same key is another session too, and is refused the computer.
    const bob = await modernClient(server.url, bobToken)
    const refused = await call(bob, "sandbox_exec", { command: "cat note.txt", computer_id: computer }, "build-7")
    assert.isTrue(refused.isError)
    assert.match(refused.text, /not found|not yours|another session|AccessDenied|ComputerNotFound/)
    const own = await call(bob, "sandbox_exec", { command: "hostname" }, "build-7")
    assert.notStrictEqual(own.structured.computer_id, computer)
    await bob.close()
  }, 120_000)

  it("refuses a session key it cannot use, with a result the agent can read", async () => {
    const client = await modernClient(server.url, token)
    const refused = await call(client, "sandbox_exec", { command: "true" }, "no spaces/or slashes")
    assert.isTrue(refused.isError)
    assert.match(refused.text, /^InvalidInput: _meta\["kilntainers\/session"\] must be 1-128 letters/)
    await client.close()
  }, 60_000)

  it("ends a session idle for the timeout, and its temporary computer with it", async () => {
    const client = await modernClient(server.url, token)
    const made = await call(client, "sandbox_exec", { command: "hostname" }, "short-lived")
    const computer = made.structured.computer_id as string
    assert.include(workspaces(server), computer)
    await client.close()
    assert.isTrue(await waitFor(() => !workspaces(server).includes(computer), 20_000), `${computer} is removed once idle`)
  }, 60_000)

  it("serves a 2025 client beside it, each with its own sessions", async () => {
    const legacy = new LegacyClient({ name: "legacy-beside", version: "1" })
    const transport = new LegacyHttpTransport(new URL(server.url), { requestInit: { headers: { authorization: `Bearer ${token}` } } })
    await legacy.connect(transport)
    assert.isString(transport.sessionId)
    const old = await legacy.callTool({ name: "sandbox_exec", arguments: { command: "hostname" } })
    const modern = await modernClient(server.url, token)
    const now = await call(modern, "sandbox_exec", { command: "hostname" })
    assert.notStrictEqual((old.structuredContent as Structured).computer_id, now.structured.computer_id)
    await legacy.close()
    await modern.close()
  }, 60_000)
})

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("MCP 2026-07-28 over stdio", () => {
  it("negotiates the revision on stdio and serves the connection as one session", async () => {
    const stateDir = mkdtempSync(join(tmpdir(), "kt-modern-"))
    const client = new Client({ name: "modern-stdio", version: "1" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } })
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [binPath, "--backend", "host", "--state-dir", stateDir],
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" },
        stderr: "ignore"
      })
    )
    try {
      assert.strictEqual(client.getNegotiatedProtocolVersion(), "2026-07-28")
      const first = await call(client, "sandbox_exec", { command: "echo kept > k; hostname" })
      const second = await call(client, "sandbox_exec", { command: "cat k; hostname" })
      assert.strictEqual(second.structured.stdout, `kept\n${first.structured.computer_id}\n`)
    } finally {
      await client.close()
    }
  }, 60_000)
})
