import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Layer, TestClock } from "effect"
import * as Runtime from "../../src/layers/Runtime.js"
import { Computers } from "../../src/services/Computers.js"
import { Processes } from "../../src/services/Processes.js"
import { Settings } from "../../src/services/Settings.js"
import * as ScriptedBackend from "../support/ScriptedBackend.js"

type Scripted = Effect.Effect.Success<ReturnType<typeof ScriptedBackend.make>>

const withKernel = <A, E>(
  body: (kernel: { readonly processes: Processes["Type"]; readonly computers: Computers["Type"]; readonly scripted: Scripted }) => Effect.Effect<A, E>,
  options: ScriptedBackend.ScriptedOptions = {}
) =>
  Effect.gen(function*() {
    const scripted = yield* ScriptedBackend.make(options)
    const context = yield* Layer.build(Runtime.layer(Settings.make({ killGraceMs: 100 }), scripted.layer, "this-server"))
    const processes = yield* Effect.provide(Processes, context)
    const computers = yield* Effect.provide(Computers, context)
    return yield* body({ processes, computers, scripted })
  })

/** Lets forked fibers run until the condition holds (bounded). */
const eventually = (condition: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1_000 && !condition(); i++) yield* Effect.yieldNow()
    assert.isTrue(condition(), "condition not reached")
  })

const permanent = (id: string) => ({
  id,
  temporary: false,
  image: "scripted-image",
  created: "2026-01-01T00:00:00.000Z",
  instance: "an-earlier-server"
})

