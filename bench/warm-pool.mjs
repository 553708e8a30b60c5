// Create → first command, with and without a warm pool, side by side with the bare Engine API
// (create + start + exec of `true` through dockerode) in one run. Issue 12's targets: from a warm
// pool, one computer ≤ 0.1× the bare Engine API, and ten at once from a pool of ten ≤ 2× one.
// Through the library (Runtime + the backend), as an MCP call would drive it minus the protocol.
//   node bench/warm-pool.mjs [docker|host] [--rounds N] [--image IMAGE]     (after npm run build)
import { cpus } from "node:os"
import { mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const { Computers, Kilntainers, Processes, Settings } = await import(join(root, "dist", "src", "index.js"))
const args = process.argv.slice(2)
const option = (name, fallback) => (args.includes(name) ? args[args.indexOf(name) + 1] : fallback)
const backend = args[0] && !args[0].startsWith("--") ? args[0] : "docker"
const rounds = Number(option("--rounds", "5"))
const image = option("--image", "kilntainers-test:bookworm")
const POOL = 10

const now = () => Number(process.hrtime.bigint()) / 1e6
/** CPU time of the whole machine so far (every process and the kernel, all cores), in ms. */
const machineCpuMs = () => {
  const fields = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number)
  // user nice system idle iowait irq softirq steal: everything but idle and iowait is work.
  const busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7]
  return (busy * 1000) / ticksPerSecond
}
const ticksPerSecond = 100
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const p90 = (xs) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.9))]

/** Creates n computers at once and runs `true` in each: ms until the last command's result. */
/** Machine CPU spent inside the timed windows of createAndRun, by burst size. */
let cpuSpent = { one: [], ten: [] }
const createAndRun = (computers, processes, n, tag) =>
  Effect.gen(function*() {
    const ids = Array.from({ length: n }, (_, i) => `wp-${process.pid}-${tag}-${i}`)
    const cpu = machineCpuMs()
    const own = process.cpuUsage()
    const start = now()
    yield* Effect.forEach(ids, (id) =>
      Effect.zipRight(computers.create("bench", { computer_id: id }), processes.exec("bench", { computer_id: id, command: "true" })), {
      concurrency: "unbounded"
    })
    const elapsed = now() - start
    const server = process.cpuUsage(own)
    cpuSpent[n === 1 ? "one" : "ten"].push({ ms: machineCpuMs() - cpu, server: (server.user + server.system) / 1000, count: n })
    yield* Effect.forEach(ids, (id) => computers.delete("bench", id), { concurrency: "unbounded", discard: true })
    return elapsed
  })

/**
 * The same in two steps, for the breakdown: n computers created at once (ms until the last is
 * handed out), then `true` in each at once (the command path alone, on running computers).
 */
const createThenRun = (computers, processes, n, tag) =>
  Effect.gen(function*() {
    const ids = Array.from({ length: n }, (_, i) => `wp-${process.pid}-${tag}-${i}`)
    const start = now()
    yield* Effect.forEach(ids, (id) => computers.create("bench", { computer_id: id }), { concurrency: "unbounded", discard: true })
    const created = now() - start
    const again = now()
    yield* Effect.forEach(ids, (id) => processes.exec("bench", { computer_id: id, command: "true" }), { concurrency: "unbounded", discard: true })
    const command = now() - again
    yield* Effect.forEach(ids, (id) => computers.delete("bench", id), { concurrency: "unbounded", discard: true })
    return { created, command }
  })

const measure = (warmPool) =>
  Effect.gen(function*() {
    const computers = yield* Computers
    const processes = yield* Processes
    const ready = Effect.gen(function*() {
      for (let i = 0; i < 600; i++) {
        const pool = yield* computers.pool
        if (pool === undefined || pool.ready === POOL) return
        yield* Effect.sleep("100 millis")
      }
    })
    yield* ready
    yield* createAndRun(computers, processes, 1, "warm") // warm-up
    const one = []
    const ten = []
    const split = { one: [], ten: [] }
    for (let round = 0; round < rounds; round++) {
      yield* ready
      one.push(yield* createAndRun(computers, processes, 1, `one${round}`))
      yield* ready
      ten.push(yield* createAndRun(computers, processes, 10, `ten${round}`))
      if (warmPool > 0) {
        yield* ready
        split.one.push(yield* createThenRun(computers, processes, 1, `split-one${round}`))
        yield* ready
        split.ten.push(yield* createThenRun(computers, processes, 10, `split-ten${round}`))
      }
    }
    return { one, ten, split }
  }).pipe(Effect.provide(Layer.fresh(Kilntainers.layer(
    Settings.make({ stateDir: mkdtempSync(join(tmpdir(), "kt-bench-pool-")), backend, image, warmPool }),
    `bench-${process.pid}-${warmPool}`
  ))))

