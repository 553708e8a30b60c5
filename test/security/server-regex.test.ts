import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { existsSync } from "node:fs"
import { assert, it } from "vitest"
import { binPath, startHttpServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const connect = async (url: string) => {
  const client = new Client({ name: "regex-attack", version: "1" })
  await client.connect(new StreamableHTTPClientTransport(new URL(url)))
  const call = async (name: string, args: Record<string, unknown>) => {
    const result = await client.callTool({ name, arguments: args }, undefined, { timeout: 60_000 })
    return { isError: result.isError === true, structured: result.structuredContent as any, text: JSON.stringify(result.content) }
  }
  return { client, call }
}

const evil = "^(a+)+$"
const aLine = `${"a".repeat(32)}!`

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("a catastrophic wait pattern", () => {
  it("cannot stall another session, and still matches what it should", async () => {
    const server = await startHttpServer(["--backend", "host"])
    try {
      const attacker = await connect(server.url)
      const bystander = await connect(server.url)
      await bystander.call("ps", {})
      // The reported attack: 32 a's and a '!' against ^(a+)+$, which backtracks 2^32 ways.
      const line = await attacker.call("spawn", { command: `printf '${aLine}\\n'; sleep 30`, background: true })
      // And a flood: thousands of such lines, arriving in many chunks, against (a+)+b.
      const flood = await attacker.call("spawn", {
        command: `for i in $(seq 1 3000); do echo '${aLine}'; done; sleep 30`,
        background: true
      })
      const attacks = Promise.all([
        attacker.call("wait", { id: line.structured.pid, pattern: evil, timeoutMs: 4_000 }),
        attacker.call("wait", { id: flood.structured.pid, pattern: "(a+)+b", timeoutMs: 4_000 })
      ])
      const latencies: Array<number> = []
      for (let i = 0; i < 8; i++) {
        const start = performance.now()
        const ps = await bystander.call("ps", {})
        latencies.push(performance.now() - start)
        assert.isFalse(ps.isError)
        await new Promise((resolve) => setTimeout(resolve, 250))
      }
      for (const attacked of await attacks) {
        assert.isFalse(attacked.isError, attacked.text)
        assert.strictEqual(attacked.structured.outcome, "timeout", attacked.text)
      }
      assert.isBelow(Math.max(...latencies), 1_000, `ps latencies while attacked: ${latencies.map(Math.round).join(", ")} ms`)

      // The same pattern still finds a line that is all a's, arriving after the attack line.
      const late = await attacker.call("spawn", {
        command: `printf '${aLine}\\n'; sleep 0.5; printf 'aaaa\\n'; sleep 30`,
        background: true
      })
      const matched = await attacker.call("wait", { id: late.structured.pid, pattern: evil, timeoutMs: 20_000 })
      assert.strictEqual(matched.structured.outcome, "matched", matched.text)
      assert.strictEqual(matched.structured.match, "aaaa")

      const refused = await attacker.call("wait", { id: late.structured.pid, pattern: "(a)\\1", timeoutMs: 1_000 })
      assert.isTrue(refused.isError)
      assert.match(refused.text, /backreferences/)
      await attacker.client.close()
      await bystander.client.close()
    } finally {
      await server.stop()
    }
  }, 120_000)
})
