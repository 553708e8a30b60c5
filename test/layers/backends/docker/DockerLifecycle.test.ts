/**
 * Lifecycles on the Docker backend, through the kernel (the runtime's Computers and Processes over
 * DockerBackend.layer), against a real engine: what happens to containers when a server closes,
 * restarts that are not losses, factory reset from the recorded image, names taken by others, the
 * reaper, containers stopped from outside, the pids limit, the warm pool. The kernel's own logic is
 * tested with a scripted provider in test/layers/ComputerLifecycle.test.ts; here, that the Docker
 * provider gives it what it needs.
 */
import { assert, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, readdirSync, readlinkSync } from "node:fs"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as DockerBackend from "../../../../src/layers/backends/docker/DockerBackend.js"
import { processStartTime } from "../../../../src/layers/server/ProcessOwner.js"
import * as Runtime from "../../../../src/layers/Runtime.js"
import { Computers } from "../../../../src/services/Computers.js"
import { Processes } from "../../../../src/services/Processes.js"
import { Settings, type SettingsShape } from "../../../../src/services/Settings.js"
import {
  computerIds,
  docker,
  dockerComputer,
  dockerWorks,
  eventually,
  foreignContainer,
  removeOurContainers,
  requirement,
  TEST_IMAGE,
  testMetadata,
  testOptions
} from "../../../support/Docker.js"
import { describeIf } from "../../../support/Requirements.js"

const computerId = computerIds()
const round = computerId("round")

afterAll(removeOurContainers)

/** A server (the runtime over the Docker backend) for as long as the current Scope. */
const server = (settings: Partial<SettingsShape> = {}, options: Parameters<typeof testOptions>[0] = {}) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(Runtime.layer(Settings.make({ killGraceMs: 500, ...settings }), DockerBackend.layer(testOptions(options))))
    return { computers: yield* Effect.provide(Computers, context), processes: yield* Effect.provide(Processes, context) }
  })

const inspect = (id: string) => Effect.promise(() => docker().getContainer(id).inspect())
const exists = (id: string) => Effect.promise(() => docker().getContainer(id).inspect().then(() => true, () => false))
/**
 * The processes in a container's PID namespace, counted from this host. (The engine's `top` runs
 * `ps` inside the container on Podman, which a full pids limit refuses.)
 */
const processCount = (providerId: string) =>
  Effect.promise(async () => {
    const namespace = readlinkSync(`/proc/${(await docker().getContainer(providerId).inspect()).State.Pid}/ns/pid`)
    return readdirSync("/proc").filter((entry) => {
      if (!/^\d+$/.test(entry)) return false
      try {
        return readlinkSync(`/proc/${entry}/ns/pid`) === namespace
      } catch {
        return false // ended meanwhile
      }
    }).length
  })