describe("the computer lifecycle (ComputerActor and the registry)", () => {
  it.scoped("a computer is created once, connected, and named by the provider's id", () =>
    withKernel(({ computers, scripted }) =>
      Effect.gen(function*() {
        const computer = yield* computers.resolve("s1", { computer_id: "box" })
        assert.strictEqual(computer.id, "box")
        assert.strictEqual(yield* computer.providerId, "scripted-1")
        assert.deepStrictEqual(scripted.calls.filter((c) => !c.startsWith("find")), ["create box", "connect box"])
        const metadata = scripted.byId("box")!.instance.metadata
        assert.strictEqual(metadata.temporary, true)
        assert.strictEqual(metadata.instance, "this-server")
        assert.strictEqual(metadata.image, "scripted-image")
        assert.isDefined(metadata.owner)
      })
    ))

  it.scoped("two sessions asking for a new id at once create it once, with no lock around the provider", () =>
    withKernel(({ computers, scripted }) =>
      Effect.gen(function*() {
        const a = yield* Effect.fork(computers.resolve("s1", { computer_id: "shared-box", shared: true }))
        const b = yield* Effect.fork(computers.resolve("s1", { computer_id: "shared-box" }))
        // Another computer is not held up by the slow creation.
        const other = yield* Effect.fork(computers.resolve("s2", { computer_id: "other" }))
        yield* eventually(() => scripted.calls.filter((c) => c.startsWith("create")).length === 2)
        yield* scripted.openCreate
        const [first, second] = [yield* Fiber.join(a), yield* Fiber.join(b)]
        assert.strictEqual(first, second)
        assert.strictEqual((yield* Fiber.join(other)).id, "other")
        assert.strictEqual(scripted.calls.filter((c) => c === "create shared-box").length, 1)
      }), { gateCreate: true }))

  it.scoped("a restart during a running spawn ends the process, says why, and runs the next one on a new connection", () =>
    withKernel(({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        const started = yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })
        yield* computers.restart("s1", "box")
        const [info] = (yield* processes.list("s1")).processes
        assert.strictEqual(info!.pid, started.pid)
        assert.strictEqual(info!.status, "terminated")
        assert.match(info!.reason ?? "", /restarted/)
        assert.deepStrictEqual(scripted.spawned[0]!.signals, ["SIGTERM"])
        assert.includeMembers(scripted.calls, ["restart box", "disconnect box"])
        const next = yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })
        assert.strictEqual(next.status, "running")
        assert.strictEqual(scripted.spawned[1]!.generation, 2)
      })
    ))

  it.scoped("a lost computer ends its processes, refuses new ones, and is opened again on next use", () =>
    withKernel(({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })
        yield* scripted.byId("box")!.lose("its container was removed outside kilntainers")
        yield* eventually(() => scripted.calls.includes("disconnect box"))
        const [info] = (yield* processes.list("s1")).processes
        assert.strictEqual(info!.status, "terminated")
        assert.match(info!.reason ?? "", /computer lost: its container was removed/)
        const [listed] = yield* computers.list("s1")
        assert.strictEqual(listed!.state, "lost")
        // Gone at the provider too: the next use recreates it.
        scripted.computers.clear()
        const again = yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })
        assert.strictEqual(again.status, "running")
        assert.strictEqual(scripted.calls.filter((c) => c === "create box").length, 2)
        assert.strictEqual((yield* computers.list("s1"))[0]!.state, "running")
      })
    ))

  it.scoped("a process killed just before its computer is reported lost gets the loss as its reason", () =>
    withKernel(({ processes, scripted }) =>
      Effect.gen(function*() {
        const { pid } = yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })
        const done = yield* processes.spawn("s1", { command: "fail-fast", computer_id: "box" })
        // The container dies: its processes are killed, and the provider notices moments later.
        yield* scripted.spawned[0]!.emit({ _tag: "Exit", exit: { exitCode: null, signal: "SIGKILL" } })
        yield* scripted.spawned[0]!.end
        yield* TestClock.adjust("200 millis")
        yield* scripted.byId("box")!.lose("its container was removed outside kilntainers")
        yield* eventually(() => scripted.calls.includes("disconnect box"))
        const listed = (yield* processes.list("s1", { status: "all" })).processes
        assert.match(listed.find((p) => p.pid === pid)!.reason ?? "", /computer lost: its container was removed/)
        assert.isUndefined(listed.find((p) => p.pid === done.pid)!.reason, "a process that exited by itself keeps its plain exit")
      })
    ))

  it.scoped("deleting a computer during a wait ends the wait, and a new computer of the same id starts clean", () =>
    withKernel(({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        const { pid: id } = yield* processes.spawn("s1", { command: "server", computer_id: "a-private", background: true })
        const waiting = yield* Effect.fork(processes.wait("s1", { id, timeoutMs: 60_000 }))
        yield* computers.delete("s1", "a-private")
        const waited = yield* Fiber.join(waiting)
        assert.strictEqual(waited.outcome, "exited")
        assert.strictEqual(waited.status, "terminated")
        assert.include(scripted.calls, "remove a-private")
        // Session B makes a computer with the same id: none of A's processes are in reach.
        yield* computers.create("s2", { computer_id: "a-private" })
        assert.deepStrictEqual((yield* processes.list("s2")).processes, [])
        assert.deepStrictEqual((yield* processes.list("s1")).processes, [])
        assert.strictEqual((yield* Effect.flip(processes.read("s2", { id })))._tag, "ProcessNotFound")
      })
    ))

  it.scoped("a factory reset replaces the provider's computer from the recorded image", () =>
    withKernel(({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        const computer = yield* computers.resolve("s1", { computer_id: "box" })
        const before = yield* computer.providerId
        yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })
        yield* computers.factoryReset("s1", "box")
        const after = yield* computer.providerId
        assert.notStrictEqual(after, before)
        assert.includeMembers(scripted.calls, ["remove box"])
        assert.strictEqual(scripted.byId("box")!.instance.metadata.image, "scripted-image")
        assert.strictEqual((yield* processes.list("s1")).processes[0]!.status, "terminated")
      })
    ))

  it.scoped("a lost computer whose old instance can no longer start is factory reset from the image, never opened first", () =>
    withKernel(({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        const computer = yield* computers.resolve("s1", { computer_id: "box" })
        const before = yield* computer.providerId
        yield* scripted.refuseConnect(before, "its mounts no longer match the host (/p/data:/home/agent/data)")
        yield* scripted.byId("box")!.lose("its container stopped")
        yield* eventually(() => scripted.calls.includes("disconnect box"))
        const refused = yield* Effect.flip(processes.spawn("s1", { command: "server", computer_id: "box", background: true }))
        assert.match(refused.message, /mounts no longer match the host/)
        const connects = scripted.calls.filter((c) => c === "connect box").length
        yield* computers.factoryReset("s1", "box")
        assert.notStrictEqual(yield* computer.providerId, before)
        assert.include(scripted.calls, "remove box")
        assert.strictEqual(scripted.calls.filter((c) => c === "connect box").length, connects + 1, "only the new instance was connected")
        assert.strictEqual((yield* computers.list("s1"))[0]!.state, "running")
        assert.strictEqual((yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })).status, "running")
      })
    ))

  it.scoped("a permanent computer not attached here whose start is refused is factory reset without being started", () =>
    withKernel(({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        const old = yield* scripted.plant({ ...permanent("kept"), image: "recorded-image" }, "stopped")
        yield* scripted.refuseConnect(old.providerId, "its mounts no longer match the host (/p/data:/home/agent/data)")
        const refused = yield* Effect.flip(processes.spawn("s1", { command: "server", computer_id: "kept", background: true }))
        assert.match(refused.message, /mounts no longer match the host/)
        const before = scripted.calls.length
        const computer = yield* computers.factoryReset("s1", "kept")
        assert.notStrictEqual(yield* computer.providerId, old.providerId)
        assert.deepStrictEqual(scripted.calls.slice(before).filter((c) => !c.startsWith("find")), ["remove kept", "create kept", "connect kept"])
        const made = scripted.byId("kept")!.instance.metadata
        assert.deepStrictEqual([made.temporary, made.image], [false, "recorded-image"])
        assert.strictEqual((yield* processes.spawn("s1", { command: "server", computer_id: "kept", background: true })).status, "running")
      })
    ))

  it.scoped("an unknown id is still not found by a factory reset, and nothing is made", () =>
    withKernel(({ computers, scripted }) =>
      Effect.gen(function*() {
        assert.strictEqual((yield* Effect.flip(computers.factoryReset("s1", "nobody")))._tag, "ComputerNotFound")
        assert.notInclude(scripted.calls, "create nobody")
      })
    ))

  it.scoped("another session's private computer is refused, its processes invisible; shared ones are reachable", () =>
    withKernel(({ computers, processes }) =>
      Effect.gen(function*() {
        const { pid: id } = yield* processes.spawn("s1", { command: "server", computer_id: "mine", background: true })
        const denied = yield* Effect.flip(computers.resolve("s2", { computer_id: "mine" }))
        assert.strictEqual(denied._tag, "AccessDenied")
        assert.deepStrictEqual((yield* processes.list("s2")).processes, [])
        assert.strictEqual((yield* Effect.flip(processes.kill("s2", { id })))._tag, "ProcessNotFound")
        assert.deepStrictEqual((yield* computers.list("s2")).map((c) => c.computer_id), [])
        yield* computers.create("s1", { computer_id: "ours", shared: true })
        assert.strictEqual((yield* computers.resolve("s2", { computer_id: "ours" })).id, "ours")
      })
    ))

  it.scoped("a permanent computer is reachable by id alone from any session, started when stopped", () =>
    withKernel(({ computers, scripted }) =>
      Effect.gen(function*() {
        yield* scripted.plant(permanent("keeper"), "stopped")
        const listed = yield* computers.list("s9")
        assert.deepStrictEqual(listed.map((c) => [c.computer_id, c.state]), [["keeper", "stopped"]])
        const computer = yield* computers.resolve("s9", { computer_id: "keeper" })
        assert.strictEqual(computer.temporary, false)
        assert.includeMembers(scripted.calls, ["start keeper", "connect keeper"])
        assert.notInclude(scripted.calls, "create keeper")
        const wrong = yield* Effect.flip(computers.resolve("s9", { computer_id: "keeper", temporary: true }))
        assert.strictEqual(wrong._tag, "InvalidInput")
      })
    ))

  it.scoped("another server's temporary computer is never taken", () =>
    withKernel(({ computers, scripted }) =>
      Effect.gen(function*() {
        yield* scripted.plant({ ...permanent("theirs"), temporary: true })
        const error = yield* Effect.flip(computers.resolve("s1", { computer_id: "theirs" }))
        assert.strictEqual(error._tag, "AccessDenied")
        assert.notInclude(scripted.calls, "connect theirs")
      })
    ))

  it.scoped("a failed creation frees the id: the next call tries again", () =>
    withKernel(({ computers, scripted }) =>
      Effect.gen(function*() {
        yield* scripted.failNext("create", "quota exceeded")
        const error = yield* Effect.flip(computers.resolve("s1", { computer_id: "box" }))
        assert.strictEqual(error._tag, "ProviderError")
        assert.match(error.message, /quota exceeded/)
        yield* Effect.yieldNow()
        const computer = yield* computers.resolve("s1", { computer_id: "box" })
        assert.strictEqual(computer.id, "box")
      })
    ))

  it.scoped("on release the processes end while their connection still stands, then it closes", () =>
    withKernel(({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })
        yield* computers.release("s1")
        const signalled = scripted.calls.indexOf("signal SIGTERM")
        const disconnected = scripted.calls.indexOf("disconnect box")
        assert.isAtLeast(signalled, 0)
        assert.isAbove(disconnected, signalled, scripted.calls.join(", "))
        assert.isAbove(scripted.calls.indexOf("remove box"), disconnected)
      })
    ))

  it.scoped("a session's end removes its temporary computers; permanent ones stay", () =>
    withKernel(({ computers, scripted }) =>
      Effect.gen(function*() {
        yield* computers.create("s1", { computer_id: "scratch" })
        yield* computers.create("s1", { computer_id: "keeper", temporary: false })
        yield* computers.release("s1")
        assert.include(scripted.calls, "remove scratch")
        assert.notInclude(scripted.calls, "remove keeper")
        assert.isUndefined(scripted.byId("scratch"))
        assert.isDefined(scripted.byId("keeper"))
      })
    ))

  it.scoped("a lease is renewed on the kernel's clock while the computer is held", () =>
    withKernel(({ computers, scripted }) =>
      Effect.gen(function*() {
        yield* computers.create("s1", { computer_id: "leased" })
        const renewals = () => scripted.calls.filter((c) => c.startsWith("renew leased"))
        const expires = scripted.byId("leased")!.instance.metadata.expires
        assert.strictEqual(expires, new Date(600_000).toISOString())
        yield* TestClock.adjust("59 seconds")
        assert.strictEqual(renewals().length, 0)
        yield* TestClock.adjust("1 second")
        assert.deepStrictEqual(renewals(), [`renew leased ${new Date(660_000).toISOString()}`])
        yield* TestClock.adjust("60 seconds")
        assert.strictEqual(renewals().length, 2)
        yield* computers.release("s1")
        yield* TestClock.adjust("10 minutes")
        assert.strictEqual(renewals().length, 2)
      }), { renewal: { everyMs: 60_000, leaseMs: 600_000 } }))

  it.scoped("a computer nearing its provider's end of life warns in computer_list and in tool results", () =>
    withKernel(({ computers, processes }) =>
      Effect.gen(function*() {
        const early = yield* processes.spawn("s1", { command: "fail-fast", computer_id: "capped" })
        assert.isUndefined(early.note, "an hour left: nothing to say yet")
        const [listed] = yield* computers.list("s1")
        assert.strictEqual(listed!.ends_at, new Date(3_600_000).toISOString())
        assert.isUndefined(listed!.warning)
        yield* TestClock.adjust("55 minutes")
        const late = yield* processes.spawn("s1", { command: "fail-fast", computer_id: "capped" })
        assert.match(late.note ?? "", /ends this computer in 5 min/)
        assert.match((yield* computers.list("s1"))[0]!.warning ?? "", /in 5 min/)
        const exec = yield* processes.exec("s1", { command: "fail-fast", computer_id: "capped" })
        assert.match(exec.note ?? "", /in 5 min/)
      }), { endsAfterMs: 3_600_000 }))

  it.scoped("a capability the backend lacks is refused with Unsupported, before anything is touched", () =>
    withKernel(({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        yield* processes.spawn("s1", { command: "server", computer_id: "box", background: true })
        const restart = yield* Effect.flip(computers.restart("s1", "box"))
        assert.strictEqual(restart._tag, "Unsupported")
        assert.strictEqual((yield* Effect.flip(computers.factoryReset("s1", "box")))._tag, "Unsupported")
        assert.strictEqual((yield* processes.list("s1")).processes[0]!.status, "running")
        assert.deepStrictEqual(scripted.spawned[0]!.signals, [])
        const tty = yield* Effect.flip(processes.spawn("s1", { command: "vim", computer_id: "box", tty: true }))
        assert.strictEqual(tty._tag, "Unsupported")
        const permanent = yield* Effect.flip(computers.create("s1", { computer_id: "keep", temporary: false }))
        assert.strictEqual(permanent._tag, "Unsupported")
        assert.notInclude(scripted.calls, "create keep")
      }), { capabilities: { restart: false, factoryReset: false, pty: false, persistence: false } }))
})

