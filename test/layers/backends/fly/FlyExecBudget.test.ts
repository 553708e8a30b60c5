import { assert, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Stream } from "effect"
import { beforeEach } from "vitest"
import type { FakeRequest, FlyFake } from "../../../support/FlyFake.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"
import { collect, open, options, spec, useFake, withBackend } from "./FlyTestSupport.js"
import { ownedEvents } from "../../../../src/services/Backend.js"


/** The most requests in any window of `seconds` (Fly allows 3 + 1/s per action and machine). */
const busiestWindow = (requests: ReadonlyArray<FakeRequest>, seconds: number) => {
  let most = 0
  for (const first of requests) most = Math.max(most, requests.filter((r) => r.at >= first.at && r.at < first.at + seconds * 1000).length)
  return most
}

describeIf(bwrapWorks, "bubblewrap (the Fly fake runs commands in it)")("the Fly backend within Fly's rate limit", () => {
  const current = useFake()
  let fake: FlyFake
  beforeEach(() => {
    fake = current()
  })

  it.live("streaming output, stdin and signals together stay within 1 exec/s (burst 3) and meet no 429", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(fake.rateLimit, { perSecond: 1, burst: 3 }, "the fake enforces Fly's documented limit")
      yield* withBackend(options(fake.url, { tuning: { watchIntervalMs: 60_000 } }), (backend) =>
        Effect.gen(function*() {
          const computer = yield* open(backend, "budget")
          const from = fake.requests.length
          const chatty = yield* computer.connection.spawn(spec(["sh", "-c", "i=0; while [ $i -lt 60 ]; do echo tick $i; i=$((i+1)); sleep 0.05; done"]))
          const chattyOut = yield* collect(chatty).pipe(Effect.fork)
          const echo = yield* computer.connection.spawn(spec(["sh", "-c", "while read l; do echo \"got $l\"; done"]))
          const echoOut = yield* collect(echo).pipe(Effect.fork)
          for (const line of ["one", "two", "three", "four"]) yield* echo.write(new TextEncoder().encode(`${line}\n`))
          const sleeper = yield* computer.connection.spawn(spec(["sleep", "300"]))
          const sleeperOut = yield* collect(sleeper).pipe(Effect.fork)
          yield* sleeper.signal("TERM")
          yield* echo.closeStdin
          const [ticks, echoed, slept] = yield* Effect.all([Fiber.join(chattyOut), Fiber.join(echoOut), Fiber.join(sleeperOut)])
          assert.strictEqual(ticks.stdout, Array.from({ length: 60 }, (_, i) => `tick ${i}\n`).join(""))
          assert.strictEqual(echoed.stdout, "got one\ngot two\ngot three\ngot four\n")
          assert.deepStrictEqual(slept.exits, [{ exitCode: null, signal: "SIGTERM" }])
          const machine = computer.machineId
          const execs = fake.requests.slice(from).filter((request) => request.action === "POST exec" && request.machine === machine)
          assert.deepStrictEqual(execs.filter((request) => request.status === 429).length, 0, "the budget is ours: Fly never has to refuse")
          for (const seconds of [1, 2, 5]) {
            const most = busiestWindow(execs, seconds)
            assert.isAtMost(most, 3 + seconds, `${most} exec calls within ${seconds} s`)
          }
        }))
    }), 120_000)

  for (const retryAfter of ["always", "never"] as const) {
    const said = retryAfter === "always" ? "with Retry-After: the backend waits as long as it was told" : "without Retry-After: the backend waits a refill period"
    it.live(`refusals ${said}, never retries in a tight loop, and gets through`, () =>
      Effect.gen(function*() {
        yield* withBackend(options(fake.url, { tuning: { watchIntervalMs: 60_000 } }), (backend) =>
          Effect.gen(function*() {
            const computer = yield* open(backend, `refused-${retryAfter}`)
            // Someone else spends this machine's budget: Fly refuses. A token every 5 s: spawns that
            // take seconds on a loaded machine still find the bucket empty.
            fake.rateLimit = { perSecond: 0.2, burst: 1 }
            fake.retryAfter = retryAfter
            const from = fake.requests.length
            // One after the other: concurrent spawns would share one round.
            const results = yield* Effect.forEach([1, 2, 3, 4], (n) => Effect.flatMap(computer.connection.spawn(spec(["echo", String(n)])), collect))
            assert.deepStrictEqual(results.map((result) => result.stdout), ["1\n", "2\n", "3\n", "4\n"])
            const execs = fake.requests.slice(from).filter((request) => request.action === "POST exec")
            const refused = execs.filter((request) => request.status === 429)
            assert.isAbove(refused.length, 0, "the fake did refuse")
            assert.isTrue(refused.every((request) => (request.retryAfter === undefined) === (retryAfter === "never")))
            for (const refusal of refused) {
              const next = execs.find((request) => request.at > refusal.at)
              const told = refusal.retryAfter === undefined ? 1000 : Number(refusal.retryAfter) * 1000
              if (next) assert.isAtLeast(next.at - refusal.at, told - 50, "no retry before it was due")
            }
          }))
      }), 120_000)
  }

  it.live("2 MiB of output arrives whole and in order; throughput and latency under the real limit", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url, { tuning: { watchIntervalMs: 60_000 } }), (backend) =>
        Effect.gen(function*() {
          const computer = yield* open(backend, "bulk")
          const lines = 320_000 // seq 1 320000: 2,128,895 bytes, over 2 MiB
          const started = Date.now()
          const bulk = yield* collect(yield* computer.connection.spawn(spec(["seq", "1", String(lines)])))
          const seconds = (Date.now() - started) / 1000
          assert.strictEqual(bulk.stdout.length, 2_128_895)
          assert.strictEqual(bulk.stdout, `${Array.from({ length: lines }, (_, i) => i + 1).join("\n")}\n`)
          // Latency: a line printed every 300 ms, seen how long after it was printed?
          const ticker = yield* computer.connection.spawn(spec(["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do date +%s%3N; sleep 0.3; done"]))
          const arrivals: Array<number> = []
          yield* Stream.runForEach(ownedEvents(ticker), (event) =>
            Effect.sync(() => {
              if (event._tag !== "Stdout") return
              for (const line of Buffer.from(event.data).toString().trim().split("\n")) arrivals.push(Date.now() - Number(line))
            }))
          const sorted = [...arrivals].sort((a, b) => a - b)
          const p50 = sorted[Math.floor(sorted.length / 2)]!
          const worst = sorted[sorted.length - 1]!
          process.stderr.write(
            `fly output under 1 exec/s (burst 3): ${(bulk.stdout.length / 1024 / 1024 / seconds).toFixed(2)} MiB/s (2 MiB in ${seconds.toFixed(1)} s); ` +
              `line latency p50 ${p50} ms, max ${worst} ms over ${sorted.length} lines\n`
          )
          assert.strictEqual(sorted.length, 10)
          assert.isBelow(worst, 5000, "a line is seen within a few seconds")
          assert.isBelow(seconds, 20)
        }))
    }), 120_000)

  it.live("a slow reader holds back its own process only", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url, { tuning: { watchIntervalMs: 60_000 } }), (backend) =>
        Effect.gen(function*() {
          const computer = yield* open(backend, "slow-reader")
          const execs = () => fake.requests.filter((request) => request.action === "POST exec" && request.machine === computer.machineId).length
          // 6.9 MB: more than a process's events buffer (4 MiB) before the source is held back.
          const lines = 1_000_000
          const flood = yield* computer.connection.spawn(spec(["seq", "1", String(lines)]))
          // Nobody reads the flood; another process still gets through.
          const other = yield* collect(yield* computer.connection.spawn(spec(["echo", "other"])))
          assert.strictEqual(other.stdout, "other\n")
          // Polling stops once the flood's buffer is full, although it has output left in the machine.
          let quiet = false
          for (let i = 0; i < 15 && !quiet; i++) {
            const before = execs()
            yield* Effect.sleep(Duration.seconds(2))
            quiet = execs() - before <= 1
          }
          assert.isTrue(quiet, "a held-back process is not polled for nothing")
          const held = execs()
          const late = yield* collect(flood)
          assert.strictEqual(late.stdout, `${Array.from({ length: lines }, (_, i) => i + 1).join("\n")}\n`)
          assert.isAbove(execs(), held, "reading woke the connection, which fetched the rest")
        }))
    }), 120_000)
})