describeIf(dockerWorks, requirement())("Docker lifecycles through the kernel", () => {
  it.live("a server that closes removes its temporary containers and leaves permanent ones running", () =>
    Effect.gen(function*() {
      const [temporary, permanent] = yield* Effect.scoped(Effect.gen(function*() {
        const { computers } = yield* server()
        const temporary = yield* computers.create("s", { computer_id: computerId("temp") })
        const permanent = yield* computers.create("s", { computer_id: computerId("perm"), temporary: false })
        return [yield* temporary.providerId, yield* permanent.providerId] as const
      }))
      assert.isFalse(yield* exists(temporary))
      assert.isTrue((yield* inspect(permanent)).State.Running)
    }))

  it.scopedLive("a restart through the kernel is no loss: the container is the same, running, with its files", () =>
    Effect.gen(function*() {
      const { computers, processes } = yield* server()
      const computer = yield* computers.create("s", { computer_id: computerId("restart") })
      const before = yield* computer.providerId
      yield* processes.exec("s", { command: "echo sys > /home/agent/kt-marker", computer_id: computer.id })
      yield* computers.restart("s", computer.id)
      yield* Effect.sleep("1 second")
      const listed = (yield* computers.list("s")).find((c) => c.computer_id === computer.id)
      assert.strictEqual(listed?.state, "running")
      assert.strictEqual(yield* computer.providerId, before)
      assert.strictEqual((yield* processes.exec("s", { command: "cat /home/agent/kt-marker", computer_id: computer.id })).stdout, "sys\n")
    }))

  it.live("factory reset recreates from the image recorded on the container, not the current --image", () =>
    Effect.gen(function*() {
      const id = computerId("image")
      yield* Effect.scoped(Effect.flatMap(server(), ({ computers }) => computers.create("s", { computer_id: id, temporary: false })))
      // A second server configured with another image (the same one under another tag).
      const otherTag = `kilntainers-test-other:${round}`
      yield* Effect.promise(() => docker().getImage(TEST_IMAGE).tag({ repo: "kilntainers-test-other", tag: round }))
      yield* Effect.scoped(Effect.gen(function*() {
        const { computers } = yield* server({}, { image: otherTag })
        const before = yield* (yield* computers.get("s", id)).providerId
        const computer = yield* computers.factoryReset("s", id)
        const after = yield* computer.providerId
        assert.notStrictEqual(after, before)
        assert.isFalse(yield* exists(before))
        const info = yield* inspect(after)
        // Podman names a local image localhost/<name>.
        assert.strictEqual(info.Config.Image.replace(/^localhost\//, ""), TEST_IMAGE)
        assert.strictEqual(info.Config.Labels["kilntainers.image"], TEST_IMAGE)
        assert.strictEqual((yield* computers.list("s")).find((c) => c.computer_id === id)?.image, TEST_IMAGE)
        yield* computers.delete("s", id)
        assert.isFalse(yield* exists(after))
      })).pipe(Effect.ensuring(Effect.promise(() => docker().getImage(otherTag).remove().catch(() => {}))))
    }))

  it.scopedLive("a name taken by a container that is not ours: the call fails saying so, and the container is left untouched", () =>
    Effect.gen(function*() {
      const id = computerId("foreign")
      const foreign = yield* foreignContainer(id)
      // Its labels as made (the image's own labels come with them).
      const labels = (yield* inspect(foreign.id)).Config.Labels
      const { computers, processes } = yield* server()
      const error = yield* Effect.flip(processes.exec("s", { command: "true", computer_id: id }))
      assert.strictEqual(error._tag, "ProviderError")
      assert.include(error.message, "not created by kilntainers")
      const info = yield* inspect(foreign.id)
      assert.isTrue(info.State.Running)
      assert.deepStrictEqual(info.Config.Labels, labels)
      assert.deepInclude(labels, { other: "yes", "kilntainers.owner-pid": String(process.pid) })
      assert.isFalse((yield* computers.list("s")).some((c) => c.sandbox_id === foreign.id))
    }))

  it.scopedLive("the reaper removes temporary containers of dead servers on this host, and nothing else", () =>
    Effect.gen(function*() {
      const deadPid = spawnSync("true").pid!
      const fake = (what: string, labels: Record<string, string>, id = computerId(what)) =>
        Effect.promise(() =>
          docker().createContainer({
            name: `kilntainer-${id}`,
            Image: TEST_IMAGE,
            Cmd: ["sleep", "infinity"],
            Labels: {
              "kilntainers": "true",
              "kilntainers.computer-id": id,
              "kilntainers.image": TEST_IMAGE,
              "kilntainers.instance": `dead-${round}`,
              "kilntainers.created": new Date().toISOString(),
              "kilntainers.owner-host": hostname(),
              "kilntainers.owner-pid": String(deadPid),
              "kilntainers.owner-start": "12345",
              ...labels
            }
          }).then((c) => c.id)
        )
      const orphan = yield* fake("orphan", { "kilntainers.temporary": "true" })
      const permanent = yield* fake("permanent", { "kilntainers.temporary": "false" })
      const live = yield* fake("live", {
        "kilntainers.temporary": "true",
        "kilntainers.owner-pid": String(process.pid),
        "kilntainers.owner-start": processStartTime("self")!
      })
      const otherHost = yield* fake("elsewhere", { "kilntainers.temporary": "true", "kilntainers.owner-host": "another-host" })
      // Stale but not expired: another server's lease, on another host, still running.
      const leased = yield* fake("leased", {
        "kilntainers.temporary": "true",
        "kilntainers.owner-host": "another-host",
        "kilntainers.expires": new Date(Date.now() + 3_600_000).toISOString()
      })
      const expired = yield* fake("expired", {
        "kilntainers.temporary": "true",
        "kilntainers.owner-host": "another-host",
        "kilntainers.expires": new Date(Date.now() - 60_000).toISOString()
      })
      try {
        yield* server()
        yield* eventually(exists(orphan), (there) => !there, "the orphan to be reaped", 20_000)
        yield* eventually(exists(expired), (there) => !there, "the expired one to be reaped", 20_000)
        for (const kept of [permanent, live, otherHost, leased]) assert.isTrue(yield* exists(kept))
      } finally {
        yield* Effect.promise(() =>
          Promise.all([permanent, live, otherHost, leased].map((id) => docker().getContainer(id).remove({ force: true }).catch(() => {})))
        )
      }
    }))

  it.scopedLive("a container stopped from outside: its processes end, it is lost, and the next call starts it again", () =>
    Effect.gen(function*() {
      const { computers, processes } = yield* server()
      const computer = yield* computers.create("s", { computer_id: computerId("outside") })
      const providerId = yield* computer.providerId
      const { pid } = yield* processes.spawn("s", { command: "sleep 300", background: true, computer_id: computer.id })
      yield* Effect.promise(() => docker().getContainer(providerId).stop({ t: 0 }))
      const ended = yield* eventually(
        Effect.map(processes.list("s", { status: "all" }), (list) => list.processes.find((p) => p.pid === pid)),
        (process) => process?.status === "terminated",
        "the process to end with its computer"
      )
      assert.strictEqual(ended?.signal, "SIGKILL")
      const state = Effect.map(computers.list("s"), (list) => list.find((c) => c.computer_id === computer.id)?.state)
      yield* eventually(state, (now) => now === "lost", "the computer to be lost")
      const again = yield* processes.exec("s", { command: "echo back", computer_id: computer.id })
      assert.strictEqual(again.stdout, "back\n")
      assert.strictEqual(yield* computer.providerId, providerId, "the same container, started again")
    }))

  it.scopedLive("a computer whose agent was killed is lost, and the next call connects to it again", () =>
    Effect.gen(function*() {
      const { computers, processes } = yield* server()
      const computer = yield* computers.create("s", { computer_id: computerId("agent") })
      const providerId = yield* computer.providerId
      yield* processes.exec("s", { command: "echo kept > /home/agent/f", computer_id: computer.id })
      const exec = yield* Effect.promise(() => docker().getContainer(providerId).exec({ Cmd: ["pkill", "-KILL", "-x", "kt-agent"] }))
      yield* Effect.promise(() => exec.start({ Detach: true }))
      const state = Effect.map(computers.list("s"), (list) => list.find((c) => c.computer_id === computer.id)?.state)
      yield* eventually(state, (now) => now === "lost", "the computer to be lost")
      const again = yield* processes.exec("s", { command: "cat /home/agent/f", computer_id: computer.id })
      assert.strictEqual(again.stdout, "kept\n")
      assert.strictEqual(yield* state, "running")
      assert.strictEqual(yield* computer.providerId, providerId)
    }))

  it.scopedLive("a fork bomb stays within the pids limit, the server keeps answering, and a restart is the way out", () =>
    Effect.gen(function*() {
      const { computers, processes } = yield* server({}, { pidsLimit: 100 })
      const computer = yield* computers.create("s", { computer_id: computerId("bomb") })
      const providerId = yield* computer.providerId
      const count = processCount(providerId)
      yield* processes.spawn("s", { command: "for i in $(seq 5000); do sleep 100 & done; wait", background: true, computer_id: computer.id })
      const full = yield* eventually(count, (n) => n >= 90, "the pids limit to be reached", 20_000)
      assert.isAtMost(full, 100)
      yield* Effect.sleep("1 second")
      assert.isAtMost(yield* count, 100)
      // The server still answers at once: a spawn succeeds or fails clearly within seconds.
      const started = Date.now()
      const attempt = yield* Effect.either(processes.exec("s", { command: "echo alive", computer_id: computer.id }))
      assert.isBelow(Date.now() - started, 15_000)
      if (attempt._tag === "Left") assert.match(attempt.left.message, /limit|resource temporarily unavailable/i)
      else assert.include(attempt.right.stdout + attempt.right.stderr, "alive")
      yield* computers.restart("s", computer.id)
      assert.strictEqual((yield* processes.exec("s", { command: "echo alive", computer_id: computer.id })).stdout, "alive\n")

      // The classic bomb keeps forking as slots free up.
      yield* processes.spawn("s", { command: "bash -c ':(){ :|:& };:'", background: true, computer_id: computer.id })
      yield* eventually(count, (n) => n >= 90, "the classic bomb to fill the limit", 20_000)
      assert.isAtMost(yield* count, 100)
      yield* computers.restart("s", computer.id)
      assert.strictEqual((yield* processes.exec("s", { command: "echo alive", computer_id: computer.id })).stdout, "alive\n")
    }), 120_000)

  it.scopedLive("the warm pool hands out a prepared container under the id asked for: recorded in the state directory, no rename; a second server sees it as another's", () =>
    Effect.gen(function*() {
      const stateDir = mkdtempSync(join(tmpdir(), "kt-pool-"))
      const { computers, processes } = yield* server({ warmPool: 1, stateDir }, { stateDir })
      yield* eventually(computers.pool, (pool) => pool?.ready === 1, "the pool to fill", 30_000)
      const id = computerId("pooled")
      const computer = yield* computers.create("s", { computer_id: id })
      assert.strictEqual((yield* computers.pool)?.handedOut, 1)
      const providerId = yield* computer.providerId
      const info = yield* inspect(providerId)
      assert.match(info.Name, /^\/kilntainer-pool-/, "the container keeps its pool name")
      assert.strictEqual(info.Config.Labels["kilntainers.pooled"], "true")
      assert.strictEqual(info.Config.Labels["kilntainers.temporary"], "true")
      assert.isTrue(existsSync(join(stateDir, "pool-ids", `${providerId}.${id}`)))
      assert.strictEqual((yield* processes.exec("s", { command: "echo ready", computer_id: id })).stdout, "ready\n")
      assert.isTrue((yield* computers.list("s")).some((c) => c.computer_id === id))
      // A second server over the same engine and state directory: the id is taken by another server's computer.
      const other = yield* server({ stateDir }, { stateDir })
      const refused = yield* Effect.flip(other.computers.create("t", { computer_id: id }))
      assert.match(refused.message, /temporary computer of another kilntainers server/)
      assert.isFalse((yield* other.computers.list("t")).some((c) => c.computer_id === id))
      yield* computers.delete("s", id)
      assert.isFalse(yield* exists(providerId))
      assert.deepStrictEqual(readdirSync(join(stateDir, "pool-ids")), [], "the record goes with the computer")
      // The id is free again: made fresh (the pool refills meanwhile).
      const fresh = yield* other.computers.create("t", { computer_id: id })
      assert.strictEqual((yield* inspect(yield* fresh.providerId)).Name, `/kilntainer-${id}`)
    }), 60_000)

  it.scopedLive("a handed-out pool container of a crashed server is reaped like any of its temporary computers, its record with it", () =>
    Effect.gen(function*() {
      const stateDir = mkdtempSync(join(tmpdir(), "kt-pool-"))
      const deadPid = spawnSync("true").pid!
      const backend = yield* DockerBackend.make(testOptions({ stateDir }))
      const pooled = yield* dockerComputer(
        backend,
        testMetadata(computerId("pool"), { pooled: true, instance: `dead-${round}`, owner: { host: hostname(), pid: deadPid, start: "12345" } })
      )
      const { pooled: _, ...metadata } = pooled.instance.metadata
      const id = computerId("crashed")
      yield* backend.adopt!(pooled.instance, { ...metadata, id })
      const record = join(stateDir, "pool-ids", `${pooled.instance.providerId}.${id}`)
      assert.isTrue(existsSync(record))
      yield* server({ stateDir }, { stateDir })
      yield* eventually(exists(pooled.instance.providerId), (there) => !there, "the handed-out container to be reaped", 20_000)
      // The record goes right after its container (a moment later under load).
      yield* eventually(Effect.sync(() => existsSync(record)), (there) => !there, "its record to be removed", 5_000)
    }), 60_000)
})
