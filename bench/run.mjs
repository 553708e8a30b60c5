// Benchmarks of the process runtime, each run side by side with its baseline in one invocation
// (these machines are noisy: the ratios mean something, absolute times less).
//   npm run bench            all
//   node bench/run.mjs spawn  only the spawn round trip
//   node bench/run.mjs output only the output throughput
//   node bench/run.mjs http   spawn round trip over HTTP vs stdio
//   node bench/run.mjs docker exec round trip on a warm Docker computer vs Engine API exec and the CLI
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { spawn } from "node:child_process"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const bin = join(root, "dist", "bin", "kilntainers.mjs")
const which = process.argv[2] ?? "all"

const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}
const ms = (n) => `${n.toFixed(3)} ms`

const bareSpawn = () =>
  new Promise((resolve, reject) => {
    const start = process.hrtime.bigint()
    const child = spawn("true", [], { stdio: ["ignore", "pipe", "pipe"] })
    child.on("error", reject)
    child.on("close", () => resolve(Number(process.hrtime.bigint() - start) / 1e6))
  })

async function benchSpawn(rounds = 300) {
  const stateDir = mkdtempSync(join(tmpdir(), "kt-bench-"))
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [bin, "--backend", "host", "--state-dir", stateDir, "--log-level", "error"],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" },
    stderr: "inherit"
  })
  const client = new Client({ name: "bench", version: "1" })
  await client.connect(transport)
  const viaMcp = async () => {
    const start = process.hrtime.bigint()
    const result = await client.callTool({ name: "spawn", arguments: { command: "true" } })
    const elapsed = Number(process.hrtime.bigint() - start) / 1e6
    if (result.isError || result.structuredContent?.exitCode !== 0) throw new Error(`spawn failed: ${JSON.stringify(result)}`)
    return elapsed
  }
  for (let i = 0; i < 30; i++) {
    await viaMcp()
    await bareSpawn()
  }
  const mcp = []
  const bare = []
  for (let i = 0; i < rounds; i++) {
    // interleaved, so both see the same machine
    mcp.push(await viaMcp())
    bare.push(await bareSpawn())
  }
  await client.close()
  const p50 = percentile(mcp, 50) / percentile(bare, 50)
  console.log(`spawn of \`true\`, ${rounds} rounds each`)
  console.log(`  kilntainers (stdio MCP, host sandbox): p50 ${ms(percentile(mcp, 50))}  p99 ${ms(percentile(mcp, 99))}`)
  console.log(`  bare child_process.spawn:              p50 ${ms(percentile(bare, 50))}  p99 ${ms(percentile(bare, 99))}`)
  console.log(`  ratio p50 ${p50.toFixed(2)} (target <= 2.0)  p99 ${(percentile(mcp, 99) / percentile(bare, 99)).toFixed(2)}`)
  return { p50 }
}

const timeShell = (script) =>
  new Promise((resolve, reject) => {
    const start = process.hrtime.bigint()
    const child = spawn("sh", ["-c", script], { stdio: "ignore" })
    child.on("error", reject)
    child.on("close", (code) => code === 0 ? resolve(Number(process.hrtime.bigint() - start) / 1e6) : reject(new Error(`exit ${code}`)))
  })

