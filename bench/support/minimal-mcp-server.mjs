// The startup baseline of bench/cli-startup.mjs: the smallest useful MCP server on the same SDK,
// over stdio, with one tool (`echo`). Not part of kilntainers.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js"
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js"
import * as z from "zod/v4"

const server = new McpServer({ name: "minimal", version: "1.0.0" })
server.registerTool(
  "echo",
  { description: "Echoes its text", inputSchema: { text: z.string() } },
  async ({ text }) => ({ content: [{ type: "text", text }] })
)
await server.connect(new StdioServerTransport())
