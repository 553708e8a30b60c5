// The MCP round trip of `spawn true` over stdio, side by side in one run (issue 12):
//   - bare child_process.spawn in this process (the floor),
//   - process-mcp (anonx3247/process-mcp), a peer on the same MCP SDK, host mode, unsandboxed,
//   - kilntainers on the host backend, sandboxed (bubblewrap + kt-agent),
//   - kilntainers with --unsafe-no-sandbox,
//   - kilntainers sandboxed, `true;`: a command that needs its shell (bash, the default --shell).
//     Plain words like `true` are exec'd by the agent itself (src/domain/SimpleCommand.ts); this row
//     shows what starting bash costs where a shell is needed.
// The contenders are called in turn, one call each per step, in an order that rotates every step,
// so all see the same machine; each round reports p50/p90/p99 per contender, and the CPU time each
// server process used per call (from /proc: the agent's and the commands' own CPU not included;
// process-mcp's includes its fork of the command).
// Targets: kilntainers sandboxed p50 ≤ process-mcp's p50 and ≤ 1.5× the bare spawn's p50 (issue 22),
// and its p90 ≤ 1.5× its own p50.
//
// process-mcp is a bench-only peer, built from source outside this repository and never a
// dependency. Build it once (any checkout of anonx3247/process-mcp works):
//   mkdir -p /tmp/peers/process-mcp && git --git-dir=<mirror>/repo archive HEAD | tar -x -C /tmp/peers/process-mcp
//   (or: git clone https://github.com/anonx3247/process-mcp /tmp/peers/process-mcp)
//   cd /tmp/peers/process-mcp && npm ci && npm run build
// Then, after `npm run build` here:
//   node bench/round-trip.mjs [--process-mcp DIR] [--calls N] [--rounds N] [--cpu-prof DIR] [--no-shell-row]
//     [--before BIN [--before-label TEXT]]   (another build's dist/bin/kilntainers.mjs, one more row)
// DIR defaults to $PROCESS_MCP_DIR; without either, process-mcp is left out (and said so).
// --cpu-prof DIR starts each server under `node --cpu-prof`, writing DIR/<server>/*.cpuprofile.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { spawn } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const bin = join(root, "dist", "bin", "kilntainers.mjs")
const args = process.argv.slice(2)
const option = (name, fallback) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback)
const calls = Number(option("--calls", "300"))
const rounds = Number(option("--rounds", "2"))
const warmup = Number(option("--warmup", "50"))
const peerDir = option("--process-mcp", process.env.PROCESS_MCP_DIR)
const cpuProf = option("--cpu-prof", undefined)

const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}
const elapsedSince = (start) => Number(process.hrtime.bigint() - start) / 1e6
const baseEnv = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" }
const scratch = mkdtempSync(join(tmpdir(), "kt-round-trip-"))

const bare = {
  name: "bare child_process.spawn",
  call: () =>
    new Promise((resolve, reject) => {
      const start = process.hrtime.bigint()
      const child = spawn("true", [], { stdio: ["ignore", "pipe", "pipe"] })
      child.on("error", reject)
      child.on("close", (code) => (code === 0 ? resolve(elapsedSince(start)) : reject(new Error(`exit ${code}`))))
    }),
  close: async () => {}
}

/** An MCP server over stdio, called through the SDK client; `ok` checks one `spawn true` result. */
const mcpContender = async (name, command, serverArgs, env, ok, cwd, spawned = "true") => {
  const transport = new StdioClientTransport({ command, args: serverArgs, env, stderr: "inherit", ...(cwd ? { cwd } : {}) })
  const client = new Client({ name: "bench-round-trip", version: "1" })
  await client.connect(transport)
  return {
    name,
    pid: transport.pid,
    call: async () => {
      const start = process.hrtime.bigint()
      const result = await client.callTool({ name: "spawn", arguments: { command: spawned } })
      const elapsed = elapsedSince(start)
      if (result.isError || !ok(result)) throw new Error(`${name}: spawn failed: ${JSON.stringify(result)}`)
      return elapsed
    },
    close: () => client.close()
  }
}

const nodeArgs = (profDir) => (profDir ? ["--cpu-prof", "--cpu-prof-dir", profDir] : [])
const kilntainers = (name, extra, profName, built = bin, spawned = "true") => {
  const stateDir = mkdtempSync(join(scratch, "state-"))
  return mcpContender(
    name,
    process.execPath,
    [...nodeArgs(cpuProf && join(cpuProf, profName)), built, "--backend", "host", "--state-dir", stateDir, "--log-level", "error", ...extra],
    baseEnv,
    (result) => result.structuredContent?.exitCode === 0,
    undefined,
    spawned
  )
}

