import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Logger, Scope, TestClock } from "effect"
import * as ComputerActor from "../../src/actors/ComputerActor.js"
import type { ProcessRequest } from "../../src/services/Computers.js"
import * as ScriptedBackend from "../support/ScriptedBackend.js"
import * as ScriptedProcess from "../support/ScriptedProcess.js"

type Scripted = Effect.Effect.Success<ReturnType<typeof ScriptedBackend.make>>

const server = { instanceId: "this-server", owner: { host: "test-host", pid: 1, start: "0" } }

/** A computer actor over the scripted provider, in its own Scope (closing it is its release). */
const computer = (
  scripted: Scripted,
  options: Partial<ComputerActor.ComputerActorOptions> = {},
  origin: ComputerActor.Origin = { _tag: "Create" }
) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const actor = yield* ComputerActor.make(scripted.backend, {
      id: "box",
      temporary: true,
      shared: false,
      session: "s1",
      incarnation: 1,
      killGraceMs: 100,
      server,
      ...options
    }, origin).pipe(Scope.extend(scope))
    return { actor, scope }
  })

/** A running computer over the scripted provider. */
const running = (options: ScriptedBackend.ScriptedOptions = {}, actorOptions: Partial<ComputerActor.ComputerActorOptions> = {}) =>
  Effect.gen(function*() {
    const scripted = yield* ScriptedBackend.make(options)
    const { actor, scope } = yield* computer(scripted, actorOptions)
    yield* actor.ready
    return { scripted, actor, scope }
  })

let requests = 0
const request = (command: string): ProcessRequest => ({
  id: `p${++requests}`,
  command,
  spec: ScriptedProcess.spec(command),
  headBytes: 1024,
  tailBytes: 1024,
  mailboxCapacity: 16,
  onExit: () => Effect.void
})

/** Lets forked fibers run until the condition holds (bounded: no wall clock). */
const eventually = (condition: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 1_000 && !condition(); i++) yield* Effect.yieldNow()
    assert.isTrue(condition(), "condition not reached")
  })

const settle = Effect.gen(function*() {
  for (let i = 0; i < 50; i++) yield* Effect.yieldNow()
})

const count = (scripted: Scripted, call: string) => scripted.calls.filter((c) => c === call).length

/** Captures what is logged while `body` runs. */
const logged = <A, E, R>(logs: Array<string>, body: Effect.Effect<A, E, R>) =>
  Effect.provide(body, Logger.replace(Logger.defaultLogger, Logger.make(({ message }) => {
    logs.push(Array.isArray(message) ? message.join(" ") : String(message))
  })))

