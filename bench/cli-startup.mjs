// Startup of the built CLI over stdio: time from spawn to the tools/list answer, and the server's
// RSS right after it (issue 12's targets: ≤ 250 ms median of 10, ≤ 80 MiB), side by side with a
// minimal MCP SDK stdio server with one tool (bench/support/minimal-mcp-server.mjs) started the
// same way, runs interleaved. Run after `npm run build`.
//   node bench/cli-startup.mjs [--runs N] [--bin PATH] [-- extra CLI flags]   (default flags: --backend host)
// --bin measures another build (an older revision, side by side in one session); --before BIN adds
// another build as a third contender, interleaved with the other two (what a change did, in one run).
import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const argv = process.argv.slice(2)
const dash = argv.indexOf("--")
const own = dash >= 0 ? argv.slice(0, dash) : argv
const binAt = own.indexOf("--bin")
const bin = binAt >= 0 ? own[binAt + 1] : join(root, "dist", "bin", "kilntainers.mjs")
const extra = dash >= 0 ? argv.slice(dash + 1) : ["--backend", "host"]
const runsAt = own.indexOf("--runs")
const runs = runsAt >= 0 ? Number(own[runsAt + 1]) : 10
const beforeAt = own.indexOf("--before")
const beforeBin = beforeAt >= 0 ? own[beforeAt + 1] : undefined

const rssMiB = (pid) => {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"))
  return Number(line.replace(/\D+/g, "")) / 1024
}

const minimal = join(root, "bench", "support", "minimal-mcp-server.mjs")

const once = (args) =>
  new Promise((resolve, reject) => {
    const start = process.hrtime.bigint()
    const child = spawn(process.execPath, args, { stdio: ["pipe", "pipe", "inherit"] })
    let buffer = ""
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error("no tools/list answer within 20 s"))
    }, 20_000)
    child.stdout.on("data", (chunk) => {
      buffer += chunk
      if (!buffer.includes(`"id":2`)) return
      const ms = Number(process.hrtime.bigint() - start) / 1e6
      const rss = rssMiB(child.pid)
      clearTimeout(timer)
      child.on("close", () => resolve({ ms, rss }))
      child.stdin.end()
    })
    const send = (message) => child.stdin.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n")
    send({ id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "bench", version: "1" } } })
    send({ method: "notifications/initialized" })
    send({ id: 2, method: "tools/list" })
  })

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
const p90 = (values) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * 0.9))]

const stateDir = mkdtempSync(join(tmpdir(), "kt-startup-"))
const ours = [bin, "--state-dir", stateDir, "--log-level", "error", ...extra]
const before = beforeBin === undefined ? undefined : [beforeBin, ...ours.slice(1)]
const results = { ours: [], minimal: [], before: [] }
try {
  await once(ours) // warm the page cache
  await once([minimal])
  if (before) await once(before)
  for (let i = 0; i < runs; i++) {
    results.ours.push(await once(ours))
    results.minimal.push(await once([minimal]))
    if (before) results.before.push(await once(before))
  }
} finally {
  rmSync(stateDir, { recursive: true, force: true })
}
const summary = (rows) => ({ ms: median(rows.map((r) => r.ms)), p90: p90(rows.map((r) => r.ms)), rss: median(rows.map((r) => r.rss)), maxRss: Math.max(...rows.map((r) => r.rss)) })
const k = summary(results.ours)
const m = summary(results.minimal)
console.log(`spawn → tools/list over stdio, ${runs} runs each, interleaved; RSS right after the answer`)
console.log(`  kilntainers (${extra.join(" ")}): median ${k.ms.toFixed(0)} ms (p90 ${k.p90.toFixed(0)}), RSS median ${k.rss.toFixed(1)} MiB (max ${k.maxRss.toFixed(1)})`)
console.log(`  minimal MCP SDK server, one tool: median ${m.ms.toFixed(0)} ms (p90 ${m.p90.toFixed(0)}), RSS median ${m.rss.toFixed(1)} MiB (max ${m.maxRss.toFixed(1)})`)
if (before) {
  const b = summary(results.before)
  console.log(`  before (${beforeBin}): median ${b.ms.toFixed(0)} ms (p90 ${b.p90.toFixed(0)}), RSS median ${b.rss.toFixed(1)} MiB; ratio to the minimal server ${(b.ms / m.ms).toFixed(2)}, this build to it ${(k.ms / b.ms).toFixed(2)}`)
}
console.log(`  ratio: time ${(k.ms / m.ms).toFixed(2)}, RSS ${(k.rss / m.rss).toFixed(2)}; targets: ≤ 250 ms (${k.ms <= 250 ? "met" : "NOT met"}), ≤ 80 MiB (${k.rss <= 80 ? "met" : "NOT met"})`)
