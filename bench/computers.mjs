// Creating 10 computers concurrently vs creating 1, through the runtime (no lock around provider
// calls: the target is a ratio <= 3). Usage: node bench/computers.mjs [docker|host]
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const { Computers, Kilntainers, Settings } = await import(join(root, "dist", "src", "index.js"))
const backend = process.argv[2] ?? "docker"
const stateDir = mkdtempSync(join(tmpdir(), "kt-bench-computers-"))
const settings = Settings.make({ stateDir, backend })

const timed = (effect) =>
  Effect.gen(function*() {
    const start = process.hrtime.bigint()
    yield* effect
    return Number(process.hrtime.bigint() - start) / 1e6
  })

const program = Effect.gen(function*() {
  const computers = yield* Computers
  let round = 0
  const createAndDelete = (n) =>
    Effect.gen(function*() {
      round++
      const ids = Array.from({ length: n }, (_, i) => `bench-${process.pid}-${round}-${i}`)
      const elapsed = yield* timed(Effect.forEach(ids, (id) => computers.create("bench", { computer_id: id }), { concurrency: "unbounded" }))
      yield* Effect.forEach(ids, (id) => computers.delete("bench", id), { concurrency: "unbounded" })
      return elapsed
    })
  yield* createAndDelete(1) // warm-up: image, caches
  const one = []
  const ten = []
  for (let i = 0; i < 3; i++) {
    one.push(yield* createAndDelete(1))
    ten.push(yield* createAndDelete(10))
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
  console.log(`computer creation on ${backend}, median of 3`)
  console.log(`  1 computer:              ${median(one).toFixed(1)} ms`)
  console.log(`  10 computers at once:    ${median(ten).toFixed(1)} ms`)
  console.log(`  ratio ${(median(ten) / median(one)).toFixed(2)} (target <= 3)`)
})

await Effect.runPromise(program.pipe(Effect.provide(Kilntainers.layer(settings, `bench-${process.pid}`))))

// The engine's own concurrency, side by side: the same container create+start through dockerode.
if (backend === "docker") {
  const { default: Docker } = await import("dockerode")
  const docker = new Docker({ socketPath: "/var/run/docker.sock" })
  let round = 0
  const raw = async (n) => {
    round++
    const start = process.hrtime.bigint()
    const containers = await Promise.all(Array.from({ length: n }, async (_, i) => {
      const c = await docker.createContainer({
        Image: settings.image,
        name: `bench-raw-${process.pid}-${round}-${i}`,
        Cmd: ["sleep", "infinity"],
        HostConfig: { NetworkMode: "none", Init: true }
      })
      await c.start()
      return c
    }))
    const elapsed = Number(process.hrtime.bigint() - start) / 1e6
    await Promise.all(containers.map((c) => c.remove({ force: true })))
    return elapsed
  }
  await raw(1)
  const one = []
  const ten = []
  for (let i = 0; i < 3; i++) {
    one.push(await raw(1))
    ten.push(await raw(10))
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
  console.log(`bare Engine API create+start (no kilntainers), median of 3`)
  console.log(`  1 container:             ${median(one).toFixed(1)} ms`)
  console.log(`  10 containers at once:   ${median(ten).toFixed(1)} ms`)
  console.log(`  ratio ${(median(ten) / median(one)).toFixed(2)}`)
}
process.exit(0)
