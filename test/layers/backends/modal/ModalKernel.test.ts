import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { hostname } from "node:os"
import type { ComputerMetadata } from "../../../../src/domain/ComputerMetadata.js"
import { afterAll, beforeAll } from "vitest"
import * as ModalBackend from "../../../../src/layers/backends/modal/ModalBackend.js"
import * as Runtime from "../../../../src/layers/Runtime.js"
import { Backend } from "../../../../src/services/Backend.js"
import { Computers } from "../../../../src/services/Computers.js"
import { Files } from "../../../../src/services/Files.js"
import { Processes } from "../../../../src/services/Processes.js"
import { Settings } from "../../../../src/services/Settings.js"
import { backendOptions, fakeWorks, ModalFake } from "../../../support/ModalFake.js"
import { describeIf } from "../../../support/Requirements.js"

// Modal's computers through the kernel (the registry and ComputerActor over the Modal provider, the
// real SDK, the local gRPC fake): what Modal's shape means for a computer's life — sandboxes that
// survive the server until their timeout, no restart, loss from outside, reset from the recorded
// image. Each `server` is a fresh runtime over the same fake, as a new server process would be.

let fake: ModalFake
beforeAll(async () => {
  fake = await ModalFake.start()
})
afterAll(() => fake.close())

const options = (overrides: Partial<ModalBackend.ModalBackendOptions> = {}) =>
  backendOptions(fake, { appName: "kilntainers-kernel", ...overrides })

type Services = Processes | Computers | Files

/** One server's life: the runtime over the Modal backend, closed when `body` ends. */
const server = <A, E>(body: Effect.Effect<A, E, Services>, overrides: Partial<ModalBackend.ModalBackendOptions> = {}) =>
  body.pipe(Effect.provide(Runtime.layer(Settings.make({ killGraceMs: 500 }), ModalBackend.layer(options(overrides)))))

const services = Effect.all({ processes: Processes, computers: Computers, files: Files })

let counter = 0
const computerId = (what: string) => `k${process.pid}-${what}-${counter++}`

const tagsOf = (request: Record<string, any>): Record<string, string> =>
  Object.fromEntries(request["tags"].map((t: Record<string, string>) => [t["tagName"], t["tagValue"]]))

const pollsOf = (sandboxId: string) => fake.calls.filter((c) => c.method.startsWith("SandboxWait") && c.request["sandboxId"] === sandboxId).length