const withPool = <A, E>(
  size: number,
  body: (kernel: { readonly computers: Computers["Type"]; readonly processes: Processes["Type"]; readonly scripted: Scripted }) => Effect.Effect<A, E>,
  options: ScriptedBackend.ScriptedOptions = {}
) =>
  Effect.gen(function*() {
    const scripted = yield* ScriptedBackend.make(options)
    const context = yield* Layer.build(Runtime.layer(Settings.make({ killGraceMs: 100, warmPool: size }), scripted.layer, "this-server"))
    const computers = yield* Effect.provide(Computers, context)
    const processes = yield* Effect.provide(Processes, context)
    return yield* body({ computers, processes, scripted })
  })

describe("the warm pool", () => {
  it.scoped("prepares computers ahead, hands one out under its real id, and refills", () =>
    withPool(2, ({ computers, processes, scripted }) =>
      Effect.gen(function*() {
        for (let i = 0; i < 1_000 && (yield* computers.pool)!.ready < 2; i++) yield* Effect.yieldNow()
        const prepared = [...scripted.computers.values()].map((c) => c.instance.metadata)
        assert.isTrue(prepared.every((m) => m.pooled === true && m.temporary && m.instance === "this-server"))
        assert.deepStrictEqual(yield* computers.pool, { size: 2, ready: 2, starting: 0, handedOut: 0 })
        const computer = yield* computers.create("s1", { computer_id: "fast" })
        assert.strictEqual(computer.id, "fast")
        assert.notInclude(scripted.calls, "create fast")
        assert.isTrue(scripted.calls.some((c) => /^adopt pool-.* as fast$/.test(c)))
        const spawned = yield* processes.spawn("s1", { command: "server", computer_id: "fast", background: true })
        assert.strictEqual(spawned.status, "running")
        // A named computer is not echoed back; ps says where the process runs.
        assert.notProperty(spawned, "computer_id")
        assert.strictEqual((yield* processes.list("s1")).processes.find((p) => p.pid === spawned.pid)?.computer_id, "fast")
        // Refilled in the background, once hand-outs pause for 100 ms.
        yield* TestClock.adjust("100 millis")
        yield* eventually(() => scripted.calls.filter((c) => c.startsWith("connect pool-")).length === 3)
        assert.strictEqual((yield* computers.pool)!.handedOut, 1)
        // Visible only to its session, removed with it, like any temporary computer.
        assert.strictEqual((yield* Effect.flip(computers.resolve("s2", { computer_id: "fast" })))._tag, "AccessDenied")
        yield* computers.release("s1")
        assert.isTrue(scripted.calls.some((c) => c.startsWith("remove fast") || /^remove pool-/.test(c)))
      })
    ))

  it.scoped("permanent computers are made fresh, never from the pool", () =>
    withPool(1, ({ computers, scripted }) =>
      Effect.gen(function*() {
        for (let i = 0; i < 1_000 && (yield* computers.pool)!.ready < 1; i++) yield* Effect.yieldNow()
        yield* computers.create("s1", { computer_id: "keeper", temporary: false })
        assert.include(scripted.calls, "create keeper")
        assert.strictEqual((yield* computers.pool)!.ready, 1)
      })
    ))

  it.scoped("a backend whose computers cannot be renamed refuses --warm-pool clearly", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make({ noAdopt: true })
      const built = yield* Effect.either(Layer.build(Runtime.layer(Settings.make({ warmPool: 2 }), scripted.layer, "x")))
      assert.isTrue(built._tag === "Left")
      if (built._tag === "Left") assert.match(String(built.left.message), /warm-pool/)
    }))
})