async function benchOutput(bytes = 1024 ** 3, rounds = 3) {
  // Only the modules it needs (the library's index loads every backend).
  const built = (path) => import(join(root, "dist", "src", path))
  const HostBackend = await built("layers/backends/host/HostBackend.js")
  const Runtime = await built("layers/Runtime.js")
  const { Processes } = await built("services/Processes.js")
  const { Settings } = await built("services/Settings.js")
  const stateDir = mkdtempSync(join(tmpdir(), "kt-bench-"))
  const layer = Runtime.layer(Settings.make({ stateDir }), HostBackend.layer({ stateDir, network: false, sandbox: "bwrap" }))
  const command = `head -c ${bytes} /dev/zero`
  const results = await Effect.runPromise(
    Effect.gen(function*() {
      const processes = yield* Processes
      yield* processes.exec("bench", { command: "true" }) // warm: the computer exists
      const runs = []
      for (let i = 0; i < rounds; i++) {
        const baseline = yield* Effect.promise(() => timeShell(`${command} | cat > /dev/null`))
        global.gc?.()
        const rssBefore = process.memoryUsage().rss
        let peak = rssBefore
        const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10)
        const start = process.hrtime.bigint()
        const result = yield* processes.spawn("bench", { command, timeoutMs: 60_000 })
        const elapsed = Number(process.hrtime.bigint() - start) / 1e6
        clearInterval(sampler)
        // Cut output: `next` is the cursor after the tail, i.e. every byte the process wrote.
        if (result.next?.stdout !== bytes) throw new Error(`got ${result.next?.stdout} bytes`)
        runs.push({ runtime: elapsed, baseline, growth: (peak - rssBefore) / 1024 ** 2 })
      }
      return runs
    }).pipe(Effect.provide(layer))
  )
  const best = (key) => Math.min(...results.map((r) => r[key]))
  const ratio = best("runtime") / best("baseline")
  const growth = Math.max(...results.map((r) => r.growth))
  console.log(`output throughput: ${(bytes / 1024 ** 3).toFixed(2)} GiB from \`head -c\`, best of ${rounds}`)
  console.log(`  kilntainers runtime (host sandbox, drained to OutputLog): ${ms(best("runtime"))}  (${(bytes / 1e6 / (best("runtime") / 1000)).toFixed(0)} MB/s)`)
  console.log(`  baseline \`head -c | cat > /dev/null\`:                     ${ms(best("baseline"))}  (${(bytes / 1e6 / (best("baseline") / 1000)).toFixed(0)} MB/s)`)
  console.log(`  ratio ${ratio.toFixed(2)} (target <= 3.0)  server RSS growth ${growth.toFixed(1)} MiB (target <= 64)`)
  return { ratio, growth }
}

async function benchHttp(rounds = 300) {
  const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js")
  const stateDir = mkdtempSync(join(tmpdir(), "kt-bench-"))
  const server = spawn(process.execPath, [bin, "--backend", "host", "--transport", "http", "--port", "0", "--state-dir", stateDir], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" }
  })
  const port = await new Promise((resolve) => {
    let log = ""
    server.stderr.on("data", (chunk) => {
      log += chunk
      const match = /MCP over HTTP at http:\/\/[^:]+:(\d+)\/mcp/.exec(log)
      if (match) resolve(Number(match[1]))
    })
  })
  const http = new Client({ name: "bench-http", version: "1" })
  await http.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`)))
  const stdio = new Client({ name: "bench-stdio", version: "1" })
  await stdio.connect(new StdioClientTransport({
    command: process.execPath,
    args: [bin, "--backend", "host", "--state-dir", stateDir, "--log-level", "error"],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" },
    stderr: "inherit"
  }))
  const call = async (client) => {
    const start = process.hrtime.bigint()
    const result = await client.callTool({ name: "spawn", arguments: { command: "true" } })
    if (result.isError || result.structuredContent?.exitCode !== 0) throw new Error(`spawn failed: ${JSON.stringify(result)}`)
    return Number(process.hrtime.bigint() - start) / 1e6
  }
  for (let i = 0; i < 30; i++) {
    await call(http)
    await call(stdio)
  }
  const viaHttp = []
  const viaStdio = []
  for (let i = 0; i < rounds; i++) {
    viaHttp.push(await call(http))
    viaStdio.push(await call(stdio))
  }
  await http.close()
  await stdio.close()
  server.kill("SIGTERM")
  console.log(`spawn of \`true\` over Streamable HTTP vs stdio, ${rounds} rounds each`)
  console.log(`  HTTP:  p50 ${ms(percentile(viaHttp, 50))}  p99 ${ms(percentile(viaHttp, 99))}`)
  console.log(`  stdio: p50 ${ms(percentile(viaStdio, 50))}  p99 ${ms(percentile(viaStdio, 99))}`)
  console.log(`  ratio p50 ${(percentile(viaHttp, 50) / percentile(viaStdio, 50)).toFixed(2)} (target <= 1.5)  p99 ${(percentile(viaHttp, 99) / percentile(viaStdio, 99)).toFixed(2)}`)
}

