// The cost of tracing on the spawn round trip (`node bench/run.mjs spawn`'s measure: `spawn` of
// `true` over stdio MCP on the host sandbox), side by side in one invocation: a server without
// tracing and one exporting every span with --otel-endpoint to an OTLP sink in this process,
// their calls interleaved so both see the same machine. Run after `npm run build`.
//   node bench/traces.mjs [--rounds N] [--bin PATH]
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { mkdtempSync, readFileSync } from "node:fs"
import { createServer } from "node:http"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const argv = process.argv.slice(2)
const option = (name, fallback) => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : fallback)
const bin = option("--bin", join(root, "dist", "bin", "kilntainers.mjs"))
const rounds = Number(option("--rounds", "300"))

const percentile = (values, p) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor((p / 100) * values.length))]
const ms = (n) => `${n.toFixed(3)} ms`

// The sink: counts the spans it is sent (OTLP JSON), answers at once as a collector would.
let spans = 0
let requests = 0
const sink = createServer((request, response) => {
  let body = ""
  request.on("data", (chunk) => (body += chunk))
  request.on("end", () => {
    requests++
    for (const resource of JSON.parse(body).resourceSpans ?? []) {
      for (const scope of resource.scopeSpans ?? []) spans += (scope.spans ?? []).length
    }
    response.writeHead(200, { "content-type": "application/json" }).end("{}")
  })
})
await new Promise((resolve) => sink.listen(0, "127.0.0.1", resolve))
const endpoint = `http://127.0.0.1:${sink.address().port}`

const connect = async (extra) => {
  const stateDir = mkdtempSync(join(tmpdir(), "kt-bench-"))
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [bin, "--backend", "host", "--state-dir", stateDir, "--log-level", "error", ...extra],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" },
    stderr: "inherit"
  })
  const client = new Client({ name: "bench-traces", version: "1" })
  await client.connect(transport)
  client.pid = transport.pid
  return client
}

// CPU time a server has used (user + system), ms: on a busy machine a steadier measure than latency.
const ticks = Number(process.env.CLK_TCK ?? 100)
const cpuMs = (pid) => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticks
}

const plain = await connect([])
const traced = await connect(["--otel-endpoint", endpoint])
const spawnTrue = async (client, meta) => {
  const start = process.hrtime.bigint()
  const result = await client.request(
    { method: "tools/call", params: { name: "spawn", arguments: { command: "true" }, ...(meta ? { _meta: meta } : {}) } },
    CallToolResultSchema
  )
  const elapsed = Number(process.hrtime.bigint() - start) / 1e6
  if (result.isError || result.structuredContent?.exitCode !== 0) throw new Error(`spawn failed: ${JSON.stringify(result)}`)
  return elapsed
}
// A client that traces its own calls sends a traceparent; the server continues that trace.
const traceparent = () => {
  const hex = (n) => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join("")
  return { traceparent: `00-${hex(32)}-${hex(16)}-01` }
}

for (let i = 0; i < 30; i++) {
  await spawnTrue(plain)
  await spawnTrue(traced, traceparent())
}
const without = []
const withTraces = []
const cpuBefore = { plain: cpuMs(plain.pid), traced: cpuMs(traced.pid) }
for (let i = 0; i < rounds; i++) {
  if (i % 2 === 0) {
    without.push(await spawnTrue(plain))
    withTraces.push(await spawnTrue(traced, traceparent()))
  } else {
    withTraces.push(await spawnTrue(traced, traceparent()))
    without.push(await spawnTrue(plain))
  }
}
const cpu = { plain: cpuMs(plain.pid) - cpuBefore.plain, traced: cpuMs(traced.pid) - cpuBefore.traced }
await plain.close()
await traced.close()
// The traced server flushes what is left when it exits.
await new Promise((resolve) => setTimeout(resolve, 1_000))
sink.close()

console.log(`spawn of \`true\` over stdio MCP on the host sandbox, ${rounds} rounds each, interleaved`)
console.log(`  without tracing:            p50 ${ms(percentile(without, 50))}  p90 ${ms(percentile(without, 90))}  p99 ${ms(percentile(without, 99))}`)
console.log(`  --otel-endpoint (local sink): p50 ${ms(percentile(withTraces, 50))}  p90 ${ms(percentile(withTraces, 90))}  p99 ${ms(percentile(withTraces, 99))}`)
console.log(`  overhead p50 ${(percentile(withTraces, 50) - percentile(without, 50)).toFixed(3)} ms (${((percentile(withTraces, 50) / percentile(without, 50) - 1) * 100).toFixed(1)} %)`)
console.log(`  server CPU per call: ${(cpu.plain / rounds).toFixed(2)} ms without, ${(cpu.traced / rounds).toFixed(2)} ms traced (+${((cpu.traced - cpu.plain) / rounds).toFixed(2)} ms, exporting included)`)
console.log(`  the sink received ${spans} spans in ${requests} requests (${(spans / (rounds + 30)).toFixed(1)} per call)`)