const contenders = [bare]
if (peerDir && existsSync(join(peerDir, "dist", "index.js"))) {
  const cwd = mkdtempSync(join(scratch, "peer-"))
  // Its own library entry (dist/lib.js: loadConfig, createProcessMCP) with the `sandbox` option
  // unset: host mode without srt, as when srt is unavailable, minus srt's partial bwrap wrapping
  // that fails here without ripgrep. Otherwise what its dist/index.js does.
  const launcher = `
    import { StdioServerTransport } from ${JSON.stringify(join(peerDir, "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm", "server", "stdio.js"))}
    import { createProcessMCP, loadConfig } from ${JSON.stringify(join(peerDir, "dist", "lib.js"))}
    const config = { ...loadConfig(), sandbox: undefined }
    const { server } = await createProcessMCP(config)
    await server.connect(new StdioServerTransport())`
  contenders.push(await mcpContender(
    "process-mcp (host mode, unsandboxed)",
    process.execPath,
    [...nodeArgs(cpuProf && join(cpuProf, "process-mcp")), "--input-type=module", "-e", launcher],
    { ...baseEnv, PROCESS_MODE: "host", DEFAULT_WORKDIR: cwd },
    // process-mcp answers with text: JSON of { pid, status, exitCode, stdout, stderr }
    (result) => /"exitCode":\s*0/.test(result.content?.[0]?.text ?? ""),
    cwd
  ))
} else {
  console.log(`process-mcp left out: no build at ${peerDir ?? "(set PROCESS_MCP_DIR or --process-mcp DIR)"}; see this file's header to build it`)
}
contenders.push(await kilntainers("kilntainers, host sandbox", [], "sandbox"))
contenders.push(await kilntainers("kilntainers, --unsafe-no-sandbox", ["--unsafe-no-sandbox"], "no-sandbox"))
// Another build (an earlier revision), sandboxed, side by side: what a change did, in one run.
const before = option("--before", undefined)
if (before) contenders.push(await kilntainers(`kilntainers, host sandbox, ${option("--before-label", "before")}`, [], "before", before))
// A command with shell syntax runs under bash (the default --shell), which starts slower than
// process-mcp's /bin/sh (dash here): what the agent's direct exec of plain words saves.
if (!args.includes("--no-shell-row")) {
  contenders.push(await kilntainers("kilntainers, host sandbox, `true;` (bash)", [], "sandbox-bash", bin, "true;"))
}

const ms = (n) => n.toFixed(2).padStart(6)
/** CPU time (user + system) a server process has used, in ms; undefined where /proc is not there. */
const cpuMs = (pid) => {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS
  } catch {
    return undefined
  }
}
const CLOCK_TICKS = 100
const results = []
try {
  for (let i = 0; i < warmup; i++) for (const c of contenders) await c.call()
  for (let round = 1; round <= rounds; round++) {
    const times = contenders.map(() => [])
    const cpuBefore = contenders.map((c) => (c.pid === undefined ? undefined : cpuMs(c.pid)))
    for (let i = 0; i < calls; i++) {
      for (let k = 0; k < contenders.length; k++) {
        const j = (i + k) % contenders.length
        times[j].push(await contenders[j].call())
      }
    }
    results.push(times)
    console.log(`round ${round}: \`spawn true\` over stdio MCP, ${calls} calls each, interleaved; p50 (p90, p99) in ms; server CPU per call`)
    contenders.forEach((c, j) => {
      const after = c.pid === undefined ? undefined : cpuMs(c.pid)
      const cpu = after === undefined || cpuBefore[j] === undefined ? "" : `   CPU ${((after - cpuBefore[j]) / calls).toFixed(2)} ms`
      console.log(`  ${c.name.padEnd(44)} ${ms(percentile(times[j], 50))} (${ms(percentile(times[j], 90))}, ${ms(percentile(times[j], 99))})${cpu}`)
    })
  }
} finally {
  for (const c of contenders) await c.close().catch(() => {})
  rmSync(scratch, { recursive: true, force: true })
}

const index = (prefix) => contenders.findIndex((c) => c.name.startsWith(prefix))
const ours = index("kilntainers, host sandbox")
const peer = index("process-mcp")
let met = true
for (const [r, times] of results.entries()) {
  const p50 = percentile(times[ours], 50)
  const p90 = percentile(times[ours], 90)
  const tail = p90 / p50
  const vsBare = p50 / percentile(times[0], 50)
  const line = [`round ${r + 1}: ours p90/p50 ${tail.toFixed(2)} (target ≤ 1.5)`, `ours p50 / bare spawn p50 ${vsBare.toFixed(2)} (target ≤ 1.5)`]
  met &&= tail <= 1.5 && vsBare <= 1.5
  if (peer >= 0) {
    const vsPeer = p50 / percentile(times[peer], 50)
    line.push(`ours p50 / process-mcp p50 ${vsPeer.toFixed(2)} (target ≤ 1)`)
    met &&= vsPeer <= 1
  }
  console.log(line.join("; "))
}
console.log(met ? "targets met" : "targets NOT met")
process.exit(0)