async function benchDocker(rounds = 100) {
  const { default: Docker } = await import("dockerode")
  const { execFile } = await import("node:child_process")
  const stateDir = mkdtempSync(join(tmpdir(), "kt-bench-"))
  const client = new Client({ name: "bench-docker", version: "1" })
  await client.connect(new StdioClientTransport({
    command: process.execPath,
    args: [bin, "--backend", "docker", "--state-dir", stateDir, "--log-level", "error"],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" },
    stderr: "inherit"
  }))
  const viaMcp = async () => {
    const start = process.hrtime.bigint()
    const result = await client.callTool({ name: "spawn", arguments: { command: "true" } })
    if (result.isError || result.structuredContent?.exitCode !== 0) throw new Error(`spawn failed: ${JSON.stringify(result)}`)
    return Number(process.hrtime.bigint() - start) / 1e6
  }
  await viaMcp() // creates the session's computer: warm from here on
  const listed = await client.callTool({ name: "computer_list", arguments: {} })
  const containerId = listed.structuredContent.computers[0].sandbox_id
  const container = new Docker({ socketPath: "/var/run/docker.sock" }).getContainer(containerId)
  const bareExec = async () => {
    const start = process.hrtime.bigint()
    const exec = await container.exec({ Cmd: ["true"], AttachStdout: true, AttachStderr: true })
    const stream = await exec.start({ hijack: true, stdin: false })
    await new Promise((resolve) => { stream.on("end", resolve); stream.on("close", resolve); stream.resume() })
    const info = await exec.inspect()
    if (info.ExitCode !== 0) throw new Error("bare exec failed")
    return Number(process.hrtime.bigint() - start) / 1e6
  }
  const cliExec = () =>
    new Promise((resolve, reject) => {
      const start = process.hrtime.bigint()
      execFile("docker", ["exec", containerId, "true"], (error) => (error ? reject(error) : resolve(Number(process.hrtime.bigint() - start) / 1e6)))
    })
  for (let i = 0; i < 10; i++) {
    await viaMcp()
    await bareExec()
    await cliExec()
  }
  const mcp = []
  const bare = []
  const cli = []
  for (let i = 0; i < rounds; i++) {
    mcp.push(await viaMcp())
    bare.push(await bareExec())
    cli.push(await cliExec())
  }
  await client.close()
  console.log(`exec of \`true\` on a warm Docker computer, ${rounds} rounds each`)
  console.log(`  kilntainers spawn through stdio MCP: p50 ${ms(percentile(mcp, 50))}  p99 ${ms(percentile(mcp, 99))}`)
  console.log(`  bare Engine API exec (dockerode):    p50 ${ms(percentile(bare, 50))}  p99 ${ms(percentile(bare, 99))}`)
  console.log(`  docker exec CLI:                     p50 ${ms(percentile(cli, 50))}  p99 ${ms(percentile(cli, 99))}`)
  console.log(`  ratio vs bare exec p50 ${(percentile(mcp, 50) / percentile(bare, 50)).toFixed(2)} (target < 1)  vs CLI ${(percentile(mcp, 50) / percentile(cli, 50)).toFixed(2)}`)
}

if (which === "all" || which === "spawn") await benchSpawn()
if (which === "all" || which === "docker") await benchDocker()
if (which === "all" || which === "http") await benchHttp()
if (which === "all" || which === "output") await benchOutput()
process.exit(0)
