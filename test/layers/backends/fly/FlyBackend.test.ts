import { assert, it } from "@effect/vitest"
import { Cause, Duration, Effect, Exit, Fiber, Logger, LogLevel, Option, Redacted } from "effect"
import { beforeEach } from "vitest"
import * as FlyBackend from "../../../../src/layers/backends/fly/FlyBackend.js"
import * as FlyMetadata from "../../../../src/layers/backends/fly/FlyMetadata.js"
import * as Scripts from "../../../../src/layers/backends/fly/FlyScripts.js"
import type { FlyFake } from "../../../support/FlyFake.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"
import { collect, metadata, open, options, post as postTo, spec, TOKEN, useFake, withBackend, withKernel } from "./FlyTestSupport.js"

describeIf(bwrapWorks, "bubblewrap (the Fly fake runs commands in it)")("the Fly provider against the fake", () => {
  const current = useFake()
  let fake: FlyFake
  beforeEach(() => {
    fake = current()
  })
  const post = (path: string, body: unknown) => postTo(fake.url, path, body)

  it.live("creates a machine named and labelled for its computer, runs processes in it, and finds it by its labels", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          assert.deepStrictEqual(backend.capabilities, FlyBackend.capabilities)
          assert.strictEqual(backend.labelStyle, "dashed")
          assert.isUndefined(backend.adopt, "a machine cannot be renamed without a restart: no warm pool")
          const { instance, connection, machineId } = yield* open(backend, "life")
          assert.strictEqual(instance.state, "running")
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
          assert.deepStrictEqual(config["init"]["exec"], ["/bin/sh", Scripts.SUPERVISOR_PATH])
          assert.deepStrictEqual(config["files"].map((file: { guest_path: string }) => file.guest_path), [Scripts.SUPERVISOR_PATH])
          // The labels read back are the metadata written.
          const [found, ...others] = yield* backend.find({ id: "life" })
          assert.deepStrictEqual(others, [])
          assert.deepStrictEqual(found, instance)
          assert.deepStrictEqual(yield* backend.find({ id: "life", temporary: false }), [])

          const echo = yield* connection.spawn({ ...spec(["sh", "-c", "printf 'a b'; echo \"$FOO\" >&2; pwd; exit 7"]), env: { FOO: "bar baz" } })
          const result = yield* collect(echo)
          assert.strictEqual(result.stdout, `a b${FlyBackend.HOME}\n`)
          assert.strictEqual(result.stderr, "bar baz\n")
          assert.deepStrictEqual(result.exits, [{ exitCode: 7, signal: null }])
          assert.strictEqual(result.last?._tag, "Exit")

          const missing = yield* Effect.flip(connection.spawn(spec(["no-such-command-kt"])))
          assert.strictEqual(missing._tag, "SpawnFailed")
          assert.match(missing.message, /command not found/)
          const badCwd = yield* Effect.flip(connection.spawn({ ...spec(["true"]), cwd: "/nonexistent" }))
          assert.match(badCwd.message, /working directory/)
          const tty = yield* Effect.flip(connection.spawn({ ...spec(["true"]), tty: { cols: 80, rows: 24 } }))
          assert.match(tty.message, /no terminals/)

          // Output that arrives over time, stdin, a signal to the group.
          const cat = yield* connection.spawn(spec(["sh", "-c", "trap 'echo term; exit 3' TERM; while read l; do echo \"got $l\"; done; sleep 300 & wait"]))
          yield* cat.write(new TextEncoder().encode("one\ntwo\n"))
          yield* cat.closeStdin
          yield* Effect.sleep(Duration.millis(600))
          yield* cat.signal("TERM")
          const catResult = yield* collect(cat)
          assert.strictEqual(catResult.stdout, "got one\ngot two\nterm\n")
          assert.deepStrictEqual(catResult.exits, [{ exitCode: 3, signal: null }])
          const resize = yield* Effect.flip(cat.resize(80, 24))
          assert.strictEqual(resize._tag, "Unsupported")

          yield* backend.remove(instance)
          assert.strictEqual(fake.machines.get(machineId)?.state, "destroyed", "remove returns once the machine is destroyed")
          assert.deepStrictEqual(yield* backend.find({ id: "life" }), [])
          yield* backend.remove(instance)
        }))
    }), 60_000)

  it.live("the lease is written where the reaper reads it", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url, { tuning: { leaseTtlMs: 900 } }), (backend) =>
        Effect.gen(function*() {
          assert.deepInclude(backend.renewal, { everyMs: 300, leaseMs: 900 })
          const instance = yield* backend.create(metadata("leased", true))
          yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
          const until = Date.parse("2031-01-02T03:04:05.000Z")
          const renewed = yield* backend.renewal!.renew(instance, until)
          assert.strictEqual(renewed.metadata.expires, "2031-01-02T03:04:05.000Z")
          assert.strictEqual(fake.machines.get(instance.providerId)!.config["metadata"]["kilntainers-expires"], "2031-01-02T03:04:05.000Z")
          const [found] = yield* backend.find({ id: "leased" })
          assert.strictEqual(found?.metadata.expires, "2031-01-02T03:04:05.000Z")
        }))
    }), 60_000)

  it.live("a stopped machine is found stopped and started again", () =>
    Effect.gen(function*() {
      fake.stopDelayMs = 0 // stopped at once: the machine is found stopped, not stopping (see the test of a stopping one)
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const instance = yield* backend.create(metadata("sleeper", false))
          yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
          fake.stopFromOutside(instance.providerId)
          const [stopped] = yield* backend.find({ id: "sleeper" })
          assert.strictEqual(stopped?.state, "stopped")
          const started = yield* backend.start(stopped!)
          assert.strictEqual(started.state, "running")
          assert.strictEqual(fake.machines.get(instance.providerId)?.state, "started")
          const connection = yield* backend.connect(started)
          assert.strictEqual((yield* collect(yield* connection.spawn(spec(["echo", "up"])))).stdout, "up\n")
        }))
    }), 60_000)

  it.live("a machine still stopping is waited for by its instance_id, and started only once it has stopped", () =>
    Effect.gen(function*() {
      fake.stopDelayMs = 3000 // wide enough that the machine is still stopping when found, even on a loaded machine
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const instance = yield* backend.create(metadata("stopping", false))
          yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
          fake.stopFromOutside(instance.providerId)
          const [found] = yield* backend.find({ id: "stopping" })
          assert.strictEqual(found?.state, "stopping", "Fly's own word for a state the kernel has none for")
          const from = fake.requests.length
          const started = yield* backend.start(found!)
          assert.strictEqual(started.state, "running")
          assert.strictEqual(fake.machines.get(instance.providerId)?.state, "started")
          const asked = fake.requests.slice(from).filter((request) => request.machine === instance.providerId)
          assert.deepStrictEqual(asked.filter((request) => request.status >= 400 && request.status !== 408), [], "no refused wait, no refused start")
          const connection = yield* backend.connect(started)
          assert.strictEqual((yield* collect(yield* connection.spawn(spec(["echo", "up"])))).stdout, "up\n")
        }))
    }), 60_000)

  it.live("a round whose answer is lost after it ran is sent again: the process it started is followed, once", () =>
    withBackend(options(fake.url), (backend) =>
      Effect.gen(function*() {
        const { connection } = yield* open(backend, "lostanswer")
        fake.failAfter(1, 408, /\/exec$/)
        const process = yield* connection.spawn(spec(["sh", "-c", "echo started; sleep 1; echo done"]))
        const result = yield* collect(process)
        assert.strictEqual(result.stdout, "started\ndone\n")
        assert.deepStrictEqual(result.exits, [{ exitCode: 0, signal: null }])
      })), 60_000)

  it.live("a round that fails for good after it ran leaves no process behind: the start is cleaned up", () =>
    withBackend(options(fake.url, { tuning: { maxRetries: 1 } }), (backend) =>
      Effect.gen(function*() {
        const { connection } = yield* open(backend, "leak")
        fake.failAfter(2, 502, /\/exec$/) // the first try and FlyApi's one retry: both ran, neither answered
        const refused = yield* Effect.flip(connection.spawn(spec(["sleep", "297"])))
        assert.match(refused.message, /502/)
        const left = yield* collect(yield* connection.spawn(spec(["sh", "-c", "ps -eo args | grep -c '^sleep 297$' || true"])))
        assert.strictEqual(left.stdout, "0\n", "the process the failed round started does not run on untracked")
      })), 60_000)

  it.live("a machine still starting is waited for, not started again", () =>
    Effect.gen(function*() {
      fake.bootDelayMs = 6000 // wide enough that the machine is still starting when found, even on a loaded machine
      const labels = FlyMetadata.encode(metadata("booting", false))
      const made = yield* Effect.promise(() =>
        post("", {
          name: "kilntainer-booting",
          config: { image: "debian", metadata: labels, init: { exec: ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"] } }
        })
      )
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const [found] = yield* backend.find({ id: "booting" })
          assert.strictEqual(found?.state, "starting", "Fly's own word for a state the kernel has none for")
          const from = fake.requests.length
          const started = yield* backend.start(found!)
          assert.strictEqual(started.state, "running")
          assert.strictEqual(fake.machines.get(made.id)?.state, "started")
          assert.isFalse(fake.requests.slice(from).some((request) => request.action === "POST start"), "no start asked of a starting machine")
          yield* backend.remove(found!)
        }))
    }).pipe(Effect.ensuring(Effect.sync(() => (fake.bootDelayMs = 0)))), 60_000)

  it.live("wait: a 408 means not yet and is asked again; a machine that never starts is a clear error and is removed", () =>
    Effect.gen(function*() {
      fake.bootDelayMs = 2500
      const from = fake.requests.length
      yield* withBackend(options(fake.url, { tuning: { waitTimeoutSeconds: 1 } }), (backend) =>
        Effect.gen(function*() {
          const { machineId } = yield* open(backend, "slowboot")
          assert.strictEqual(fake.machines.get(machineId)?.state, "started")
        }))
      const waits = fake.requests.slice(from).filter((request) => request.action === "GET wait")
      assert.isAtLeast(waits.filter((request) => request.status === 408).length, 1)
      assert.isAtMost(waits.length, 8)
      fake.bootDelayMs = 5000
      const error = yield* withBackend(options(fake.url, { tuning: { waitTimeoutSeconds: 1, startTimeoutMs: 1500 } }), (backend) =>
        Effect.flip(backend.create(metadata("neverboot", true))))
      assert.strictEqual(error.reason, "Timeout")
      assert.match(error.message, /did not become started within 2 s/)
      assert.isUndefined(fake.byName("kilntainer-neverboot"))
    }).pipe(Effect.ensuring(Effect.sync(() => (fake.bootDelayMs = 0)))), 60_000)

  it.live("a taken name is a Conflict; a machine of that name that is not ours is refused by the kernel and left alone", () =>
    Effect.gen(function*() {
      const foreign = yield* Effect.promise(() => post("", { name: "kilntainer-foreign", config: { image: "nginx" } }))
      const taken = yield* withBackend(options(fake.url), (backend) => Effect.flip(backend.create(metadata("foreign", true))))
      assert.strictEqual(taken.reason, "Conflict")
      const refused = yield* withKernel(options(fake.url), ({ computers }) => Effect.flip(computers.create("s", { computer_id: "foreign" })))
      assert.strictEqual(refused._tag, "ProviderError")
      assert.match(refused.message, /kilntainer-foreign: the name is taken .*not create for computer 'foreign' is left untouched/)
      assert.notStrictEqual(fake.machines.get(foreign.id)?.state, "destroyed")
      assert.isUndefined(fake.machines.get(foreign.id)?.config["metadata"])
      fake.destroyFromOutside(foreign.id)
    }), 60_000)

  it.live("5xx: retried a few times, then a clear error; nothing is left on the server", () =>
    Effect.gen(function*() {
      fake.failNext(2, 503, /^POST \/v1\/apps\/[^/]+\/machines$/)
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const { connection } = yield* open(backend, "flaky")
          assert.strictEqual(fake.live().filter((machine) => machine.name === "kilntainer-flaky").length, 1)
          assert.strictEqual((yield* collect(yield* connection.spawn(spec(["echo", "ok"])))).stdout, "ok\n")
        }))
      const before = fake.live().length
      fake.failNext(100, 502, /^POST \/v1\/apps\/[^/]+\/machines$/)
      const error = yield* withBackend(options(fake.url, { tuning: { maxRetries: 3 } }), (backend) =>
        Effect.flip(backend.create(metadata("broken", true))))
      assert.strictEqual(error._tag, "ProviderError")
      assert.strictEqual(error.reason, "Unavailable")
      assert.match(error.message, /^fly backend: cannot create a machine: HTTP 502: injected fault 502$/)
      assert.strictEqual(fake.live().length, before)
      assert.isUndefined(fake.byName("kilntainer-broken"))
    }).pipe(Effect.ensuring(Effect.sync(() => fake.clearFaults()))), 60_000)

  it.live("a request that gets no answer fails with a clear error", () =>
    Effect.gen(function*() {
      const error = yield* withBackend(options(fake.url, { tuning: { requestTimeoutMs: 300 } }), (backend) =>
        Effect.gen(function*() {
          fake.delayNext(1, 2000, /^GET \/v1\/apps\/[^/]+\/machines$/)
          return yield* Effect.flip(backend.find({}))
        }))
      assert.strictEqual(error._tag, "ProviderError")
      assert.strictEqual(error.reason, "Timeout")
      assert.match(error.message, /cannot list machines: no answer from the Fly API at .* within 0\.3 s/)
    }), 60_000)

  it.live("a machine destroyed or stopped from outside: lost fires and running processes end", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const busy = yield* open(backend, "doomed")
          const sleeper = yield* busy.connection.spawn(spec(["sleep", "300"]))
          const events = yield* collect(sleeper).pipe(Effect.fork)
          const idle = yield* open(backend, "idle", false)
          yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(idle.instance)))
          yield* Effect.sleep(Duration.millis(200))
          fake.destroyFromOutside(busy.machineId)
          fake.stopFromOutside(idle.machineId)
          const why = yield* busy.connection.lost.pipe(Effect.timeout(Duration.seconds(10)))
          assert.match(why, /destroyed outside kilntainers/)
          const ended = yield* Fiber.join(events).pipe(Effect.timeout(Duration.seconds(5)))
          assert.deepStrictEqual(ended.exits, [{ exitCode: null, signal: "SIGKILL" }])
          const idleWhy = yield* idle.connection.lost.pipe(Effect.timeout(Duration.seconds(10)))
          assert.match(idleWhy, /stopped outside kilntainers/)
          const refused = yield* Effect.flip(busy.connection.spawn(spec(["true"])))
          assert.match(refused.message, /gone/)
        }))
    }), 60_000)

  it.live("idle polling backs off: a quiet process costs an exec every two seconds at most", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url, { tuning: { watchIntervalMs: 60_000 } }), (backend) =>
        Effect.gen(function*() {
          const { connection } = yield* open(backend, "quiet")
          const from = fake.requests.length
          const result = yield* collect(yield* connection.spawn(spec(["sh", "-c", "sleep 3; echo done"])))
          assert.strictEqual(result.stdout, "done\n")
          const execs = fake.requests.slice(from).filter((request) => request.action === "POST exec").length
          assert.isAtMost(execs, 8, `${execs} exec calls for a 3 s process`)
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
      const failure = Exit.isFailure(wrong) ? Cause.failureOption(wrong.cause) : Option.none()
      assert.strictEqual(Option.getOrUndefined(failure)?.reason, "Denied")
      fake.failNext(3, 500, /exec$/)
      yield* withBackend(options(fake.url, { tuning: { requestTimeoutMs: 500 } }), (backend) =>
        Effect.gen(function*() {
          const { connection } = yield* open(backend, "secret")
          yield* collect(yield* connection.spawn(spec(["echo", "x"])))
          fake.delayNext(1, 1500, /^GET \/v1\/apps\/[^/]+\/machines$/)
          const error = yield* Effect.flip(backend.find({}))
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
})
