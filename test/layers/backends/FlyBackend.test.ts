import { assert, describe, it } from "@effect/vitest"
import { Chunk, Duration, Effect, Exit, Fiber, Logger, LogLevel, Redacted, Stream } from "effect"
import type { Scope } from "effect"
import { afterAll, beforeAll } from "vitest"
import type { FlyBackendOptions } from "../../../src/layers/backends/FlyBackend.js"
import * as FlyBackend from "../../../src/layers/backends/FlyBackend.js"
import type { BackendProcess, ProcessEvent } from "../../../src/services/Backend.js"
import { Backend } from "../../../src/services/Backend.js"
import type { FlyFake } from "../../support/FlyFake.js"
import { startFlyFake } from "../../support/FlyFake.js"
import { bwrapWorks, describeIf } from "../../support/Requirements.js"

const TOKEN = "fo1_super-secret-test-token-0123456789"
const APP = "kt-test"
let fake: FlyFake
let instance = 0

const options = (fakeUrl: string, over: Partial<FlyBackendOptions> = {}): FlyBackendOptions => ({
  app: APP,
  token: Redacted.make(TOKEN),
  image: FlyBackend.DEFAULT_IMAGE,
  region: "fra",
  cpuKind: "shared",
  cpus: 1,
  memoryMb: 512,
  rootfsSizeGb: undefined,
  apiUrl: fakeUrl,
  network: false,
  instanceId: `test-instance-${process.pid}-${++instance}`,
  ...over,
  tuning: { watchIntervalMs: 200, retryBaseMs: 50, ...over.tuning }
})

const withBackend = <A, E>(
  opts: FlyBackendOptions,
  body: (backend: Backend["Type"]) => Effect.Effect<A, E, Scope.Scope>
) => Effect.scoped(Effect.flatMap(Backend, body)).pipe(Effect.provide(FlyBackend.layer(opts)))

const spec = (argv: ReadonlyArray<string>) => ({ argv, cwd: FlyBackend.HOME, env: { PATH: "/usr/bin:/bin", HOME: FlyBackend.HOME } })

const collect = (process: BackendProcess) =>
  process.events.pipe(
    Stream.runCollect,
    Effect.map((chunk) => {
      const events = Chunk.toReadonlyArray(chunk)
      const text = (tag: "Stdout" | "Stderr") =>
        Buffer.concat(events.flatMap((event: ProcessEvent) => (event._tag === tag ? [event.data] : []))).toString("utf8")
      const exits = events.filter((event) => event._tag === "Exit")
      return { stdout: text("Stdout"), stderr: text("Stderr"), exits, last: events[events.length - 1] }
    })
  )

