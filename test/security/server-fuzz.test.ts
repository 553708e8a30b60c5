import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { existsSync, rmSync } from "node:fs"
import { assert, describe, it } from "vitest"
import { connectInProcess } from "../support/InProcessMcp.js"
import { binPath, processesWith, startServer, waitFor } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"
import { type FuzzCall, generator } from "../support/ToolFuzz.js"

type Request = (call: FuzzCall) => Promise<{ isError?: boolean | undefined; content: Array<unknown>; structuredContent?: unknown }>

/** Strings that become C strings (argv, env, paths, ids, patterns): a NUL in any of them is refused. */
const cStringFields = ["command", "cwd", "working_directory", "path", "computer_id", "pattern", "id", "signal", "mode"]

const hasNul = (value: unknown) => typeof value === "string" && value.includes("\u0000")

const mustBeRefused = (call: FuzzCall): string | undefined => {
  const args = call.arguments
  if (typeof args !== "object" || args === null || Array.isArray(args)) return "non-object arguments"
  const record = args as Record<string, unknown>
  for (const field of cStringFields) if (hasNul(record[field])) return `NUL in ${field}`
  if (Array.isArray(record.args) && record.args.some(hasNul)) return "NUL in args"
  if (typeof record.env === "object" && record.env !== null && !Array.isArray(record.env)) {
    for (const [key, value] of Object.entries(record.env)) {
      if (key === "" || key.includes("=") || hasNul(key)) return `bad env name ${JSON.stringify(key)}`
      if (hasNul(value)) return "NUL in an env value"
    }
  }
  return undefined
}

const describeCall = (call: FuzzCall) => JSON.stringify(call).slice(0, 300)

/** Runs `count` generated calls; every answer must be a well-formed result, never a protocol error or a crash. */
const fuzz = async (tools: ReadonlyArray<{ name: string; inputSchema: unknown }>, request: Request, seed: number, count: number) => {
  const calls = generator(tools, seed)
  const problems: Array<string> = []
  let ok = 0
  let refused = 0
  for (let i = 0; i < count && problems.length < 5; i++) {
    const call = calls.next()
    const result = await request(call).catch((error: unknown) => {
      problems.push(`protocol error ${String(error)} for ${describeCall(call)}`)
      return undefined
    })
    if (result === undefined) continue
    const text = result.content.map((c) => (c as { text?: string }).text ?? "").join("")
    if (result.isError) {
      refused++
      if (/^internal error/.test(text)) problems.push(`crash: ${text.slice(0, 300)} for ${describeCall(call)}`)
    } else {
      ok++
      if (typeof result.structuredContent !== "object" || result.structuredContent === null) {
        problems.push(`a success without structured content for ${describeCall(call)}`)
      }
      calls.remember(result.structuredContent)
    }
    const reason = mustBeRefused(call)
    if (reason !== undefined && !result.isError && byName(tools, call.name)) {
      problems.push(`accepted despite ${reason}: ${describeCall(call)}`)
    }
  }
  return { ok, refused, problems }
}

const byName = (tools: ReadonlyArray<{ name: string }>, name: string) => tools.some((tool) => tool.name === name)

describe("fuzzing every tool's input", () => {
  it("answers 3,000 generated calls in process, each with a well-formed result, and keeps answering", async () => {
    const mcp = await connectInProcess()
    try {
      const { tools } = await mcp.client.listTools()
      const { ok, problems, refused } = await fuzz(tools, (call) => mcp.request(call.name, call.arguments), 20_261_201, 3_000)
      assert.deepStrictEqual(problems, [])
      assert.isAbove(ok, 300, "enough calls got through validation to reach the services")
      assert.isAbove(refused, 300, "enough calls were refused")
      assert.isFalse((await mcp.call("ps", {})).isError)
      assert.isAbove((await mcp.client.listTools()).tools.length, 10)
    } finally {
      await mcp.close()
    }
  }, 180_000)
})

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("fuzzing the built server over stdio", () => {
  it("answers 400 generated calls against real sandboxes, and the server stays up", async () => {
    const server = await startServer(["--backend", "host", "--spawn-timeout-ms", "200", "--max-timeout-ms", "1000", "--timeout", "5"])
    try {
      const { tools } = await server.client.listTools()
      const request: Request = (call) =>
        server.client.request({ method: "tools/call", params: { name: call.name, arguments: call.arguments as never } }, CallToolResultSchema, {
          timeout: 30_000
        })
      const { ok, problems, refused } = await fuzz(tools, request, 424_242, 400)
      assert.deepStrictEqual(problems, [])
      assert.isAbove(ok, 40)
      assert.isAbove(refused, 40)
      const alive = await server.call("sandbox_exec", { command: "echo still-here" })
      assert.strictEqual(alive.structured.stdout, "still-here\n")
      assert.notMatch(server.stderr(), /internal error|Error: |defect/i)
    } finally {
      await server.client.close()
      await waitFor(() => processesWith(server.stateDir).then((pids) => pids.length === 0), 10_000)
      rmSync(server.stateDir, { recursive: true, force: true })
    }
  }, 300_000)
})
