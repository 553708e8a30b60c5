// Startup of the built CLI over stdio: time from spawn to the tools/list answer, and the server's
// RSS right after it (issue 12's targets: ≤ 250 ms median, ≤ 80 MiB). Run after `npm run build`.
//   node bench/cli-startup.mjs [--runs N] [--bin PATH] [-- extra CLI flags]   (default flags: --backend host)
// --bin measures another build (an older revision, side by side in one session).
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
const runs = runsAt >= 0 ? Number(own[runsAt + 1]) : 15

const rssMiB = (pid) => {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"))
  return Number(line.replace(/\D+/g, "")) / 1024
}

const once = (stateDir) =>
  new Promise((resolve, reject) => {
    const start = process.hrtime.bigint()
    const child = spawn(process.execPath, [bin, "--state-dir", stateDir, "--log-level", "error", ...extra], {
      stdio: ["pipe", "pipe", "inherit"]
    })
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
const results = []
try {
  await once(stateDir) // warm the page cache
  for (let i = 0; i < runs; i++) results.push(await once(stateDir))
} finally {
  rmSync(stateDir, { recursive: true, force: true })
}
const times = results.map((r) => r.ms)
const rss = results.map((r) => r.rss)
console.log(`${bin} ${extra.join(" ")}; ${runs} runs`)
console.log(`spawn → tools/list: median ${median(times).toFixed(0)} ms, p90 ${p90(times).toFixed(0)} ms`)
console.log(`RSS after tools/list: median ${median(rss).toFixed(1)} MiB, max ${Math.max(...rss).toFixed(1)} MiB`)
