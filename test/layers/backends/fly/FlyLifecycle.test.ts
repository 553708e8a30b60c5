/**
 * Fly machines through the kernel (the runtime over the Fly provider): what the kernel's lifecycle
 * decisions mean on Fly — which machine stays, which goes, which is started, restarted, replaced,
 * reaped or renewed. The decisions themselves are tested once, in test/layers/ComputerLifecycle.test.ts.
 */
import { assert, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { beforeEach } from "vitest"
import * as FlyBackend from "../../../../src/layers/backends/fly/FlyBackend.js"
import type { FlyFake } from "../../../support/FlyFake.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"
import { options, post as postTo, useFake, withKernel } from "./FlyTestSupport.js"

/** Waits (bounded) until the condition holds. */
const eventually = (what: string, condition: () => boolean, seconds = 15) =>
  Effect.gen(function*() {
    for (let i = 0; i < seconds * 10 && !condition(); i++) yield* Effect.sleep(Duration.millis(100))
    assert.isTrue(condition(), what)
  })

describeIf(bwrapWorks, "bubblewrap (the Fly fake runs commands in it)")("Fly machines through the kernel", () => {
  const current = useFake()
  let fake: FlyFake
  beforeEach(() => {
    fake = current()
  })
  const post = (path: string, body: unknown) => postTo(fake.url, path, body)
  const machineOf = (id: string) => fake.byName(FlyBackend.machineName(id))

  it.live("a temporary machine goes with its server; a permanent one stays, and the next server finds it by id", () =>
    Effect.gen(function*() {
      let temporary = ""
      let permanent = ""
      yield* withKernel(options(fake.url), ({ computers, processes }) =>
        Effect.gen(function*() {
          const made = yield* processes.exec("s", { command: "echo hi", computer_id: "passing" })
          assert.strictEqual(made.stdout, "hi\n")
          temporary = machineOf("passing")!.id
          yield* computers.create("s", { computer_id: "keeper", temporary: false })
          yield* processes.exec("s", { command: "echo kept > note", computer_id: "keeper" })
          permanent = machineOf("keeper")!.id
        }))
      assert.strictEqual(fake.machines.get(temporary)?.state, "destroyed")
      const kept = fake.machines.get(permanent)!
      assert.strictEqual(kept.state, "started", "a permanent machine stays")
      assert.strictEqual(kept.config["rootfs"]["persist"], "always")
      assert.strictEqual(kept.config["restart"]["policy"], "always")
      assert.strictEqual(kept.config["auto_destroy"], false)
      yield* withKernel(options(fake.url), ({ computers, processes }) =>
        Effect.gen(function*() {
          const listed = (yield* computers.list("other")).find((computer) => computer.computer_id === "keeper")
          assert.deepInclude(listed, { computer_id: "keeper", temporary: false, sandbox_id: permanent, image: FlyBackend.DEFAULT_IMAGE, backend: "fly" })
          const read = yield* processes.exec("other", { command: "cat note", computer_id: "keeper" })
          assert.strictEqual(read.stdout, "kept\n")
          // The machine holds its processes: the first server's finished one is listed here, ended, under its handle.
          const earlier = (yield* processes.list("other", { computer_id: "keeper", status: "all" })).processes
            .find((one) => one.command.includes("echo kept > note"))
          assert.isDefined(earlier, "the first server's process is the machine's record")
          assert.deepInclude(earlier, { pid: "p1", exitCode: 0 })
          assert.notStrictEqual(earlier!.status, "running")
          assert.strictEqual(machineOf("keeper")?.id, permanent, "the same machine, not a new one")
          yield* computers.delete("other", "keeper")
        }))
      assert.strictEqual(fake.machines.get(permanent)?.state, "destroyed")
    }), 90_000)

  it.live("a stopped permanent machine is started again when it is next used", () =>
    Effect.gen(function*() {
      fake.stopDelayMs = 0 // stopped at once: the machine is found stopped, not stopping (see the test of a stopping one)
      yield* withKernel(options(fake.url), ({ computers }) => computers.create("s", { computer_id: "sleeper", temporary: false }))
      const machine = machineOf("sleeper")!.id
      fake.stopFromOutside(machine)
      assert.strictEqual(fake.machines.get(machine)?.state, "stopped")
      yield* withKernel(options(fake.url), ({ computers, processes }) =>
        Effect.gen(function*() {
          const up = yield* processes.exec("s", { command: "echo up", computer_id: "sleeper" })
          assert.strictEqual(up.stdout, "up\n")
          assert.strictEqual(fake.machines.get(machine)?.state, "started")
          yield* computers.delete("s", "sleeper")
        }))
    }), 90_000)

  it.live("restart keeps the machine and its files; factory reset replaces the machine from the recorded image", () =>
    Effect.gen(function*() {
      yield* withKernel(options(fake.url), ({ computers, processes }) =>
        Effect.gen(function*() {
          const computer = yield* computers.create("s", { computer_id: "cycle" })
          const first = yield* computer.providerId
          yield* processes.exec("s", { command: "echo x > file", computer_id: "cycle" })
          const sleeper = yield* processes.spawn("s", { command: "sleep 300", computer_id: "cycle", background: true })
          yield* computers.restart("s", "cycle")
          const ended = (yield* processes.list("s", { status: "all" })).processes.find((p) => p.pid === sleeper.pid)
          assert.strictEqual(ended?.status, "terminated")
          assert.strictEqual((yield* processes.exec("s", { command: "cat file", computer_id: "cycle" })).stdout, "x\n")
          assert.strictEqual(yield* computer.providerId, first)
          yield* computers.factoryReset("s", "cycle")
          const second = yield* computer.providerId
          assert.notStrictEqual(second, first)
          assert.strictEqual(fake.machines.get(first)?.state, "destroyed")
          assert.strictEqual(fake.machines.get(second)?.config["image"], FlyBackend.DEFAULT_IMAGE)
          assert.strictEqual(fake.machines.get(second)?.name, "kilntainer-cycle")
          const gone = yield* processes.exec("s", { command: "ls file 2>&1; true", computer_id: "cycle" })
          assert.match(gone.stdout, /No such file/)
        }))
    }), 90_000)

  it.live("a machine destroyed from outside: its processes end, and the computer is made again on next use", () =>
    Effect.gen(function*() {
      yield* withKernel(options(fake.url), ({ processes }) =>
        Effect.gen(function*() {
          const sleeper = yield* processes.spawn("s", { command: "sleep 300", computer_id: "doomed", background: true })
          const first = machineOf("doomed")!.id
          fake.destroyFromOutside(first)
          const waited = yield* processes.wait("s", { id: sleeper.pid, timeoutMs: 15_000 })
          assert.strictEqual(waited.outcome, "exited")
          const listed = (yield* processes.list("s", { status: "all" })).processes.find((p) => p.pid === sleeper.pid)
          assert.match(listed?.reason ?? "", /destroyed outside kilntainers/)
          const again = yield* processes.exec("s", { command: "echo back", computer_id: "doomed" })
          assert.strictEqual(again.stdout, "back\n")
          assert.notStrictEqual(machineOf("doomed")?.id, first)
        }))
    }), 90_000)

  it.live("the reaper destroys other servers' temporary machines whose lease expired; the kernel renews the lease of those it holds", () =>
    Effect.gen(function*() {
      const labels = (instance: string, temporary: boolean, expires: string) => ({
        kilntainers: "true",
        "kilntainers-computer-id": `reap-${instance}`,
        "kilntainers-temporary": String(temporary),
        "kilntainers-image": "debian:bookworm-slim",
        "kilntainers-instance": instance,
        "kilntainers-expires": expires
      })
      const past = new Date(Date.now() - 60_000).toISOString()
      const future = new Date(Date.now() + 600_000).toISOString()
      const machine = (name: string, metadata: Record<string, string>) =>
        Effect.promise(() => post("", { name, config: { image: "debian", metadata } }))
      const expired = yield* machine("kilntainer-reap-a", labels("a", true, past))
      const leased = yield* machine("kilntainer-reap-b", labels("b", true, future))
      const permanent = yield* machine("kilntainer-reap-c", labels("c", false, past))
      const foreign = yield* machine("other-app-machine", { "kilntainers-temporary": "true" })
      // A lease long enough to outlast a create on a loaded machine, short enough to see it renewed
      // (every third of it) within the wait below.
      yield* withKernel(options(fake.url, { tuning: { leaseTtlMs: 6000 } }), ({ computers }) =>
        Effect.gen(function*() {
          yield* eventually("the expired machine is reaped", () => fake.machines.get(expired.id)?.state === "destroyed")
          assert.notStrictEqual(fake.machines.get(leased.id)?.state, "destroyed")
          assert.notStrictEqual(fake.machines.get(permanent.id)?.state, "destroyed")
          assert.notStrictEqual(fake.machines.get(foreign.id)?.state, "destroyed")
          const computer = yield* computers.create("s", { computer_id: "leased" })
          const id = yield* computer.providerId
          const expiry = () => Date.parse(fake.machines.get(id)!.config["metadata"]["kilntainers-expires"] as string)
          const first = expiry()
          assert.isAbove(first, Date.now())
          yield* eventually("the lease is renewed", () => expiry() > first, 10)
        }))
      for (const other of [leased, permanent, foreign]) fake.destroyFromOutside(other.id)
    }), 90_000)
})
