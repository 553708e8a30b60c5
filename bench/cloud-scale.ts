// Scale simulation against the provider fakes: N computers created, used and deleted concurrently
// through one kilntainers server (the built CLI over stdio MCP). Reports throughput, p50/p99 tool
// latency and the server's peak memory.  npx vite-node bench/cloud-scale.ts [fly|e2b|modal] [N]
// The Fly fake enforces Fly's documented rate limit: creating and listing machines are counted per
// app (1/s each, burst 3), so N computers take about N seconds to create however fast the rest is.
import { readFileSync } from "node:fs"
import { startServer } from "../test/support/McpHarness.js"

const backend = process.argv[2] ?? "fly"
const count = Number(process.argv[3] ?? 200)

const percentile = (values: Array<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}
const peakRss = (pid: number) => {
  const status = readFileSync(`/proc/${pid}/status`, "utf8")
  return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024
}

// Only the chosen provider's fake is loaded.
const fly = backend === "fly" ? await (await import("../test/support/FlyFake.js")).startFlyFake({ token: "bench-token", app: "kt-bench" }) : undefined
const E2BFake = backend === "e2b" ? await import("../test/support/E2BFake.js") : undefined
const e2b = await E2BFake?.start()
// Modal: the real SDK in the server reaches the gRPC fake through MODAL_SERVER_URL.
const modal = backend === "modal" ? await (await import("../test/support/ModalFake.js")).start() : undefined
const server = backend === "fly"
  ? await startServer(["--backend", "fly", "--fly-app", "kt-bench", "--fly-api-url", fly!.url, "--log-level", "warning"], { FLY_API_TOKEN: "bench-token" })
  : backend === "modal"
  ? await startServer(["--backend", "modal", "--modal-app-name", "kt-bench", "--log-level", "warning"], {
    MODAL_TOKEN_ID: modal!.tokenId,
    MODAL_TOKEN_SECRET: modal!.tokenSecret,
    MODAL_SERVER_URL: modal!.url
  })
  : await startServer(["--backend", "e2b", "--e2b-api-url", e2b!.url, "--e2b-sandbox-url", e2b!.url, "--e2b-home", E2BFake!.FAKE_HOME, "--log-level", "warning"], { E2B_API_KEY: e2b!.apiKey })

const latencies: Array<number> = []
let calls = 0
let failures = 0
const timed = async (name: string, args: Record<string, unknown>) => {
  const start = performance.now()
  const result = await server.call(name, args)
  latencies.push(performance.now() - start)
  calls++
  if (result.isError) failures++
  return result
}

const start = performance.now()
await Promise.all(Array.from({ length: count }, async (_, i) => {
  const id = `scale-${i}`
  await timed("computer_create", { computer_id: id })
  await timed("sandbox_exec", { computer_id: id, command: `echo computer-${i} > id.txt; cat id.txt` })
  await timed("file_read", { computer_id: id, path: "id.txt" })
  await timed("computer_delete", { computer_id: id })
}))
const seconds = (performance.now() - start) / 1000
const rss = peakRss(server.pid!)
await server.client.close()
await fly?.close()
await e2b?.close()
await modal?.close()
console.log(`${count} computers created, used and deleted concurrently on the ${backend} fake, through one server`)
console.log(`  ${calls} tool calls in ${seconds.toFixed(1)} s: ${(calls / seconds).toFixed(1)} calls/s, ${(count / seconds).toFixed(1)} computers/s, ${failures} failed`)
console.log(`  tool latency p50 ${percentile(latencies, 50).toFixed(0)} ms, p99 ${percentile(latencies, 99).toFixed(0)} ms`)
console.log(`  server peak RSS ${rss.toFixed(0)} MiB`)
if (fly) {
  const refused = fly.requests.filter((request) => request.status === 429).length
  const byAction = new Map<string, number>()
  for (const request of fly.requests) byAction.set(request.action, (byAction.get(request.action) ?? 0) + 1)
  console.log(`  fly fake at Fly's documented limit (1/s, burst 3 per action and machine or app): ${fly.requests.length} requests, ${refused} refused (429), ${fly.violations.length} contract violations`)
  console.log(`  requests by action: ${[...byAction].map(([action, n]) => `${action} ${n}`).join(", ")}`)
}
process.exit(failures === 0 ? 0 : 1)