describe("ComputerActor: lifecycle races", () => {
  it.scoped("two restarts at once run one after the other, each ending with its own new connection", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      const open = yield* scripted.gate("restart")
      const first = yield* Effect.fork(actor.restart)
      yield* eventually(() => count(scripted, "restart box") === 1)
      const second = yield* Effect.fork(actor.restart)
      yield* settle
      assert.strictEqual(count(scripted, "restart box"), 1, "the second waits for the first to finish")
      assert.strictEqual(yield* actor.state, "restarting")
      yield* open
      yield* Fiber.join(first)
      yield* Fiber.join(second)
      assert.deepStrictEqual(scripted.calls.filter((c) => !c.startsWith("find")), [
        "create box",
        "connect box",
        "disconnect box",
        "restart box",
        "connect box",
        "disconnect box",
        "restart box",
        "connect box"
      ])
      assert.strictEqual(yield* actor.state, "running")
      yield* actor.spawn(request("server"))
      assert.strictEqual(scripted.spawned[0]!.generation, 3)
    }))

  it.scoped("a restart during a running spawn ends the process first, says why, and the next spawn runs on the new connection", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      const process = yield* actor.spawn(request("server"))
      const waiting = yield* Effect.fork(process.exited)
      yield* actor.restart
      assert.deepStrictEqual(yield* Fiber.join(waiting), { exitCode: null, signal: "SIGTERM" })
      assert.match((yield* process.info).reason ?? "", /^computer box restarted$/)
      const [signalled, disconnected, restarted] = ["signal SIGTERM", "disconnect box", "restart box"].map((c) => scripted.calls.indexOf(c))
      assert.isTrue(signalled! < disconnected! && disconnected! < restarted!, scripted.calls.join(", "))
      assert.strictEqual(yield* actor.liveProcesses, 0)
      const next = yield* actor.spawn(request("server"))
      assert.strictEqual(yield* next.status, "running")
      assert.strictEqual(scripted.spawned[1]!.generation, 2)
    }))

  it.scoped("a restart while a spawn is still starting at the provider ends that spawn with an error, not a hang", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      const open = yield* scripted.gate("spawn")
      const spawning = yield* Effect.fork(Effect.either(actor.spawn(request("server"))))
      yield* settle
      yield* actor.restart
      yield* open
      const result = yield* Fiber.await(spawning)
      assert.isTrue(Exit.isSuccess(result), `the caller gets an answer, not an interruption: ${String(result)}`)
      const answer = Exit.isSuccess(result) ? result.value : undefined
      assert.isTrue(answer?._tag === "Left" && answer.left._tag === "SpawnFailed")
      if (answer?._tag === "Left") assert.strictEqual(answer.left.message, "could not start 'server': computer box restarted before it started")
      assert.strictEqual(yield* actor.state, "running")
      assert.strictEqual(yield* actor.liveProcesses, 0)
    }))

  it.scoped("a process that ignores SIGTERM is killed once the kill grace has passed on the Clock", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running({}, { killGraceMs: 5_000 })
      const stubborn = yield* actor.spawn(request("ignore-term"))
      const restarting = yield* Effect.fork(actor.restart)
      yield* eventually(() => scripted.spawned[0]!.signals.length === 1)
      yield* settle
      assert.notInclude(scripted.calls, "restart box", "the provider waits while the grace runs")
      yield* TestClock.adjust("4999 millis")
      assert.notInclude(scripted.calls, "restart box")
      yield* TestClock.adjust("1 millis")
      yield* Fiber.join(restarting)
      assert.include(scripted.calls, "restart box")
      const info = yield* stubborn.info
      assert.strictEqual(info.signal, "SIGKILL")
      assert.strictEqual(info.reason, "computer box restarted")
    }))

  it.scoped("deleting a computer during a wait ends the wait, removes it at the provider, and refuses new work", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      const process = yield* actor.spawn(request("server"))
      const waiting = yield* Effect.fork(process.exited)
      yield* actor.destroy
      assert.strictEqual((yield* Fiber.join(waiting)).signal, "SIGTERM")
      assert.strictEqual((yield* process.info).reason, "computer box deleted")
      assert.strictEqual(yield* actor.state, "deleted")
      yield* actor.deleted
      assert.isUndefined(scripted.byId("box"))
      const refused = yield* Effect.flip(actor.spawn(request("server")))
      assert.strictEqual(refused._tag, "ComputerUnavailable")
      assert.strictEqual((yield* Effect.flip(actor.restart))._tag, "ComputerUnavailable")
    }))

  it.scoped("destroy is idempotent, and releasing a deleted computer removes nothing more", () =>
    Effect.gen(function*() {
      const { scripted, actor, scope } = yield* running()
      yield* Effect.all([actor.destroy, actor.destroy], { concurrency: "unbounded" })
      yield* actor.destroy
      assert.strictEqual(count(scripted, "remove box"), 1)
      yield* Scope.close(scope, Exit.void)
      yield* actor.closed
      assert.strictEqual(count(scripted, "remove box"), 1)
      assert.strictEqual(yield* actor.state, "deleted")
    }))

  it.scoped("a failed delete leaves the computer lost, saying so, and it can be deleted again", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      yield* scripted.failNext("remove", "the provider is down")
      const error = yield* Effect.flip(actor.destroy)
      assert.match(error.message, /the provider is down/)
      assert.strictEqual(yield* actor.state, "lost")
      assert.match((yield* Effect.flip(actor.spawn(request("server")))).message, /delete failed/)
      yield* actor.destroy
      assert.strictEqual(yield* actor.state, "deleted")
    }))
})

