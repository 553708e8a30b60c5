// Server memory per idle computer (issue 12's target: ≤ 0.5 MiB of server heap each): one server
// (the built CLI over stdio MCP) with N computers created, each used once (`true`) and then left
// idle, against the same server with none, on the host backend or a cloud backend's fake.
//   npx vite-node bench/idle-memory.ts [host|e2b|modal|fly] [N]      (default: host 200; after npm run build)
// Heap is read after a full GC through bench/support/heap-report.mjs, preloaded into the server.
// The fakes run in this process, not the server's. Fly's fake enforces Fly's rate limit (1 create/s).
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { startServer } from "../test/support/McpHarness.js"

const here = dirname(fileURLToPath(import.meta.url))
const backend = process.argv[2] ?? "host"
const count = Number(process.argv[3] ?? 200)
const scratch = mkdtempSync(join(tmpdir(), "kt-idle-memory-"))
const report = join(scratch, "heap.json")
const measured = { NODE_OPTIONS: `--expose-gc --import ${pathToFileURL(join(here, "support", "heap-report.mjs")).href}`, KT_HEAP_REPORT: report }

const fly = backend === "fly" ? await (await import("../test/support/FlyFake.js")).startFlyFake({ token: "bench-token", app: "kt-bench" }) : undefined
const E2BFake = backend === "e2b" ? await import("../test/support/E2BFake.js") : undefined
const e2b = await E2BFake?.start()
const modal = backend === "modal" ? await (await import("../test/support/ModalFake.js")).start() : undefined
const server = backend === "host"
  ? await startServer(["--backend", "host", "--log-level", "warning"], measured)
  : backend === "fly"
  ? await startServer(["--backend", "fly", "--fly-app", "kt-bench", "--fly-api-url", fly!.url, "--log-level", "warning"], { ...measured, FLY_API_TOKEN: "bench-token" })
  : backend === "modal"
  ? await startServer(["--backend", "modal", "--modal-app-name", "kt-bench", "--log-level", "warning"], {
    ...measured,
    MODAL_TOKEN_ID: modal!.tokenId,
    MODAL_TOKEN_SECRET: modal!.tokenSecret,
    MODAL_SERVER_URL: modal!.url
  })
  : await startServer(["--backend", "e2b", "--e2b-api-url", e2b!.url, "--e2b-sandbox-url", e2b!.url, "--e2b-home", E2BFake!.FAKE_HOME, "--log-level", "warning"], { ...measured, E2B_API_KEY: e2b!.apiKey })

const MiB = 1024 ** 2
const memory = async (): Promise<{ heapUsed: number; rss: number; external: number; arrayBuffers: number }> => {
  rmSync(report, { force: true })
  process.kill(server.pid!, "SIGUSR2")
  for (let i = 0; i < 200; i++) {
    await new Promise((resolve) => setTimeout(resolve, 50))
    try {
      return JSON.parse(readFileSync(report, "utf8"))
    } catch { /* not written yet */ }
  }
  throw new Error("the server wrote no heap report")
}
const use = async (id: string) => {
  const created = await server.call("computer_create", { computer_id: id })
  if (created.isError) throw new Error(`computer_create ${id}: ${created.text}`)
  const ran = await server.call("sandbox_exec", { computer_id: id, command: "true" })
  if (ran.isError) throw new Error(`sandbox_exec ${id}: ${ran.text}`)
}

// Warm: every code path of a computer's life has run once.
await use("warm")
await server.call("computer_delete", { computer_id: "warm" })
await new Promise((resolve) => setTimeout(resolve, 1000))
const before = await memory()
const started = performance.now()
// Ten at a time: creation is not what is measured here.
for (let i = 0; i < count; i += 10) {
  await Promise.all(Array.from({ length: Math.min(10, count - i) }, (_, j) => use(`idle-${i + j}`)))
}
const seconds = (performance.now() - started) / 1000
await new Promise((resolve) => setTimeout(resolve, 2000))
const after = await memory()
const listed = await server.call("computer_list", {})
const per = (key: "heapUsed" | "rss" | "external" | "arrayBuffers") => (after[key] - before[key]) / count / MiB
console.log(`${count} idle computers on ${backend}${backend === "host" ? "" : " (fake)"}, created and used once in ${seconds.toFixed(1)} s; server memory after a full GC`)
console.log(`  heap used: ${(before.heapUsed / MiB).toFixed(1)} MiB with none → ${(after.heapUsed / MiB).toFixed(1)} MiB: ${per("heapUsed").toFixed(3)} MiB per computer (target ≤ 0.5)`)
console.log(`  external + array buffers: ${per("external").toFixed(3)} + ${per("arrayBuffers").toFixed(3)} MiB per computer`)
console.log(`  RSS: ${(before.rss / MiB).toFixed(1)} → ${(after.rss / MiB).toFixed(1)} MiB: ${per("rss").toFixed(3)} MiB per computer`)
console.log(`  computer_list: ${JSON.stringify(listed.structured)?.length ?? 0} bytes`)
await server.client.close()
await fly?.close()
await e2b?.close()
await modal?.close()
rmSync(scratch, { recursive: true, force: true })
process.exit(0)