const pooled = await Effect.runPromise(measure(POOL))
const pooledCpu = cpuSpent
cpuSpent = { one: [], ten: [] }
const fresh = await Effect.runPromise(measure(0))

let bare
if (backend === "docker") {
  const { default: Docker } = await import("dockerode")
  const docker = new Docker({ socketPath: "/var/run/docker.sock" })
  let count = 0
  const once = async () => {
    const start = now()
    const container = await docker.createContainer({
      Image: image,
      name: `wp-bare-${process.pid}-${count++}`,
      Cmd: ["sleep", "infinity"],
      HostConfig: { NetworkMode: "none", Init: true }
    })
    await container.start()
    const exec = await container.exec({ Cmd: ["true"], AttachStdout: true, AttachStderr: true })
    const stream = await exec.start({})
    await new Promise((resolve) => {
      stream.on("end", resolve)
      stream.on("close", resolve)
      stream.resume()
    })
    await exec.inspect()
    const elapsed = now() - start
    await container.remove({ force: true })
    return elapsed
  }
  await once()
  bare = []
  for (let round = 0; round < rounds; round++) bare.push(await once())
}

const row = (label, xs) => `  ${label.padEnd(36)} p50 ${median(xs).toFixed(1).padStart(7)} ms   p90 ${p90(xs).toFixed(1).padStart(7)} ms`
console.log(`create → first command on ${backend} (${image}), ${rounds} rounds`)
if (bare) console.log(row("bare Engine API create+start+exec", bare))
console.log(row("kilntainers, no pool: 1", fresh.one))
console.log(row("kilntainers, no pool: 10 at once", fresh.ten))
console.log(row(`kilntainers, pool of ${POOL}: 1`, pooled.one))
console.log(row(`kilntainers, pool of ${POOL}: 10 at once`, pooled.ten))
console.log("  breakdown, pool of 10 (the same in two steps):")
console.log(row("  hand-outs alone: 1", pooled.split.one.map((x) => x.created)))
console.log(row("  hand-outs alone: 10 at once", pooled.split.ten.map((x) => x.created)))
console.log(row("  then a command in each: 1", pooled.split.one.map((x) => x.command)))
console.log(row("  then a command in each: 10 at once", pooled.split.ten.map((x) => x.command)))
if (bare) console.log(`  pooled 1 / bare: ${(median(pooled.one) / median(bare)).toFixed(3)} (target ≤ 0.1)`)
console.log(`  pooled 10 / pooled 1: ${(median(pooled.ten) / median(pooled.one)).toFixed(2)} (target ≤ 2)`)
console.log(`  no pool 10 / no pool 1: ${(median(fresh.ten) / median(fresh.one)).toFixed(2)}`)
// What the machine spent per pooled create → first command, over every ten-at-once window: ten
// of them on this machine's cores take at least ten times that divided by the cores.
const ops = pooledCpu.ten.reduce((sum, x) => sum + x.count, 0)
const perOp = pooledCpu.ten.reduce((sum, x) => sum + x.ms, 0) / ops
const serverPerOp = pooledCpu.ten.reduce((sum, x) => sum + x.server, 0) / ops
const cores = cpus().length
console.log(`  machine CPU per pooled create → first command (all processes, ten-at-once windows): ${perOp.toFixed(2)} ms, of which this server ${serverPerOp.toFixed(2)} ms; ten on ${cores} cores need ≥ ${(10 * perOp / cores).toFixed(1)} ms = ${(10 * perOp / cores / median(pooled.one)).toFixed(2)} × one`)
const ratio = (key) => (median(pooled.split.ten.map((x) => x[key])) / median(pooled.split.one.map((x) => x[key]))).toFixed(2)
console.log(`  hand-outs alone 10 / 1: ${ratio("created")}; a command on running computers 10 / 1: ${ratio("command")}`)
process.exit(0)
