/**
 * Lifecycle steps across servers: restart, reset and delete take the computer's lease
 * (Connection.lease, the agent's on host and Docker) for the step, so that two servers never run
 * steps on one computer at once; while another server holds it, the step is refused with a Conflict
 * that names the other server's step, and nothing of the computer changes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Scope } from "effect"
import * as ComputerActor from "../../src/actors/ComputerActor.js"
import type { ProcessRequest } from "../../src/services/Computers.js"
import * as ScriptedBackend from "../support/ScriptedBackend.js"
import * as ScriptedProcess from "../support/ScriptedProcess.js"

const server = { instanceId: "this-server", owner: { host: "test-host", pid: 1, start: "0" } }

const running = Effect.gen(function*() {
  const scripted = yield* ScriptedBackend.make({ leases: true })
  const scope = yield* Scope.make()
  const actor = yield* ComputerActor.make(scripted.backend, {
    id: "box",
    temporary: false,
    shared: false,
    session: "s1",
    incarnation: 1,
    killGraceMs: 100,
    server
  }, { _tag: "Create" }).pipe(Scope.extend(scope))
  yield* actor.ready
  return { scripted, actor }
})

const request: ProcessRequest = {
  id: "p1",
  command: "server",
  spec: ScriptedProcess.spec("server"),
  headBytes: 1024,
  tailBytes: 1024,
  mailboxCapacity: 16,
  onExit: () => Effect.void
}

describe("ComputerActor: the lifecycle lease", () => {
  it.scoped("restart, factory reset and delete each hold the computer's lease around their step", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* running
      yield* actor.restart
      yield* actor.factoryReset
      yield* actor.destroy
      const steps = scripted.calls.filter((call) => /^(un)?lease |^restart |^remove /.test(call))
      assert.deepStrictEqual(steps, [
        "lease restart box",
        "restart box",
        "unlease restart box",
        "lease reset box",
        "remove box",
        "unlease reset box",
        "lease delete box",
        "remove box",
        "unlease delete box"
      ])
    }))

  it.scoped("a step while another server is in one is refused with a Conflict naming that step; the computer and its processes are untouched", () =>
    Effect.gen(function*() {
      const { actor, scripted } = yield* running
      const process = yield* actor.spawn(request)
      yield* scripted.otherServer("box", "restart")
      for (const step of [actor.restart, actor.factoryReset, actor.destroy]) {
        const error = yield* Effect.flip(step)
        assert.strictEqual(error._tag, "ProviderError")
        assert.match(error.message, /another kilntainers server is in its restart/)
        assert.strictEqual(yield* actor.state, "running")
        assert.strictEqual(yield* process.status, "running")
      }
      assert.isFalse(scripted.calls.some((call) => /^(restart|remove) /.test(call)), scripted.calls.join(", "))
      // The other server is done: the step runs.
      yield* scripted.otherServer("box", undefined)
      yield* actor.restart
      assert.strictEqual(yield* actor.state, "running")
      assert.strictEqual(yield* process.status, "terminated")
    }))
})
