import { assert, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { spawnSync } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as DockerCheckpoints from "../../src/layers/backends/docker/DockerCheckpoints.js"
import * as DockerBackend from "../../src/layers/backends/docker/DockerBackend.js"
import * as HostBackend from "../../src/layers/backends/host/HostBackend.js"
import * as HostCheckpoints from "../../src/layers/backends/host/HostCheckpoints.js"
import * as Runtime from "../../src/layers/Runtime.js"
import type { Backend } from "../../src/services/Backend.js"
import { Computers } from "../../src/services/Computers.js"
import { Settings } from "../../src/services/Settings.js"
import * as Docker from "../support/Docker.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const stateDir = mkdtempSync(join(tmpdir(), "kt-checkpoint-sweep-"))
afterAll(() => rmSync(stateDir, { recursive: true, force: true }))
afterAll(Docker.removeOurContainers)

/** A server process of this host that has ended: a real pid, no longer running. */
const gone = () => {
  const ended = spawnSync("true")
  return { host: hostname(), pid: ended.pid!, start: "1" }
}

/** A server starts (the kernel on `backend`) and runs `body` with its Computers. */
const serverOn = <A, E>(backend: Layer.Layer<Backend, unknown>, body: (computers: Computers["Type"]) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(Runtime.layer(Settings.make({ killGraceMs: 200 }), backend, `sweep-${process.pid}`))
    return yield* body(yield* Effect.provide(Computers, context))
  })

describeIf(bwrapWorks, "bubblewrap")("the host backend's leftover checkpoints", () => {
  const dir = join(stateDir, "host")
  const checkpoints = join(dir, "checkpoints")
  const leftover = (name: string, owner: object | undefined, ageMs = 0) => {
    const at = join(checkpoints, name)
    mkdirSync(join(at, "home"), { recursive: true })
    if (owner !== undefined) writeFileSync(join(at, HostCheckpoints.OWNER_FILE), JSON.stringify(owner))
    const when = new Date(Date.now() - ageMs)
    utimesSync(at, when, when)
  }

  it.scopedLive("a starting server removes the checkpoints of servers that are gone, and nothing else", () =>
    Effect.gen(function*() {
      leftover("ckpt-dead", gone())
      leftover("ckpt-unrecorded-old", undefined, 2 * 60 * 60 * 1000)
      leftover("ckpt-unrecorded-new", undefined)
      leftover("ckpt-other-host", { host: "another-machine", pid: 1, start: "1" })
      leftover("ckpt-unreadable", { pid: "not an owner" })
      yield* serverOn(HostBackend.layer({ stateDir: dir, network: false, sandbox: "bwrap" }), (computers) =>
        Effect.gen(function*() {
          const computer = yield* computers.create("s1", { computer_id: "sweep-host" })
          // The server's own checkpoint carries its record, and the server is alive: kept.
          const own = yield* computers.checkpoint("s1", { computer_id: computer.id })
          assert.isTrue(existsSync(join(checkpoints, own.checkpoint_id, HostCheckpoints.OWNER_FILE)))
          yield* Docker.eventually(
            Effect.sync(() => existsSync(join(checkpoints, "ckpt-dead")) || existsSync(join(checkpoints, "ckpt-unrecorded-old"))),
            (left) => !left,
            "the sweep"
          )
          for (const kept of ["ckpt-unrecorded-new", "ckpt-other-host", "ckpt-unreadable", own.checkpoint_id]) {
            assert.isTrue(existsSync(join(checkpoints, kept)), `${kept} was removed`)
          }
        }))
    }), 60_000)
})

describeIf(Docker.dockerWorks, `the ${Docker.TEST_ENGINE} engine`)(`the ${Docker.TEST_ENGINE} backend's leftover checkpoint images`, () => {
  const run = Math.random().toString(36).slice(2, 8)
  const tags: Array<string> = []
  afterAll(async () => {
    for (const tag of tags) await Docker.docker().getImage(tag).remove({ force: true }).catch(() => undefined)
  })

  /** A checkpoint image as a server records it (`labels` instead of its own owner). */
  const image = async (id: string, labels: Record<string, string>) => {
    const docker = Docker.docker()
    const container = await docker.createContainer({ Image: Docker.TEST_IMAGE, Cmd: ["true"], name: `kt-sweep-${run}-${id}` })
    try {
      await container.commit({
        _query: { container: container.id, repo: DockerCheckpoints.REPOSITORY, tag: id },
        _body: { Labels: { [DockerCheckpoints.LABEL]: id, ...labels } }
      })
    } finally {
      await container.remove({ force: true })
    }
    tags.push(`${DockerCheckpoints.REPOSITORY}:${id}`)
  }
  const exists = (id: string) =>
    Effect.promise(() => Docker.docker().getImage(`${DockerCheckpoints.REPOSITORY}:${id}`).inspect().then(() => true, () => false))
  const ownerLabels = (owner: { host: string; pid: number; start: string }) => ({
    [DockerCheckpoints.OWNER_LABELS.host]: owner.host,
    [DockerCheckpoints.OWNER_LABELS.pid]: String(owner.pid),
    [DockerCheckpoints.OWNER_LABELS.start]: owner.start
  })

  it.scopedLive("a starting server removes the checkpoint images of servers that are gone; others' and unowned ones stay", () =>
    Effect.gen(function*() {
      yield* Effect.promise(async () => {
        await image(`ckpt-${run}-dead`, ownerLabels(gone()))
        await image(`ckpt-${run}-elsewhere`, ownerLabels({ host: "another-machine", pid: 1, start: "1" }))
        await image(`ckpt-${run}-unowned`, {})
      })
      yield* serverOn(DockerBackend.layer(Docker.testOptions()), () =>
        Effect.gen(function*() {
          yield* Docker.eventually(exists(`ckpt-${run}-dead`), (left) => !left, "the sweep", 30_000)
          assert.isTrue(yield* exists(`ckpt-${run}-elsewhere`))
          assert.isTrue(yield* exists(`ckpt-${run}-unowned`))
        }))
    }), 90_000)
})
