// What one `sandbox_exec true` costs the server, through the library (Runtime + the backend, as an
// MCP call drives it minus the protocol): wall time, the process's CPU and its main thread's, young-
// generation collections, and (a second pass, with Effect's op supervision on, which slows it) the
// Effect operations and fibers each call runs. The server's CPU per call is what bounds both the
// round trip's tail and many computers at once on few cores (README "Benchmarks").
//   node bench/exec-cost.mjs [host|docker] [--calls N] [--concurrency C] [--image IMAGE]   (after npm run build)
import { mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { PerformanceObserver } from "node:perf_hooks"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as RuntimeFlags from "effect/RuntimeFlags"
import * as Supervisor from "effect/Supervisor"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const { Computers, Kilntainers, Processes, Settings } = await import(join(root, "dist", "src", "index.js"))
const args = process.argv.slice(2)
const option = (name, fallback) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback)
const backend = args[0] && !args[0].startsWith("--") ? args[0] : "host"
const calls = Number(option("--calls", "1000"))
const concurrency = Number(option("--concurrency", "1"))
const image = option("--image", "kilntainers-test:bookworm")
const TICKS = 100

/** CPU of this process's main thread so far, in ms (its task in /proc has the process's id). */
const mainThreadMs = () => {
  const fields = readFileSync(`/proc/self/task/${process.pid}/stat`, "utf8").split(") ")[1].split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS
}

/** Counts Effect operations and fibers while `on`. */
const counts = { on: false, ops: 0, fibers: 0 }
class Counting extends Supervisor.AbstractSupervisor {
  get value() {
    return Effect.void
  }
  onStart() {
    if (counts.on) counts.fibers++
  }
  onEffect() {
    if (counts.on) counts.ops++
  }
}

let minorGcs = 0
let gcMs = 0
let observing = false
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    if (!observing || entry.detail?.kind !== 1) continue // 1: NODE_PERFORMANCE_GC_MINOR
    minorGcs++
    gcMs += entry.duration
  }
}).observe({ entryTypes: ["gc"] })

const measure = (counting) =>
  Effect.gen(function*() {
    const computers = yield* Computers
    const processes = yield* Processes
    const ids = Array.from({ length: concurrency }, (_, i) => `cost-${process.pid}-${i}`)
    yield* Effect.forEach(ids, (id) => computers.create("bench", { computer_id: id }), { concurrency: "unbounded", discard: true })
    const batch = Effect.forEach(ids, (id) => processes.exec("bench", { computer_id: id, command: "true" }), {
      concurrency: "unbounded",
      discard: true
    })
    for (let i = 0; i < Math.max(50, calls / 10 / concurrency); i++) yield* batch // warm-up: JIT and pools
    const batches = Math.ceil(calls / concurrency)
    const done = batches * concurrency
    counts.on = counting
    observing = true
    const cpu = process.cpuUsage()
    const main = mainThreadMs()
    const start = performance.now()
    for (let i = 0; i < batches; i++) yield* batch
    const wall = performance.now() - start
    const used = process.cpuUsage(cpu)
    const mainMs = mainThreadMs() - main
    counts.on = false
    observing = false
    yield* Effect.forEach(ids, (id) => computers.delete("bench", id), { concurrency: "unbounded", discard: true })
    return { done, wall, cpu: (used.user + used.system) / 1000, mainMs }
  }).pipe(Effect.provide(Layer.fresh(Kilntainers.layer(
    Settings.make({ stateDir: mkdtempSync(join(tmpdir(), "kt-bench-cost-")), backend, image }),
    `bench-cost-${process.pid}`
  ))))

const plain = await Effect.runPromise(measure(false))
const gcs = { minor: minorGcs, ms: gcMs }
const counted = await Effect.runPromise(measure(true).pipe(
  Effect.provide(Layer.mergeAll(Supervisor.addSupervisor(new Counting()), RuntimeFlags.enableOpSupervision))
))

const per = (x) => (x / plain.done).toFixed(3)
console.log(`sandbox_exec true on ${backend}, ${plain.done} calls, ${concurrency} at a time, through the library`)
console.log(`  wall per call ${per(plain.wall)} ms (per batch of ${concurrency}: ${(plain.wall / (plain.done / concurrency)).toFixed(2)} ms)`)
console.log(`  server CPU per call ${per(plain.cpu)} ms, of which its main thread ${per(plain.mainMs)} ms (/proc, 10 ms ticks)`)
console.log(`  young-generation collections: ${(gcs.minor * 1000 / plain.done).toFixed(1)} per 1000 calls, ${per(gcs.ms)} ms of pauses per call`)
console.log(`  Effect operations per call ${(counts.ops / counted.done).toFixed(0)}, fibers per call ${(counts.fibers / counted.done).toFixed(1)} (second pass, op supervision on)`)
process.exit(0)
