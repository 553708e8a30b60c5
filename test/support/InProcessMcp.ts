import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js"
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { Effect, ManagedRuntime } from "effect"
import { ready, serve, type ToolServices } from "../../src/layers/mcp/McpServer.js"
import * as Runtime from "../../src/layers/Runtime.js"
import { Settings, type SettingsShape } from "../../src/services/Settings.js"
import * as QuickBackend from "./QuickBackend.js"

/**
 * The MCP server in this process over the quick fake backend, with the SDK's Client connected
 * through its in-memory transport: the whole MCP surface, fast enough for thousands of calls.
 */
export const connectInProcess = async (overrides: Partial<SettingsShape> = {}) => {
  const settings = Settings.make({ spawnTimeoutMs: 50, maxTimeoutMs: 300, timeout: 1, killGraceMs: 50, ...overrides })
  const runtime = ManagedRuntime.make(Runtime.layer(settings, QuickBackend.layer))
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair()
  const session = runtime.runFork(
    Effect.flatMap(Effect.context<ToolServices>(), (context) => serve(settings, ready(context), serverSide, "in-process"))
  )
  const client = new Client({ name: "in-process", version: "1" })
  await client.connect(clientSide)
  const request = (name: string, args: unknown) =>
    client.request({ method: "tools/call", params: { name, arguments: args as never } }, CallToolResultSchema, { timeout: 20_000 })
  const call = async (name: string, args: unknown) => {
    const result = await request(name, args)
    const text = result.content.map((c) => (c.type === "text" ? c.text : "")).join("")
    return { isError: result.isError === true, text, structured: result.structuredContent as any }
  }
  const close = async () => {
    await client.close()
    await runtime.runPromise(session.interruptAsFork(session.id()))
    await runtime.dispose()
  }
  return { client, request, call, close }
}