describe("ComputerActor: lost computers", () => {
  it.scoped("a lost computer ends its processes with the reason and refuses new ones until recovered", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      const process = yield* actor.spawn(request("server"))
      yield* scripted.byId("box")!.lose("its container was removed outside kilntainers")
      yield* process.exited
      assert.strictEqual((yield* process.info).reason, "computer lost: its container was removed outside kilntainers")
      yield* eventually(() => scripted.calls.includes("disconnect box"))
      assert.strictEqual(yield* actor.state, "lost")
      const refused = yield* Effect.flip(actor.spawn(request("server")))
      assert.strictEqual(refused._tag, "ComputerUnavailable")
      assert.match(refused.message, /its container was removed/)
      // Still there at the provider (stopped): recover starts it and connects, keeping its instance.
      const kept = scripted.byId("box")!
      kept.instance = { ...kept.instance, state: "stopped" }
      const providerId = yield* actor.providerId
      yield* actor.recover
      assert.strictEqual(yield* actor.state, "running")
      assert.strictEqual(yield* actor.providerId, providerId)
      assert.includeMembers(scripted.calls, ["start box"])
      assert.strictEqual(count(scripted, "create box"), 1)
      yield* actor.spawn(request("server"))
      assert.strictEqual(scripted.spawned.at(-1)!.generation, 2)
    }))

  it.scoped("recovering a computer the provider no longer has creates it again; recovering a running one does nothing", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      yield* actor.recover
      assert.strictEqual(count(scripted, "connect box"), 1, "not lost: nothing to do")
      yield* scripted.byId("box")!.lose("machine destroyed")
      yield* eventually(() => scripted.calls.includes("disconnect box"))
      scripted.computers.clear()
      yield* actor.recover
      assert.strictEqual(count(scripted, "create box"), 2)
      assert.strictEqual(yield* actor.state, "running")
      assert.strictEqual(yield* actor.providerId, "scripted-2")
    }))

  it.scoped("a loss noticed right after a process was killed explains its end; one noticed later does not", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      const soon = yield* actor.spawn(request("server"))
      const early = yield* actor.spawn(request("server"))
      const clean = yield* actor.spawn(request("fail-fast"))
      yield* clean.exited
      // `early` was killed 6 s before the loss: too long ago to be explained by it.
      yield* scripted.spawned[1]!.emit({ _tag: "Exit", exit: { exitCode: null, signal: "SIGKILL" } })
      yield* scripted.spawned[1]!.end
      yield* early.closed
      yield* TestClock.adjust("6 seconds")
      yield* scripted.spawned[0]!.emit({ _tag: "Exit", exit: { exitCode: null, signal: "SIGKILL" } })
      yield* scripted.spawned[0]!.end
      yield* soon.closed
      yield* TestClock.adjust("200 millis")
      yield* scripted.byId("box")!.lose("its container was removed outside kilntainers")
      yield* eventually(() => scripted.calls.includes("disconnect box"))
      assert.strictEqual((yield* soon.info).reason, "computer lost: its container was removed outside kilntainers")
      assert.isUndefined((yield* early.info).reason)
      assert.isUndefined((yield* clean.info).reason, "a process that exited by itself keeps its plain exit")
    }))

  it.scoped("a failed restart leaves the computer lost, saying so; recover brings it back", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      yield* scripted.failNext("restart", "the engine refused")
      const error = yield* Effect.flip(actor.restart)
      assert.match(error.message, /the engine refused/)
      assert.strictEqual(yield* actor.state, "lost")
      assert.match((yield* Effect.flip(actor.spawn(request("server")))).message, /restart failed/)
      yield* actor.recover
      assert.strictEqual(yield* actor.state, "running")
    }))

  it.scoped("a failed factory reset leaves the computer lost, saying which step failed", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      yield* scripted.failNext("remove", "the engine is gone")
      assert.match((yield* Effect.flip(actor.factoryReset)).message, /the engine is gone/)
      assert.strictEqual(yield* actor.state, "lost")
      const refused = yield* Effect.flip(actor.spawn(request("server")))
      assert.strictEqual(refused._tag, "ComputerUnavailable")
      assert.match(refused.message, /factory reset failed/)
    }))

  it.scoped("a failed recovery leaves it lost, and the next use tries again", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      yield* scripted.byId("box")!.lose("agent killed")
      yield* eventually(() => scripted.calls.includes("disconnect box"))
      yield* scripted.failNext("connect", "agent did not start")
      assert.match((yield* Effect.flip(actor.recover)).message, /agent did not start/)
      assert.strictEqual(yield* actor.state, "lost")
      yield* actor.recover
      assert.strictEqual(yield* actor.state, "running")
    }))
})

