import { assert, it } from "@effect/vitest"
import { Duration, Effect, Exit, Fiber, Logger, LogLevel } from "effect"
import { beforeEach } from "vitest"
import * as FlyMetadata from "../../../../src/layers/backends/fly/FlyMetadata.js"
import type { FlyFake } from "../../../support/FlyFake.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"
import { collect, open, options, post, spec, useFake, withBackend } from "./FlyTestSupport.js"


/** Processes in the machine whose command line matches `needle` (a grep pattern that does not match itself), counted from inside. */
const countInside = (needle: string) =>
  spec(["sh", "-c", `n=0; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q -- "${needle}" && n=$((n+1)); done; echo $n`])

describeIf(bwrapWorks, "bubblewrap (the Fly fake runs commands in it)")("the Fly supervisor: no process of ours is an exec's child", () => {
  const current = useFake()
  let fake: FlyFake
  beforeEach(() => {
    fake = current()
  })

  it.live("processes outlive the exec that started them, while what an exec leaves behind is killed", () =>
    Effect.gen(function*() {
      assert.strictEqual(fake.execChildren, "killed", "the fake assumes the worst of flyd")
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const computer = yield* open(backend, "outlive")
          const slow = yield* computer.connection.spawn(spec(["sh", "-c", "sleep 1.5; echo still here"]))
          const events = yield* collect(slow).pipe(Effect.fork)
          // A process detached from a raw exec does not survive it.
          yield* Effect.promise(() => post(fake.url, `/${computer.machineId}/exec`, { command: ["/bin/sh", "-c", "setsid -f sleep 1001"], timeout: 10 }))
          const left = yield* collect(yield* computer.connection.spawn(countInside("sleep 100[1]")))
          assert.strictEqual(left.stdout.trim(), "0")
          const result = yield* Fiber.join(events)
          assert.strictEqual(result.stdout, "still here\n")
          assert.deepStrictEqual(result.exits, [{ exitCode: 0, signal: null }])
        }))
    }), 60_000)

  it.live("a restart nobody asked for ends the processes and reports the computer lost", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url, { tuning: { watchIntervalMs: 60_000 } }), (backend) =>
        Effect.gen(function*() {
          const computer = yield* open(backend, "rebooted")
          const sleeper = yield* computer.connection.spawn(spec(["sleep", "300"]))
          const events = yield* collect(sleeper).pipe(Effect.fork)
          fake.restartFromOutside(computer.machineId)
          const why = yield* computer.connection.lost.pipe(Effect.timeout(Duration.seconds(15)))
          assert.match(why, /restarted outside kilntainers/)
          const ended = yield* Fiber.join(events).pipe(Effect.timeout(Duration.seconds(5)))
          assert.deepStrictEqual(ended.exits, [{ exitCode: null, signal: "SIGKILL" }])
        }))
    }), 60_000)

  it.live("a machine stopped from outside is found by asking its state, not by the exec's status", () =>
    Effect.gen(function*() {
      yield* withBackend(options(fake.url, { tuning: { watchIntervalMs: 600_000 } }), (backend) =>
        Effect.gen(function*() {
          const computer = yield* open(backend, "stopped-under", false)
          const sleeper = yield* computer.connection.spawn(spec(["sleep", "300"]))
          const events = yield* collect(sleeper).pipe(Effect.fork)
          const from = fake.requests.length
          fake.stopFromOutside(computer.machineId)
          const why = yield* computer.connection.lost.pipe(Effect.timeout(Duration.seconds(15)))
          assert.match(why, /stopped outside kilntainers/)
          yield* Fiber.join(events)
          const after = fake.requests.slice(from)
          assert.isTrue(after.some((request) => request.action === "POST exec" && request.status === 400), "exec answered a documented 400")
          assert.isTrue(after.some((request) => request.action === "GET machine"), "and the backend asked the machine")
          yield* backend.remove(computer.instance)
        }))
    }), 60_000)

  const legacyMachine = (id: string) =>
    post(fake.url, "", {
      name: FlyMetadata.machineName(id),
      config: {
        image: "debian:bookworm-slim",
        guest: { cpu_kind: "shared", cpus: 1, memory_mb: 256 },
        // The labels an older kilntainers wrote (no created, owner or nonce).
        metadata: {
          kilntainers: "true",
          "kilntainers-computer-id": id,
          "kilntainers-temporary": "false",
          "kilntainers-image": "debian:bookworm-slim",
          "kilntainers-instance": "older"
        },
        init: { exec: ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 2147483647 & wait $!; done"] },
        restart: { policy: "always" },
        rootfs: { persist: "always" }
      }
    })

  it.live("a machine made by an older kilntainers: the supervisor started from an exec works where flyd lets it live", () =>
    Effect.gen(function*() {
      fake.execChildren = "survive"
      const machine = yield* Effect.promise(() => legacyMachine("legacy-ok"))
      yield* Effect.sleep(Duration.millis(500))
      const logs: Array<string> = []
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const [found] = yield* backend.find({ id: "legacy-ok" })
          assert.strictEqual(found?.providerId, machine.id)
          assert.deepInclude(found?.metadata, { id: "legacy-ok", temporary: false, instance: "older" })
          const connection = yield* backend.connect(found!)
          assert.strictEqual((yield* collect(yield* connection.spawn(spec(["echo", "works"])))).stdout, "works\n")
          yield* backend.remove(found!)
        })).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => logs.push(String(message))))))
      assert.isTrue(logs.some((line) => /made without the kilntainers supervisor.*factory-reset/.test(line)), logs.join("\n"))
    }), 60_000)

  it.live("…and fails loudly where flyd ends what an exec left behind", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => legacyMachine("legacy-killed"))
      yield* Effect.sleep(Duration.millis(500))
      yield* withBackend(options(fake.url), (backend) =>
        Effect.gen(function*() {
          const [found] = yield* backend.find({ id: "legacy-killed" })
          const connection = yield* backend.connect(found!)
          const refused = yield* Effect.exit(Effect.flatMap(connection.spawn(spec(["echo", "works"])), collect))
          assert.isTrue(Exit.isFailure(refused))
          const why = yield* connection.lost.pipe(Effect.timeout(Duration.seconds(10)))
          assert.match(why, /supervisor .* is not running any more.*older kilntainers.*factory-reset/)
          yield* backend.remove(found!)
        }))
    }), 60_000)

  it.live("memory that is not a multiple of 256 MB is refused at startup", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(withBackend(options(fake.url, { memoryMb: 300 }), () => Effect.void))
      assert.match(error.message, /invalid memory 300 MB: Fly wants a multiple of 256 MB/)
    }).pipe(Logger.withMinimumLogLevel(LogLevel.None)), 30_000)
})
