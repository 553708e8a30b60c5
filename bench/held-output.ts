// Server memory per idle computer that holds a finished 10 MB output (issue 21's target: ≤ 0.5 MiB
// of server heap per computer): one server (the built CLI over stdio MCP) with N computers, in each
// of which `head -c 10000000 /dev/zero | tr '\0' a` was spawned and waited for to its end, then left
// idle; against the same server with none. The computer keeps the output on its own disk; the
// server should keep a small window per stream. One computer's middle is read back by cursor to show
// the bytes are there. Every process stays listed (--max-finished above N), so the server keeps a
// record of each. Heap is read after a full GC (bench/support/heap-report.mjs, preloaded).
//   npx vite-node bench/held-output.ts [host|docker] [N] [--snapshot]   (default: host 200; after npm run build)
// --snapshot also writes a V8 heap snapshot of the server at the end (SIGUSR1, into the scratch
// directory, whose path is printed and kept) for finding what stays per computer.
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { startServer } from "../test/support/McpHarness.js"

const here = dirname(fileURLToPath(import.meta.url))
const backend = process.argv[2] ?? "host"
const count = Number(process.argv[3] ?? 200)
const snapshot = process.argv.includes("--snapshot")
const SIZE = 10_000_000
const scratch = mkdtempSync(join(tmpdir(), "kt-held-output-"))
const report = join(scratch, "heap.json")
const measured = {
  NODE_OPTIONS: `--expose-gc --import ${pathToFileURL(join(here, "support", "heap-report.mjs")).href}${
    snapshot ? ` --heapsnapshot-signal=SIGUSR1 --diagnostic-dir=${scratch}` : ""
  }`,
  KT_HEAP_REPORT: report
}
const server = await startServer([
  "--backend",
  backend,
  "--log-level",
  "warning",
  // Every process stays listed (the default lists the last 100 finished): each is in the server.
  "--max-finished",
  String(count + 10),
  ...(backend === "docker" ? ["--image", "kilntainers-test:bookworm"] : [])
], measured)

const MiB = 1024 ** 2
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))
const memory = async (): Promise<{ heapUsed: number; rss: number; external: number; arrayBuffers: number }> => {
  rmSync(report, { force: true })
  process.kill(server.pid!, "SIGUSR2")
  for (let i = 0; i < 200; i++) {
    await pause(50)
    try {
      return JSON.parse(readFileSync(report, "utf8")).after
    } catch { /* not written yet */ }
  }
  throw new Error("the server wrote no heap report")
}
const hold = async (id: string): Promise<string> => {
  const created = await server.call("computer_create", { computer_id: id })
  if (created.isError) throw new Error(`computer_create ${id}: ${created.text}`)
  const spawned = await server.call("spawn", { computer_id: id, command: `head -c ${SIZE} /dev/zero | tr '\\0' a`, timeoutMs: 600_000 })
  if (spawned.isError) throw new Error(`spawn ${id}: ${spawned.text}`)
  const pid: string = spawned.structured.pid
  const waited = await server.call("wait", { computer_id: id, id: pid, timeoutMs: 600_000 })
  if (waited.isError || waited.structured.exitCode !== 0) throw new Error(`wait ${id}: ${waited.text}`)
  return pid
}

// Warm: every code path of a computer's life has run once.
await hold("warm")
await server.call("computer_delete", { computer_id: "warm" })
await pause(1000)
const before = await memory()
const started = performance.now()
const pids: Array<string> = []
// Five at a time: creation and the writing are not what is measured here.
for (let i = 0; i < count; i += 5) {
  pids.push(...await Promise.all(Array.from({ length: Math.min(5, count - i) }, (_, j) => hold(`held-${i + j}`))))
}
const seconds = (performance.now() - started) / 1000
await pause(2000)
const after = await memory()
// The middle is in the computer: a cursor into it reads it.
const middle = await server.call("stdout", { computer_id: "held-0", id: pids[0], stdoutCursor: SIZE / 2, maxBytes: 1000 })
const readable = middle.structured?.stdout === "a".repeat(1000) && middle.structured?.next?.stdout === SIZE / 2 + 1000
const per = (key: "heapUsed" | "rss" | "external" | "arrayBuffers") => (after[key] - before[key]) / count / MiB
const mib = (bytes: number) => (bytes / MiB).toFixed(1)
console.log(`${count} idle computers on ${backend}, each holding a finished ${SIZE / 1e6} MB stdout, made in ${seconds.toFixed(1)} s; server memory after a full GC`)
console.log(`  heap used: ${mib(before.heapUsed)} MiB with none → ${mib(after.heapUsed)} MiB: ${per("heapUsed").toFixed(3)} MiB per computer (target ≤ 0.5)`)
console.log(`  external + array buffers: ${per("external").toFixed(3)} + ${per("arrayBuffers").toFixed(3)} MiB per computer (${mib(after.arrayBuffers)} MiB of array buffers in all)`)
console.log(`  RSS: ${mib(before.rss)} → ${mib(after.rss)} MiB: ${per("rss").toFixed(3)} MiB per computer`)
console.log(`  stdout from cursor ${SIZE / 2} of held-0: ${readable ? "1000 bytes of the middle, read back" : `NOT READ: ${JSON.stringify(middle.structured ?? middle.text).slice(0, 300)}`}`)
if (snapshot) {
  process.kill(server.pid!, "SIGUSR1")
  await pause(20_000)
  console.log(`  heap snapshot: ${readdirSync(scratch).filter((name) => name.endsWith(".heapsnapshot")).map((name) => join(scratch, name)).join(", ")}`)
}
for (let i = 0; i < count; i += 10) {
  await Promise.all(Array.from({ length: Math.min(10, count - i) }, (_, j) => server.call("computer_delete", { computer_id: `held-${i + j}` })))
}
await server.client.close()
if (!snapshot) rmSync(scratch, { recursive: true, force: true })
if (!readable) process.exitCode = 1