describeIf(fakeWorks, "bubblewrap and nsenter (the Modal fake runs commands in them)")("Modal computers through the kernel", () => {
  it.live("a session's temporary computer carries the kernel's metadata and is terminated when the session ends", () =>
    server(Effect.gen(function*() {
      const { computers, processes } = yield* services
      const ran = yield* processes.exec("s1", { command: "pwd" })
      assert.strictEqual(ran.stdout, "/home/agent\n")
      // Without network, a V1 sandbox (ModalSdk.ts).
      const created = fake.callsOf("SandboxCreate").find((request) => tagsOf(request)["kilntainers-computer-id"] === ran.computer_id)!
      const tags = tagsOf(created)
      assert.strictEqual(tags["kilntainers-temporary"], "true")
      assert.strictEqual(tags["kilntainers-owner-pid"], String(process.pid), "the reaper can tell whether this server still runs")
      assert.isDefined(tags["kilntainers-instance"])
      assert.isUndefined(tags["kilntainers-expires"], "no lease: Modal has no keep-alive")
      const [info] = yield* computers.list("s1")
      assert.strictEqual(info!.ends_at, tags["kilntainers-ends"], "computer_list says when Modal ends it")
      assert.isUndefined(info!.warning, "an hour away: no warning yet")
      yield* computers.release("s1")
      assert.notInclude(fake.running(), `kilntainer-${ran.computer_id}`)
    })), 60_000)

  it.live("a permanent computer (the longest id) outlives its server with its files and its processes (the sandbox holds them); its watcher does not; a new server finds it by id and deletes it", () =>
    Effect.gen(function*() {
      const id = `${computerId("keep")}-`.padEnd(62, "x") + "z"
      const name = ModalBackend.sandboxName(id)
      const sandboxId = yield* server(Effect.gen(function*() {
        const { computers, processes } = yield* services
        const computer = yield* computers.create("a", { computer_id: id, temporary: false })
        yield* processes.exec("a", { command: "echo kept > /home/agent/file; echo tmp > /tmp/t", computer_id: id })
        yield* processes.spawn("a", { command: "sleep 271", background: true, computer_id: id })
        return yield* computer.providerId
      }))
      assert.include(fake.running(), name, "a permanent sandbox stays running")
      const afterClose = pollsOf(sandboxId)
      yield* Effect.sleep("1 second")
      assert.isAtMost(pollsOf(sandboxId), afterClose + 1, "the closed server's watcher polls no more")
      yield* server(Effect.gen(function*() {
        const { computers, files, processes } = yield* services
        const listed = (yield* computers.list("b")).find((c) => c.computer_id === id)
        assert.isDefined(listed)
        assert.strictEqual(listed!.sandbox_id, sandboxId)
        assert.isFalse(listed!.temporary)
        assert.strictEqual(listed!.image, "debian:bookworm-slim")
        const read = yield* processes.exec("b", { command: "cat /home/agent/file /tmp/t; ps -eo args | grep -c '^sleep 271' || true", computer_id: id })
        assert.strictEqual(read.stdout, "kept\ntmp\n1\n", "files kept; the closed server's process runs on")
        assert.strictEqual((yield* files.read("b", { path: "file", computer_id: id })).content, "kept\n")
        yield* computers.delete("b", id)
        assert.notInclude(fake.running(), name)
        assert.isUndefined((yield* computers.list("b")).find((c) => c.computer_id === id))
      }))
    }), 90_000)

  it.live("a sandbox terminated from outside: its processes end saying why, and the next use makes a new sandbox", () =>
    server(Effect.gen(function*() {
      const { computers, processes } = yield* services
      const id = computerId("lost")
      const computer = yield* computers.create("s", { computer_id: id })
      const before = yield* computer.providerId
      const started = yield* processes.spawn("s", { command: "sleep 300", background: true, computer_id: id })
      fake.terminateFromOutside(`kilntainer-${id}`)
      const done = yield* processes.wait("s", { id: started.pid, timeoutMs: 20_000 })
      assert.strictEqual(done.outcome, "exited")
      const info = (yield* processes.list("s", { status: "all" })).processes.find((p) => p.pid === started.pid)!
      assert.strictEqual(info.status, "terminated")
      assert.match(info.reason ?? "", /lost: its Modal sandbox .* ended outside kilntainers \(exit code 137\)/)
      const again = yield* processes.exec("s", { command: "echo back", computer_id: id })
      assert.strictEqual(again.stdout, "back\n")
      assert.notStrictEqual(yield* computer.providerId, before, "a new sandbox: Modal cannot start an ended one again")
    })), 60_000)

  it.live("factory reset recreates from the image recorded on the sandbox, not this server's flag; restart is refused", () =>
    Effect.gen(function*() {
      const id = computerId("reset")
      yield* server(Effect.gen(function*() {
        const { computers, files } = yield* services
        yield* computers.create("a", { computer_id: id, temporary: false })
        yield* files.write("a", { path: "f", content: "x", computer_id: id })
      }))
      yield* server(Effect.gen(function*() {
        const { computers, files } = yield* services
        const computer = yield* computers.get("b", id)
        const before = yield* computer.providerId
        const restart = yield* Effect.flip(computers.restart("b", id))
        assert.strictEqual(restart._tag, "Unsupported")
        yield* computers.factoryReset("b", id)
        assert.notStrictEqual(yield* computer.providerId, before)
        assert.deepStrictEqual(fake.callsOf("ImageGetOrCreate").pop()!["image"]["dockerfileCommands"], ["FROM debian:bookworm-slim"])
        const gone = yield* Effect.flip(files.read("b", { path: "f", computer_id: id }))
        assert.strictEqual(gone._tag, "FileNotFound")
        yield* computers.delete("b", id)
      }), { image: "python:3.12-slim" })
    }), 90_000)

  it.live("the reaper removes the temporary sandboxes of a server that died on this host, and nothing else", () =>
    Effect.gen(function*() {
      const planted = (what: string, temporary: boolean, owner: ComputerMetadata["owner"]): ComputerMetadata => ({
        id: computerId(what),
        temporary,
        image: ModalBackend.DEFAULT_IMAGE,
        created: new Date().toISOString(),
        instance: `server-of-${what}`,
        owner,
        nonce: what
      })
      const dead = { host: hostname(), pid: 4_194_303, start: "1" }
      const alive = { host: hostname(), pid: process.pid, start: "0" }
      const orphan = planted("orphan", true, dead)
      const kept = [planted("kept", false, dead), planted("busy", true, { ...alive, start: "" })]
      // As an earlier server would have left them (the provider alone, no kernel).
      yield* Effect.forEach([orphan, ...kept], (metadata) => Effect.flatMap(Backend, (backend) => backend.create(metadata)), { discard: true }).pipe(
        Effect.provide(ModalBackend.layer(options()))
      )
      yield* server(Effect.gen(function*() {
        for (let i = 0; i < 100 && fake.running().includes(ModalBackend.sandboxName(orphan.id)); i++) yield* Effect.sleep("100 millis")
      }))
      assert.notInclude(fake.running(), ModalBackend.sandboxName(orphan.id), "its server is gone: reaped")
      for (const metadata of kept) assert.include(fake.running(), ModalBackend.sandboxName(metadata.id))
      for (const metadata of kept) fake.terminateFromOutside(ModalBackend.sandboxName(metadata.id))
    }), 60_000)

  it.live("a sandbox near its timeout carries a warning for the agent", () =>
    server(Effect.gen(function*() {
      const { computers } = yield* services
      const id = computerId("ending")
      yield* computers.create("s", { computer_id: id })
      const info = (yield* computers.list("s")).find((c) => c.computer_id === id)!
      assert.isDefined(info.ends_at)
      assert.match(info.warning ?? "", /ends this computer in 5 min/)
    }), { sandboxTimeoutSec: 300 }), 60_000)
})
