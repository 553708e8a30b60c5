// The E2B provider's own costs against its fake: spawn latency (spawn → Exit → scope closed, `true`)
// and stdout throughput (32 MiB), medians.  npx vite-node bench/e2b-output.ts [root] [fake-root]
// With two checkouts, run it once per root (and the same fake-root) to compare them side by side.
import { Effect, Redacted, Stream } from "effect"
import { resolve } from "node:path"
import type * as E2BBackendModule from "../src/layers/backends/e2b/E2BBackend.js"
import type * as BackendModule from "../src/services/Backend.js"
import type * as E2BFakeModule from "../test/support/E2BFake.js"
import { ownedEvents } from "../src/services/Backend.js"

const root = resolve(process.argv[2] ?? ".")
const fakeRoot = resolve(process.argv[3] ?? root)
// Typed as this checkout's modules; the other checkout's have the same surface.
const E2BBackend: typeof E2BBackendModule = await import(`${root}/src/layers/backends/e2b/E2BBackend.ts`)
const { Backend }: typeof BackendModule = await import(`${root}/src/services/Backend.ts`)
const E2BFake: typeof E2BFakeModule = await import(`${fakeRoot}/test/support/E2BFake.ts`)

const fake = await E2BFake.start()
const layer = E2BBackend.layer({
  apiKey: Redacted.make(fake.apiKey), template: "base", sandboxTimeoutSec: 600, metadata: {}, envs: {},
  apiUrl: fake.url, sandboxUrl: fake.url, domain: undefined, home: E2BFake.FAKE_HOME
})
const env = { PATH: "/usr/bin:/bin", HOME: E2BFake.FAKE_HOME }
const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const figures = await Effect.runPromise(Effect.gen(function*() {
  // The provider's own calls, as the kernel makes them: create, connect, spawn.
  const backend = yield* Backend
  const instance = yield* Effect.acquireRelease(
    backend.create({ id: "bench", temporary: true, image: "base", created: new Date(0).toISOString(), instance: "bench" }),
    (created) => Effect.ignore(backend.remove(created))
  )
  const computer = yield* backend.connect(instance)
  /** Milliseconds to spawn, to read everything, to close; and the stdout bytes. */
  const run = (argv: Array<string>) => Effect.gen(function*() {
    const t0 = performance.now()
    let t1 = 0
    let t2 = 0
    let bytes = 0
    yield* Effect.scoped(Effect.gen(function*() {
      const process = yield* computer.spawn({ argv, cwd: E2BFake.FAKE_HOME, env })
      t1 = performance.now()
      yield* ownedEvents(process).pipe(Stream.runForEach((event) => Effect.sync(() => void (event._tag === "Stdout" && (bytes += event.data.length)))))
      t2 = performance.now()
    }))
    return { start: t1 - t0, read: t2 - t1, close: performance.now() - t2, total: performance.now() - t0, bytes }
  })
  const spawns = []
  for (let i = 0; i < 30; i++) spawns.push(yield* run(["true"]))
  const rates = []
  for (let i = 0; i < 5; i++) {
    const big = yield* run(["head", "-c", String(32 << 20), "/dev/zero"])
    if (big.bytes !== 32 << 20) throw new Error(`read ${big.bytes} bytes`)
    rates.push(32 / (big.total / 1000))
  }
  return {
    spawnMs: median(spawns.map((s) => s.total)),
    startMs: median(spawns.map((s) => s.start)),
    toExitMs: median(spawns.map((s) => s.read)),
    closeMs: median(spawns.map((s) => s.close)),
    throughputMiBs: median(rates)
  }
}).pipe(Effect.scoped, Effect.provide(layer)))
await fake.close()
console.log(`e2b backend at ${root} (fake of ${fakeRoot}): spawn ${figures.spawnMs.toFixed(1)} ms (start ${figures.startMs.toFixed(1)}, ` +
  `to exit ${figures.toExitMs.toFixed(1)}, close ${figures.closeMs.toFixed(2)}), stdout ${figures.throughputMiBs.toFixed(1)} MiB/s`)
process.exit(0)
