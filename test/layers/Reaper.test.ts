import { assert, describe, it } from "@effect/vitest"
import { Effect, TestClock } from "effect"
import type { ComputerMetadata } from "../../src/domain/ComputerMetadata.js"
import * as Reaper from "../../src/layers/Reaper.js"
import { Backend } from "../../src/services/Backend.js"
import type { ServerIdentity } from "../../src/services/ServerIdentity.js"
import * as ScriptedBackend from "../support/ScriptedBackend.js"

const dead = new Set<number>([4242])
const server: ServerIdentity["Type"] = {
  instanceId: "me",
  owner: { host: "here", pid: 100, start: "1" },
  alive: (owner) => owner.host !== "here" || !dead.has(owner.pid)
}

const computer = (overrides: Partial<ComputerMetadata>): ComputerMetadata => ({
  id: "c",
  temporary: true,
  image: "i",
  created: "2026-01-01T00:00:00.000Z",
  instance: "another",
  owner: { host: "here", pid: 77, start: "5" },
  ...overrides
})

describe("the reaper", () => {
  it("decides from the metadata alone", () => {
    const now = Date.parse("2026-06-01T00:00:00.000Z")
    assert.isUndefined(Reaper.reapReason(computer({ temporary: false, owner: { host: "here", pid: 4242, start: "" } }), server, now))
    assert.isUndefined(Reaper.reapReason(computer({ instance: "me", owner: { host: "here", pid: 4242, start: "" } }), server, now))
    assert.isUndefined(Reaper.reapReason(computer({}), server, now), "owner alive")
    assert.isUndefined(Reaper.reapReason(computer({ owner: { host: "elsewhere", pid: 4242, start: "" } }), server, now))
    assert.match(Reaper.reapReason(computer({ owner: { host: "here", pid: 4242, start: "" } }), server, now)!, /no longer running/)
    assert.match(Reaper.reapReason(computer({ owner: { host: "elsewhere", pid: 1, start: "" }, expires: "2026-05-31T00:00:00.000Z" }), server, now)!, /lease expired/)
    assert.isUndefined(Reaper.reapReason(computer({ owner: { host: "elsewhere", pid: 1, start: "" }, expires: "2026-07-01T00:00:00.000Z" }), server, now))
  })

  it.effect("removes what it should, on the kernel's clock, and nothing else", () =>
    Effect.gen(function*() {
      const scripted = yield* ScriptedBackend.make()
      yield* scripted.plant(computer({ id: "orphan", owner: { host: "here", pid: 4242, start: "" } }))
      yield* scripted.plant(computer({ id: "leased", owner: { host: "far", pid: 1, start: "" }, expires: new Date(120_000).toISOString() }))
      yield* scripted.plant(computer({ id: "alive" }))
      yield* scripted.plant(computer({ id: "keeper", temporary: false, owner: { host: "here", pid: 4242, start: "" } }))
      const reap = Reaper.reapOnce(server).pipe(Effect.provideService(Backend, scripted.backend))
      assert.strictEqual(yield* reap, 1)
      assert.isUndefined(scripted.byId("orphan"))
      yield* TestClock.adjust("3 minutes")
      assert.strictEqual(yield* reap, 1)
      assert.isUndefined(scripted.byId("leased"))
      assert.isDefined(scripted.byId("alive"))
      assert.isDefined(scripted.byId("keeper"))
    }))
})
