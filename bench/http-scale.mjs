// Throughput of one HTTP server under many concurrent clients (issue 22), side by side in one run
// with the floor: bare `bash -c echo` spawns from this process at the same concurrency.
//   N sessions at once, each with its own computer, each running `--calls` one-shot `echo`s
//   (sandbox_exec) one after another; calls/s over the whole run, p50/p99 per call, failures, and
//   the server's peak RSS (VmHWM, from /proc). Then the same N concurrent loops of bash spawns.
//
//   node bench/http-scale.mjs [--backend host|docker] [--sessions 50] [--calls 20]
//     [--protocol 2025|2026] [--image IMAGE] [--bin dist/bin/kilntainers.mjs] [--cpu-prof DIR]
// --cpu-prof DIR starts the server under `node --cpu-prof`, writing DIR/*.cpuprofile when it exits.
// Targets (issue 22): host ≥ 0.5× the bare rate, docker ≥ 0.35×, no failures, server RSS ≤ 200 MiB.
import { Client as LegacyClient } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as LegacyHttp } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { spawn } from "node:child_process"
import { mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const args = process.argv.slice(2)
const option = (name, fallback) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback)
const backend = option("--backend", "host")
const sessions = Number(option("--sessions", "50"))
const calls = Number(option("--calls", "20"))
const protocol = option("--protocol", "2025")
const bin = option("--bin", join(root, "dist", "bin", "kilntainers.mjs"))
const image = option("--image", backend === "docker" ? "kilntainers-test:bookworm" : undefined)
const cpuProf = option("--cpu-prof", undefined)

const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}
const since = (start) => Number(process.hrtime.bigint() - start) / 1e6
const memory = (pid, field) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]) / 1024

const startServer = () =>
  new Promise((resolve, reject) => {
    const stateDir = mkdtempSync(join(tmpdir(), "kt-http-scale-"))
    const server = spawn(process.execPath, [
      ...(cpuProf ? ["--cpu-prof", "--cpu-prof-dir", cpuProf] : []),
      bin, "--transport", "http", "--port", "0", "--backend", backend, "--state-dir", stateDir,
      "--max-sessions", String(Math.max(100, sessions)),
      ...(image === undefined ? [] : ["--image", image])
    ], {
      stdio: ["ignore", "ignore", "pipe"],
      env: {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        HOME: process.env.HOME ?? "/root",
        // KT_HEAP_REPORT=<file>: the server's heap after a full GC, with every session still open.
        ...(process.env.KT_HEAP_REPORT
          ? { KT_HEAP_REPORT: process.env.KT_HEAP_REPORT, NODE_OPTIONS: process.env.KT_NODE_OPTIONS ?? `--expose-gc --import ${join(root, "bench", "support", "heap-report.mjs")}` }
          : {}),
        // KT_HEAP_SNAPSHOT=<file> (with KT_HEAP_REPORT): a V8 heap snapshot of the server there, too.
        ...(process.env.KT_HEAP_SNAPSHOT ? { KT_HEAP_SNAPSHOT: process.env.KT_HEAP_SNAPSHOT } : {})
      }
    })
    let log = ""
    server.stderr.on("data", (chunk) => {
      log += chunk
      const match = /MCP over HTTP at http:\/\/[^:]+:(\d+)\/mcp/.exec(log)
      if (match) resolve({ server, url: `http://127.0.0.1:${match[1]}/mcp`, log: () => log })
    })
    server.on("exit", (code) => reject(new Error(`server exited ${code}: ${log}`)))
    setTimeout(() => reject(new Error(`server did not start: ${log}`)), 60_000)
  })

const connect = async (url, i) => {
  if (protocol === "2026") {
    const client = new Client({ name: "http-scale", version: "1" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } })
    await client.connect(new StreamableHTTPClientTransport(new URL(url)))
    // Each client its own session (and computer), as a 2025 client gets by connecting.
    return { client, meta: { "kilntainers/session": `bench-${i}` } }
  }
  const client = new LegacyClient({ name: "http-scale", version: "1" })
  await client.connect(new LegacyHttp(new URL(url)))
  return { client, meta: undefined }
}

