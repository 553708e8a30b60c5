// How the Fly backend's output latency and throughput hold up under Fly's exec rate limit
// (1 request/s per action and machine, burst 3), against the local fake, compared with no limit.
//   npx vite-node bench/fly-output.ts
// Figures, for one computer:
//   throughput  MiB/s of one process printing 16 MiB (sustained: well past the burst)
//   line        how long after a line is printed it reaches the reader (a line every 100 ms, 15 s)
//   echo        stdin to output round trip of a `cat` (20 writes, one every 500 ms)
//   exec        a short command, start to exit (10 in a row)
//   calls       exec calls per second made during the whole run
import { Chunk, Effect, Fiber, Redacted, Stream } from "effect"
import * as FlyBackend from "../src/layers/backends/fly/FlyBackend.js"
import { type BackendProcess, ownedEvents } from "../src/services/Backend.js"
import { Backend } from "../src/services/Backend.js"
import type { RateLimit } from "../test/support/FlyFake.js"
import { startFlyFake } from "../test/support/FlyFake.js"

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN
}
const spec = (argv: ReadonlyArray<string>) => ({ argv, cwd: FlyBackend.HOME, env: { PATH: "/usr/bin:/bin" } })
const drain = (process: BackendProcess) => Effect.map(Stream.runCollect(ownedEvents(process)), Chunk.toReadonlyArray)

const measure = (label: string, limit: RateLimit | false) =>
  Effect.gen(function*() {
    const fake = yield* Effect.promise(() => startFlyFake({ token: "bench", app: "bench", rateLimit: limit }))
    const started = Date.now()
    const figures = yield* Effect.scoped(Effect.gen(function*() {
      const backend = yield* Backend
      // The provider called as the kernel calls it: create, connect; removed at the end.
      const instance = yield* backend.create({
        id: "bench",
        temporary: true,
        image: FlyBackend.DEFAULT_IMAGE,
        created: new Date().toISOString(),
        instance: `bench-${label}`
      })
      yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
      const computer = yield* backend.connect(instance)
      const from = fake.requests.length
      const t0 = Date.now()

      const bytes = 16 * 1024 * 1024
      const bulkStart = Date.now()
      const bulk = yield* drain(yield* computer.spawn(spec(["sh", "-c", `head -c ${bytes} /dev/zero | tr '\\0' a`])))
      const received = bulk.reduce((sum, event) => sum + (event._tag === "Stdout" ? event.data.byteLength : 0), 0)
      if (received !== bytes) throw new Error(`received ${received} of ${bytes} bytes`)
      const throughput = bytes / 1024 / 1024 / ((Date.now() - bulkStart) / 1000)

      const lines: Array<number> = []
      const ticker = yield* computer.spawn(spec(["sh", "-c", "i=0; while [ $i -lt 150 ]; do date +%s%3N; sleep 0.1; i=$((i+1)); done"]))
      yield* Stream.runForEach(ownedEvents(ticker), (event) =>
        Effect.sync(() => {
          if (event._tag !== "Stdout") return
          const now = Date.now()
          for (const line of Buffer.from(event.data).toString().trim().split("\n")) lines.push(now - Number(line))
        }))

      const cat = yield* computer.spawn(spec(["cat"]))
      const seen: Array<number> = []
      let pending: { text: string; at: number } | undefined
      let buffer = ""
      const reader = yield* Stream.runForEach(ownedEvents(cat), (event) =>
        Effect.sync(() => {
          if (event._tag !== "Stdout") return
          buffer += Buffer.from(event.data).toString()
          if (pending && buffer.includes(pending.text)) {
            seen.push(Date.now() - pending.at)
            pending = undefined
          }
        })).pipe(Effect.fork)
      for (let i = 0; i < 20; i++) {
        pending = { text: `ping-${i}\n`, at: Date.now() }
        yield* cat.write(new TextEncoder().encode(pending.text))
        while (pending !== undefined) yield* Effect.sleep("20 millis")
        yield* Effect.sleep("500 millis")
      }
      yield* cat.closeStdin
      yield* Fiber.join(reader)

      const execs: Array<number> = []
      for (let i = 0; i < 10; i++) {
        const at = Date.now()
        yield* drain(yield* computer.spawn(spec(["true"])))
        execs.push(Date.now() - at)
      }
      const calls = fake.requests.slice(from).filter((request) => request.action === "POST exec")
      const refused = calls.filter((request) => request.status === 429).length
      return {
        throughput,
        line: [percentile(lines, 50), percentile(lines, 99)],
        echo: [percentile(seen, 50), percentile(seen, 99)],
        exec: [percentile(execs, 50), percentile(execs, 99)],
        calls: calls.length / ((Date.now() - t0) / 1000),
        refused
      }
    })).pipe(
      Effect.provide(FlyBackend.layer({
        app: "bench",
        token: Redacted.make("bench"),
        image: FlyBackend.DEFAULT_IMAGE,
        region: undefined,
        cpuKind: "shared",
        cpus: 1,
        memoryMb: 512,
        rootfsSizeGb: undefined,
        apiUrl: fake.url,
        network: false,
        ...(limit === false ? { rateLimit: { perSecond: 1000, burst: 1000 } } : {})
      }))
    )
    yield* Effect.promise(() => fake.close())
    const ms = ([p50, p99]: ReadonlyArray<number>) => `p50 ${p50} ms, p99 ${p99} ms`
    console.log(`${label} (${((Date.now() - started) / 1000).toFixed(0)} s)`)
    console.log(`  throughput ${figures.throughput.toFixed(2)} MiB/s (16 MiB)`)
    console.log(`  line       ${ms(figures.line)}`)
    console.log(`  echo       ${ms(figures.echo)}`)
    console.log(`  exec       ${ms(figures.exec)}`)
    console.log(`  calls      ${figures.calls.toFixed(2)} exec/s, ${figures.refused} refused (429)`)
    if (fake.violations.length > 0) throw new Error(`contract violations: ${fake.violations.join("; ")}`)
  })

await Effect.runPromise(Effect.gen(function*() {
  yield* measure("Fly's limit: 1 exec/s per machine, burst 3", { perSecond: 1, burst: 3 })
  yield* measure("no limit (fake unlimited, backend budget 1000/s)", false)
}))