const post = async (path: string, body: unknown) => {
  const response = await fetch(`${fake.url}/v1/apps/${APP}/machines${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify(body)
  })
  return (await response.json()) as { id: string }
}

describeIf(bwrapWorks, "bubblewrap (the Fly fake runs commands in it)")("FlyBackend against the fake", () => {
  beforeAll(async () => {
    fake = await startFlyFake({ token: TOKEN, app: APP })
  })
  afterAll(async () => {
    await fake?.close()
  })

  it.live("creates a tagged machine, runs processes in it, and removes a temporary one on close", () =>
    Effect.gen(function*() {
      let machineId = ""
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          assert.deepStrictEqual(backend.capabilities, FlyBackend.capabilities)
          const computer = yield* backend.open({ id: "life", temporary: true })
          machineId = computer.providerId
          const machine = fake.machines.get(machineId)!
          assert.strictEqual(machine.name, "kilntainer-life")
          assert.strictEqual(machine.state, "started")
          assert.strictEqual(machine.region, "fra")
          const config = machine.config
          assert.deepStrictEqual(config["guest"], { cpu_kind: "shared", cpus: 1, memory_mb: 512 })
          assert.strictEqual(config["metadata"]["kilntainers"], "true")
          assert.strictEqual(config["metadata"]["kilntainers-computer-id"], "life")
          assert.strictEqual(config["metadata"]["kilntainers-temporary"], "true")
          assert.strictEqual(config["metadata"]["kilntainers-image"], FlyBackend.DEFAULT_IMAGE)
          assert.isString(config["metadata"]["kilntainers-expires"])
          assert.strictEqual(config["auto_destroy"], true)
          assert.strictEqual(config["rootfs"]["persist"], "restart")
          assert.strictEqual(config["restart"]["policy"], "no")
          assert.deepStrictEqual(config["init"]["exec"], FlyBackend.KEEP_ALIVE)

          const echo = yield* computer.spawn({ ...spec(["sh", "-c", "printf 'a b'; echo \"$FOO\" >&2; pwd; exit 7"]), env: { FOO: "bar baz" } })
          const result = yield* collect(echo)
          assert.strictEqual(result.stdout, `a b${FlyBackend.HOME}\n`)
          assert.strictEqual(result.stderr, "bar baz\n")
          assert.deepStrictEqual(result.exits.map((event) => event._tag === "Exit" && event.exit), [{ exitCode: 7, signal: null }])
          assert.strictEqual(result.last?._tag, "Exit")

          const missing = yield* Effect.flip(computer.spawn(spec(["no-such-command-kt"])))
          assert.strictEqual(missing._tag, "SpawnFailed")
          assert.match(missing.message, /command not found/)
          const badCwd = yield* Effect.flip(computer.spawn({ ...spec(["true"]), cwd: "/nonexistent" }))
          assert.match(badCwd.message, /working directory/)
          const tty = yield* Effect.flip(computer.spawn({ ...spec(["true"]), tty: { cols: 80, rows: 24 } }))
          assert.match(tty.message, /no terminals/)

          // Output that arrives over time, stdin, a signal to the group.
          const cat = yield* computer.spawn(spec(["sh", "-c", "trap 'echo term; exit 3' TERM; while read l; do echo \"got $l\"; done; sleep 300 & wait"]))
          yield* cat.write(new TextEncoder().encode("one\ntwo\n"))
          yield* cat.closeStdin
          yield* Effect.sleep(Duration.millis(600))
          yield* cat.signal("TERM")
          const catResult = yield* collect(cat)
          assert.strictEqual(catResult.stdout, "got one\ngot two\nterm\n")
          assert.deepStrictEqual(catResult.exits.map((event) => event._tag === "Exit" && event.exit), [{ exitCode: 3, signal: null }])
          const resize = yield* Effect.flip(cat.resize(80, 24))
          assert.strictEqual(resize._tag, "Unsupported")
        }))
      assert.strictEqual(fake.machines.get(machineId)?.state, "destroyed")
    }), 60_000)

  it.live("a permanent computer is found again by a fresh layer; a temporary mismatch is refused", () =>
    Effect.gen(function*() {
      let first = ""
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const computer = yield* backend.open({ id: "keeper", temporary: false })
          first = computer.providerId
          yield* collect(yield* computer.spawn(spec(["sh", "-c", "echo kept > note"])))
        }))
      assert.strictEqual(fake.machines.get(first)?.state, "started", "a permanent machine stays")
      assert.strictEqual(fake.machines.get(first)?.config["rootfs"]["persist"], "always")
      assert.strictEqual(fake.machines.get(first)?.config["restart"]["policy"], "always")
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const listed = (yield* backend.list).find((computer) => computer.id === "keeper")
          assert.deepInclude(listed, { id: "keeper", temporary: false, providerId: first, image: FlyBackend.DEFAULT_IMAGE, state: "started" })
          const wrong = yield* Effect.flip(backend.open({ id: "keeper", temporary: true }))
          assert.match(wrong.message, /permanent/)
          const again = yield* backend.open({ id: "keeper", temporary: false })
          assert.strictEqual(again.providerId, first)
          assert.strictEqual((yield* collect(yield* again.spawn(spec(["cat", "note"])))).stdout, "kept\n")
          yield* again.destroy
        }))
      assert.strictEqual(fake.machines.get(first)?.state, "destroyed")
    }), 60_000)

  it.live("a stopped permanent machine is started again on open", () =>
    Effect.gen(function*() {
      let id = ""
      yield* withBackend(options(fake.url), (backend) => Effect.map(backend.open({ id: "sleeper", temporary: false }), (c) => (id = c.providerId)))
      fake.stopFromOutside(id)
      assert.strictEqual(fake.machines.get(id)?.state, "stopped")
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const computer = yield* backend.open({ id: "sleeper", temporary: false })
          assert.strictEqual(computer.providerId, id)
          assert.strictEqual((yield* collect(yield* computer.spawn(spec(["echo", "up"])))).stdout, "up\n")
          yield* computer.destroy
        }))
    }), 60_000)

  it.live("wait: a 408 means not yet and is asked again; a machine that never starts is a clear error and is removed", () =>
    Effect.gen(function*() {
      fake.bootDelayMs = 2500
      const from = fake.requests.length
      yield* withBackend(options(fake.url, { tuning: { waitTimeoutSeconds: 1 } }), (backend) =>
        Effect.gen(function*() {
          const computer = yield* backend.open({ id: "slowboot", temporary: true })
          assert.strictEqual(fake.machines.get(computer.providerId)?.state, "started")
        }))
      const waits = fake.requests.slice(from).filter((request) => request.action === "GET wait")
      assert.isAtLeast(waits.filter((request) => request.status === 408).length, 1)
      assert.isAtMost(waits.length, 6)
      fake.bootDelayMs = 5000
      const error = yield* withBackend(options(fake.url, { tuning: { waitTimeoutSeconds: 1, startTimeoutMs: 1500 } }), (backend) =>
        Effect.flip(backend.open({ id: "neverboot", temporary: true })))
      assert.match(error.message, /did not become started within 2 s/)
      assert.isUndefined(fake.byName("kilntainer-neverboot"))
    }).pipe(Effect.ensuring(Effect.sync(() => (fake.bootDelayMs = 0)))), 60_000)

  it.live("a machine of that name that is not ours is refused and left alone", () =>
    Effect.gen(function*() {
      const foreign = yield* Effect.promise(() => post("", { name: "kilntainer-foreign", config: { image: "nginx" } }))
      const error = yield* withBackend(options(fake.url), (backend) => Effect.flip(backend.open({ id: "foreign", temporary: true })))
      assert.strictEqual(error._tag, "BackendError")
      assert.match(error.message, /kilntainer-foreign.*not created by kilntainers/)
      assert.notStrictEqual(fake.machines.get(foreign.id)?.state, "destroyed")
      assert.isUndefined(fake.machines.get(foreign.id)?.config["metadata"])
      fake.destroyFromOutside(foreign.id)
    }), 60_000)

  it.live("429: retried after Retry-After with backoff, never in a tight loop", () =>
    Effect.gen(function*() {
      fake.rateLimit = { perSecond: 2, burst: 2 }
      const from = fake.requests.length
      const started = Date.now()
      yield* withBackend(options(fake.url, { tuning: { watchIntervalMs: 60_000 } }), (backend) =>
        Effect.gen(function*() {
          const computer = yield* backend.open({ id: "limited", temporary: true })
          const results = yield* Effect.forEach([1, 2, 3, 4], (n) => Effect.flatMap(computer.spawn(spec(["echo", String(n)])), collect), {
            concurrency: "unbounded"
          })
          assert.deepStrictEqual(results.map((result) => result.stdout).sort(), ["1\n", "2\n", "3\n", "4\n"])
        })).pipe(Effect.ensuring(Effect.sync(() => (fake.rateLimit = undefined))))
      const requests = fake.requests.slice(from)
      const limited = requests.filter((request) => request.status === 429)
      assert.isAbove(limited.length, 0, "the fake did rate-limit")
      // Each caller waits Retry-After (1 s) before asking again: a handful of concurrent callers
      // produce a handful of refusals per second, not a storm.
      const seconds = (Date.now() - started) / 1000
      assert.isAtLeast(seconds, 1, "the backend waited for Retry-After")
      assert.isBelow(limited.length, 6 * seconds + 6, `${limited.length} refusals in ${seconds} s`)
      assert.isBelow(requests.length, 20 + seconds * 8, `${requests.length} requests in ${seconds} s`)
    }), 60_000)

  it.live("5xx: retried a few times, then a clear error; nothing is left on the server", () =>
    Effect.gen(function*() {
      fake.failNext(2, 503, /^POST \/v1\/apps\/[^/]+\/machines$/)
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const computer = yield* backend.open({ id: "flaky", temporary: true })
          assert.strictEqual(fake.live().filter((machine) => machine.name === "kilntainer-flaky").length, 1)
          assert.strictEqual((yield* collect(yield* computer.spawn(spec(["echo", "ok"])))).stdout, "ok\n")
        }))
      const before = fake.live().length
      fake.failNext(100, 502, /^POST \/v1\/apps\/[^/]+\/machines$/)
      const error = yield* withBackend(options(fake.url, { tuning: { maxRetries: 3 } }), (backend) =>
        Effect.flip(backend.open({ id: "broken", temporary: true })))
      assert.strictEqual(error._tag, "BackendError")
      assert.match(error.message, /create a machine: HTTP 502: injected fault 502/)
      assert.strictEqual(fake.live().length, before)
      assert.isUndefined(fake.byName("kilntainer-broken"))
    }).pipe(Effect.ensuring(Effect.sync(() => fake.clearFaults()))), 60_000)

  it.live("a request that gets no answer fails with a clear error", () =>
    Effect.gen(function*() {
      const error = yield* withBackend(options(fake.url, { tuning: { requestTimeoutMs: 300 } }), (backend) =>
        Effect.gen(function*() {
          fake.delayNext(1, 2000, /^GET \/v1\/apps\/[^/]+\/machines$/)
          return yield* Effect.flip(backend.list)
        }))
      assert.strictEqual(error._tag, "BackendError")
      assert.match(error.message, /list machines: no answer from the Fly API at .* within 0\.3 s/)
    }), 60_000)

  it.live("a machine destroyed or stopped from outside: lost fires and running processes end", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const busy = yield* backend.open({ id: "doomed", temporary: true })
          const sleeper = yield* busy.spawn(spec(["sleep", "300"]))
          const events = yield* collect(sleeper).pipe(Effect.fork)
          const idle = yield* backend.open({ id: "idle", temporary: false })
          yield* Effect.sleep(Duration.millis(200))
          fake.destroyFromOutside(busy.providerId)
          fake.stopFromOutside(idle.providerId)
          const why = yield* busy.lost.pipe(Effect.timeout(Duration.seconds(10)))
          assert.match(why, /destroyed outside kilntainers/)
          const ended = yield* Fiber.join(events).pipe(Effect.timeout(Duration.seconds(5)))
          assert.deepStrictEqual(ended.exits.map((event) => event._tag === "Exit" && event.exit), [{ exitCode: null, signal: "SIGKILL" }])
          const idleWhy = yield* idle.lost.pipe(Effect.timeout(Duration.seconds(10)))
          assert.match(idleWhy, /stopped outside kilntainers/)
          const refused = yield* Effect.flip(busy.spawn(spec(["true"])))
          assert.match(refused.message, /gone/)
          yield* idle.destroy
        }))
    }), 60_000)

  it.live("idle polling backs off: a quiet process costs about one exec per second", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url, { tuning: { watchIntervalMs: 60_000 } }), (backend) =>
        Effect.gen(function*() {
          const computer = yield* backend.open({ id: "quiet", temporary: true })
          const from = fake.requests.length
          const result = yield* collect(yield* computer.spawn(spec(["sh", "-c", "sleep 3; echo done"])))
          assert.strictEqual(result.stdout, "done\n")
          const execs = fake.requests.slice(from).filter((request) => request.action === "POST exec").length
          assert.isAtMost(execs, 12, `${execs} exec calls for a 3 s process`)
          assert.isAtLeast(execs, 3)
        }))
    }), 60_000)

  it.live("the token never appears in errors or logs", () =>
    Effect.gen(function*() {
      const logs: Array<string> = []
      const logger = Logger.make(({ message }) => logs.push(String(message)))
      const wrong = yield* Effect.exit(
        withBackend(options(fake.url, { token: Redacted.make("wrong-token") }), () => Effect.void)
      )
      assert.isTrue(Exit.isFailure(wrong))
      const said = JSON.stringify(wrong)
      assert.match(said, /HTTP 401: unauthorized/)
      fake.failNext(3, 500, /exec$/)
      yield* withBackend(options(fake.url, { tuning: { requestTimeoutMs: 500 } }), (backend) =>
        Effect.gen(function*() {
          const computer = yield* backend.open({ id: "secret", temporary: true })
          yield* collect(yield* computer.spawn(spec(["echo", "x"])))
          fake.delayNext(1, 1500, /^GET \/v1\/apps\/[^/]+\/machines$/)
          const error = yield* Effect.flip(backend.list)
          logs.push(error.message, JSON.stringify(error))
        })).pipe(
        Effect.provide(Logger.replace(Logger.defaultLogger, logger)),
        Logger.withMinimumLogLevel(LogLevel.All),
        Effect.catchAll((error) => Effect.sync(() => logs.push(String(error))))
      )
      const everything = [said, ...logs].join("\n")
      assert.notInclude(everything, TOKEN)
      assert.notInclude(String(Redacted.make(TOKEN)), TOKEN)
    }).pipe(Effect.ensuring(Effect.sync(() => fake.clearFaults()))), 60_000)

  it.live("the reaper destroys temporary machines whose lease expired, and the lease is renewed", () =>
    Effect.gen(function*() {
      const metadata = (instanceId: string, temporary: boolean, expires: string | undefined) => ({
        kilntainers: "true",
        "kilntainers-computer-id": `reap-${instanceId}`,
        "kilntainers-temporary": String(temporary),
        "kilntainers-image": "debian:bookworm-slim",
        "kilntainers-instance": instanceId,
        ...(expires === undefined ? {} : { "kilntainers-expires": expires })
      })
      const past = new Date(Date.now() - 60_000).toISOString()
      const future = new Date(Date.now() + 600_000).toISOString()
      const expired = yield* Effect.promise(() => post("", { name: "kilntainer-reap-a", config: { image: "debian", metadata: metadata("a", true, past) } }))
      const leased = yield* Effect.promise(() => post("", { name: "kilntainer-reap-b", config: { image: "debian", metadata: metadata("b", true, future) } }))
      const permanent = yield* Effect.promise(() => post("", { name: "kilntainer-reap-c", config: { image: "debian", metadata: metadata("c", false, past) } }))
      const foreign = yield* Effect.promise(() => post("", { name: "other-app-machine", config: { image: "debian", metadata: { "kilntainers-temporary": "true" } } }))
      yield* withBackend(options(fake.url, { tuning: { leaseTtlMs: 900 } }), (backend) =>
        Effect.gen(function*() {
          assert.strictEqual(fake.machines.get(expired.id)?.state, "destroyed")
          assert.notStrictEqual(fake.machines.get(leased.id)?.state, "destroyed")
          assert.notStrictEqual(fake.machines.get(permanent.id)?.state, "destroyed")
          assert.notStrictEqual(fake.machines.get(foreign.id)?.state, "destroyed")
          const computer = yield* backend.open({ id: "leased", temporary: true })
          const first = fake.machines.get(computer.providerId)!.config["metadata"]["kilntainers-expires"] as string
          yield* Effect.sleep(Duration.millis(800))
          const renewed = fake.machines.get(computer.providerId)!.config["metadata"]["kilntainers-expires"] as string
          assert.isAbove(Date.parse(renewed), Date.parse(first))
        }))
      for (const machine of [leased, permanent, foreign]) fake.destroyFromOutside(machine.id)
    }), 60_000)

  it.live("restart keeps files and ends processes; factory reset recreates from the recorded image", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const computer = yield* backend.open({ id: "cycle", temporary: true })
          const first = computer.providerId
          yield* collect(yield* computer.spawn(spec(["sh", "-c", "echo x > file"])))
          const sleeper = yield* computer.spawn(spec(["sleep", "300"]))
          const events = yield* collect(sleeper).pipe(Effect.fork)
          yield* computer.restart
          const ended = yield* Fiber.join(events)
          assert.strictEqual(ended.exits.length, 1)
          assert.strictEqual((yield* collect(yield* computer.spawn(spec(["cat", "file"])))).stdout, "x\n")
          assert.strictEqual(computer.providerId, first)
          yield* computer.factoryReset
          assert.notStrictEqual(computer.providerId, first)
          assert.strictEqual(fake.machines.get(first)?.state, "destroyed")
          assert.strictEqual(fake.machines.get(computer.providerId)?.config["image"], FlyBackend.DEFAULT_IMAGE)
          const gone = yield* collect(yield* computer.spawn(spec(["sh", "-c", "ls file 2>&1; true"])))
          assert.match(gone.stdout, /No such file/)
        }))
    }), 60_000)
})

const realToken = process.env.FLY_API_TOKEN ?? process.env.FLY_TOKEN
const realApp = process.env.FLY_APP_NAME
if (realToken === undefined || realApp === undefined) {
  process.stderr.write("skipping the real Fly Machines smoke test: set FLY_API_TOKEN and FLY_APP_NAME to run it\n")
}

describe.skipIf(realToken === undefined || realApp === undefined)("FlyBackend against the real Machines API (FLY_API_TOKEN, FLY_APP_NAME)", () => {
  it.live("creates a temporary machine, runs a command with stdin, and removes it", () =>
    withBackend({
      app: realApp!,
      token: Redacted.make(realToken!),
      image: FlyBackend.DEFAULT_IMAGE,
      region: process.env.FLY_REGION,
      cpuKind: "shared",
      cpus: 1,
      memoryMb: 256,
      rootfsSizeGb: undefined,
      apiUrl: FlyBackend.DEFAULT_API_URL,
      network: true,
      instanceId: `smoke-${Date.now()}`
    }, (backend) =>
      Effect.gen(function*() {
        const computer = yield* backend.open({ id: `kt-smoke-${Date.now().toString(36)}`, temporary: true })
        const cat = yield* computer.spawn(spec(["cat"]))
        yield* cat.write(new TextEncoder().encode("hello fly\n"))
        yield* cat.closeStdin
        const result = yield* collect(cat)
        assert.strictEqual(result.stdout, "hello fly\n")
      })), 300_000)
})