describe("ComputerActor: creation and release", () => {
  it.scoped("a failed create fails ready and leaves the actor failed", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      yield* scripted.failNext("create", "quota exceeded")
      const { actor } = yield* computer(scripted)
      assert.match((yield* Effect.flip(actor.ready)).message, /quota exceeded/)
      assert.strictEqual(yield* actor.state, "failed")
      assert.strictEqual((yield* Effect.flip(actor.spawn(request("server"))))._tag, "ComputerUnavailable")
    }))

  it.scoped("a computer that was never created refuses a restart or reset: there is nothing to act on", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      yield* scripted.failNext("create", "quota exceeded")
      const { actor } = yield* computer(scripted)
      yield* Effect.flip(actor.ready)
      assert.strictEqual((yield* Effect.flip(actor.restart))._tag, "ComputerUnavailable")
      assert.strictEqual((yield* Effect.flip(actor.factoryReset))._tag, "ComputerUnavailable")
      assert.strictEqual(yield* actor.state, "failed")
      assert.notInclude(scripted.calls, "restart box")
    }))

  it.scoped("a permanent computer whose name is taken by our own permanent computer attaches to it", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      const planted = yield* scripted.plant({
        id: "keeper",
        temporary: false,
        image: "scripted-image",
        created: "2026-01-01T00:00:00.000Z",
        instance: "an-earlier-server"
      }, "stopped")
      const { actor } = yield* computer(scripted, { id: "keeper", temporary: false })
      yield* actor.ready
      assert.strictEqual(yield* actor.providerId, planted.providerId)
      assert.includeMembers(scripted.calls, ["create keeper", "find keeper", "start keeper", "connect keeper"])
      assert.strictEqual((yield* actor.info).created_at, "2026-01-01T00:00:00.000Z")
    }))

  it.scoped("released, a temporary computer is removed and a permanent one suspended, after its processes end", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      const temporary = yield* computer(scripted, { id: "scratch" })
      const permanent = yield* computer(scripted, { id: "keeper", temporary: false })
      yield* temporary.actor.ready
      yield* permanent.actor.ready
      const process = yield* temporary.actor.spawn(request("server"))
      yield* Scope.close(temporary.scope, Exit.void)
      yield* Scope.close(permanent.scope, Exit.void)
      yield* temporary.actor.closed
      assert.strictEqual((yield* process.info).reason, "computer scratch closed")
      assert.strictEqual(yield* temporary.actor.state, "closed")
      assert.include(scripted.calls, "remove scratch")
      assert.include(scripted.calls, "suspend keeper")
      assert.notInclude(scripted.calls, "remove keeper")
      assert.isDefined(scripted.byId("keeper"))
    }))
})