async function runServer() {
  const { server, url, log } = await startServer()
  const before = memory(server.pid, "VmRSS")
  const latencies = []
  let failures = 0
  const clients = await Promise.all(Array.from({ length: sessions }, (_, i) => connect(url, i))).catch((error) => {
    console.error(`connecting failed (server ${server.exitCode === null ? "running" : `exited ${server.exitCode}`}): ${error?.cause?.message ?? error}\n${log().slice(-2000)}`)
    server.kill("SIGTERM")
    process.exit(1)
  })
  // Each session's computer exists before the clock starts: the run measures calls, not creation.
  await Promise.all(clients.map(({ client, meta }) =>
    // Fifty containers at once can take longer than the SDK's 60 s default.
    client.callTool({ name: "sandbox_exec", arguments: { command: "true" }, ...(meta ? { _meta: meta } : {}) }, undefined, { timeout: 600_000 })))
  const start = process.hrtime.bigint()
  await Promise.all(clients.map(async ({ client, meta }, i) => {
    for (let n = 0; n < calls; n++) {
      const began = process.hrtime.bigint()
      try {
        const result = await client.callTool({ name: "sandbox_exec", arguments: { command: `echo s${i}-${n}` }, ...(meta ? { _meta: meta } : {}) })
        if (result.isError || result.structuredContent?.stdout !== `s${i}-${n}\n`) failures++
      } catch {
        failures++
      }
      latencies.push(since(began))
    }
  }))
  const elapsed = since(start)
  const peak = memory(server.pid, "VmHWM")
  if (process.env.KT_HEAP_REPORT) {
    server.kill("SIGUSR2")
    await new Promise((resolve) => setTimeout(resolve, 2000))
    const { before, rollup, spaces, after } = JSON.parse(readFileSync(process.env.KT_HEAP_REPORT, "utf8"))
    const mib = (object) => JSON.stringify(Object.fromEntries(Object.entries(object).map(([k, v]) => [k, Math.round(v / 1024 / 1024)])))
    console.log(`  at the end, every session open: ${mib(before)} MiB`)
    console.log(`  resident by kind: ${mib(rollup)} MiB`)
    console.log(`  V8 spaces (size/used MiB): ${Object.entries(spaces).map(([name, { size, used }]) => `${name} ${Math.round(size / 1048576)}/${Math.round(used / 1048576)}`).join(", ")}`)
    console.log(`  after a full GC: ${mib(after)} MiB`)
  }
  await Promise.all(clients.map(({ client }) => client.close().catch(() => undefined)))
  server.kill("SIGTERM")
  await new Promise((resolve) => server.on("exit", resolve))
  return { rate: (sessions * calls) / (elapsed / 1000), latencies, failures, before, peak }
}

const bashEcho = (i, n) =>
  new Promise((resolve, reject) => {
    const child = spawn("bash", ["-c", `echo s${i}-${n}`], { stdio: ["ignore", "pipe", "pipe"] })
    let out = ""
    child.stdout.on("data", (chunk) => (out += chunk))
    child.on("error", reject)
    child.on("close", (code) => (code === 0 && out === `s${i}-${n}\n` ? resolve() : reject(new Error(`bash: ${code} ${out}`))))
  })

async function runBare() {
  const start = process.hrtime.bigint()
  await Promise.all(Array.from({ length: sessions }, async (_, i) => {
    for (let n = 0; n < calls; n++) await bashEcho(i, n)
  }))
  return (sessions * calls) / (since(start) / 1000)
}

// Bare first and last around the server run, so a change in the machine's load shows.
const bareBefore = await runBare()
const served = await runServer()
const bareAfter = await runBare()
const bare = (bareBefore + bareAfter) / 2
console.log(`${sessions} concurrent ${protocol === "2026" ? "2026-07-28" : "2025-era"} HTTP sessions on ${backend}, ${calls} one-shot echo calls each`)
console.log(`  kilntainers: ${served.rate.toFixed(1)} calls/s  p50 ${percentile(served.latencies, 50).toFixed(1)} ms  p99 ${percentile(served.latencies, 99).toFixed(1)} ms  failures ${served.failures}`)
console.log(`  server RSS ${served.before.toFixed(0)} MiB at start, peak ${served.peak.toFixed(0)} MiB (target ≤ 200)`)
console.log(`  bare bash -c echo from Node at the same concurrency: ${bareBefore.toFixed(1)} and ${bareAfter.toFixed(1)} spawns/s (before, after)`)
console.log(`  ratio ${(served.rate / bare).toFixed(2)} (target ≥ ${backend === "docker" ? "0.35" : "0.5"})`)
process.exit(0)