describe("ComputerActor: lease renewal", () => {
  const renewal = { everyMs: 60_000, leaseMs: 600_000 }
  const renewals = (scripted: Scripted) => scripted.calls.filter((c) => c.startsWith("renew "))

  it.scoped("renews every everyMs of the Clock, each time for a lease from now", () =>
    Effect.gen(function*() {
      const { scripted } = yield* running({ renewal })
      assert.strictEqual(scripted.byId("box")!.instance.metadata.expires, new Date(600_000).toISOString())
      yield* TestClock.adjust("59999 millis")
      assert.deepStrictEqual(renewals(scripted), [])
      yield* TestClock.adjust("1 millis")
      assert.deepStrictEqual(renewals(scripted), [`renew box ${new Date(660_000).toISOString()}`])
      yield* TestClock.adjust("2 minutes")
      assert.deepStrictEqual(renewals(scripted).slice(1), [
        `renew box ${new Date(720_000).toISOString()}`,
        `renew box ${new Date(780_000).toISOString()}`
      ])
    }))

  it.scoped("a failed renewal is logged and tried again next time", () => {
    const logs: Array<string> = []
    return logged(logs, Effect.gen(function*() {
      const { scripted } = yield* running({ renewal })
      yield* scripted.failNext("renew", "503 from the provider")
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(renewals(scripted).length, 1)
      assert.isTrue(logs.some((line) => /computer box: cannot renew its lease: .*503 from the provider/.test(line)), logs.join("\n"))
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(renewals(scripted).length, 2)
      assert.strictEqual(scripted.byId("box")!.instance.metadata.expires, new Date(720_000).toISOString())
    }))
  })

  it.scoped("no renewal while the computer is lost, none once it is deleted", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running({ renewal })
      yield* scripted.byId("box")!.lose("machine stopped")
      yield* eventually(() => scripted.calls.includes("disconnect box"))
      yield* TestClock.adjust("3 minutes")
      assert.deepStrictEqual(renewals(scripted), [])
      yield* actor.recover
      yield* TestClock.adjust("1 minute")
      assert.strictEqual(renewals(scripted).length, 1)
      yield* actor.destroy
      yield* TestClock.adjust("10 minutes")
      assert.strictEqual(renewals(scripted).length, 1)
    }))
})

describe("ComputerActor: the warm pool's hand-out", () => {
  it.scoped("a pooled computer carries the pool's mark; adopt renames it at the provider and gives it to its session", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      const { actor } = yield* computer(scripted, { id: "pool-abc", session: "" }, { _tag: "Create", pooled: true })
      yield* actor.ready
      assert.isTrue(scripted.byId("pool-abc")!.instance.metadata.pooled)
      assert.isFalse(actor.visibleTo("s1"))
      yield* actor.adopt({ id: "fast", session: "s1", shared: false })
      assert.strictEqual(actor.id, "fast")
      assert.include(scripted.calls, "adopt pool-abc as fast")
      assert.strictEqual(scripted.byId("fast")!.instance.metadata.id, "fast")
      assert.isTrue(actor.visibleTo("s1"))
      assert.isFalse(actor.visibleTo("s2"))
      const process = yield* actor.spawn(request("server"))
      assert.strictEqual(process.computerId, "fast")
      // Its lifecycle now speaks of its real id.
      yield* actor.destroy
      assert.include(scripted.calls, "remove fast")
    }))

  it.scoped("adopt refuses a computer that is not running, and a provider that cannot rename", () =>
    Effect.gen(function*() {
      const { scripted, actor } = yield* running()
      yield* scripted.byId("box")!.lose("gone")
      yield* eventually(() => scripted.calls.includes("disconnect box"))
      const notRunning = yield* Effect.flip(actor.adopt({ id: "fast", session: "s1", shared: false }))
      assert.strictEqual(notRunning._tag, "ProviderError")
      assert.match(notRunning.message, /hand out a pooled computer/)
      assert.strictEqual(actor.id, "box")
      const fixed = yield* ScriptedBackend.make({ noAdopt: true })
      const { actor: other } = yield* computer(fixed, { id: "pool-x", session: "" }, { _tag: "Create", pooled: true })
      yield* other.ready
      assert.strictEqual((yield* Effect.flip(other.adopt({ id: "fast", session: "s1", shared: false })))._tag, "Unsupported")
    }))
})
