/**
 * The user's directories in Docker computers (--mount, --deny-read, --deny-write) and an adopted
 * container (--docker-container), through the kernel against a real engine: writes land in the host
 * directory, read-only mounts and deny-write paths refuse writes, denied paths are unreadable,
 * symlinks in a mount cannot lead out — both ways the engine gets them (DockerMounts.ts): staged
 * copies of the templates (a root server with a state directory), and checked paths (without one,
 * as a server that cannot mount gets them), where a source replaced since a container was made
 * refuses that container's start. The adopted container runs our processes, is listed, and
 * survives delete and factory reset attempts and the server's shutdown.
 */
import { assert, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { spawnSync } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import type { FilesystemPolicy } from "../../../../src/domain/Mounts.js"
import * as DockerBackend from "../../../../src/layers/backends/docker/DockerBackend.js"
import * as Runtime from "../../../../src/layers/Runtime.js"
import { Computers } from "../../../../src/services/Computers.js"
import { Processes } from "../../../../src/services/Processes.js"
import { Settings, type SettingsShape } from "../../../../src/services/Settings.js"
import { computerIds, docker, dockerWorks, removeOurContainers, requirement, TEST_IMAGE, testOptions } from "../../../support/Docker.js"
import { describeIf } from "../../../support/Requirements.js"

const computerId = computerIds()
const root = mkdtempSync(join(tmpdir(), "kt-docker-mounts-"))
const project = join(root, "project")
const docs = join(root, "docs")
const outside = join(root, "outside")
mkdirSync(join(project, "secret"), { recursive: true })
mkdirSync(join(project, "locked"), { recursive: true })
mkdirSync(docs)
mkdirSync(outside)
writeFileSync(join(project, "a.txt"), "from the host\n")
writeFileSync(join(project, "secret", "key"), "SECRET-KEY\n")
writeFileSync(join(project, "locked", "config"), "fixed\n")
writeFileSync(join(docs, "readme"), "docs\n")
writeFileSync(join(outside, "private.txt"), "OUTSIDE\n")
symlinkSync(outside, join(project, "to-outside"))

const ADOPTED = `kt-adopted-${process.pid}`
afterAll(async () => {
  await removeOurContainers()
  if (dockerWorks) await docker().getContainer(ADOPTED).remove({ force: true }).catch(() => undefined)
  rmSync(root, { recursive: true, force: true })
})

const policy: FilesystemPolicy = {
  mounts: [
    { source: project, target: "/work/project", readOnly: false },
    { source: docs, target: "/docs", readOnly: true }
  ],
  denyRead: [join(project, "secret")],
  denyWrite: [join(project, "locked")]
}

/** A server (the runtime over the Docker backend) for as long as the current Scope. */
const server = (settings: Partial<SettingsShape> = {}, options: Parameters<typeof testOptions>[0] = {}) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(Runtime.layer(Settings.make({ killGraceMs: 500, ...settings }), DockerBackend.layer(testOptions(options))))
    return { computers: yield* Effect.provide(Computers, context), processes: yield* Effect.provide(Processes, context) }
  })

describeIf(dockerWorks, requirement())("the user's directories in Docker computers", () => {
  it.scopedLive("writes land on the host; ro mounts, deny-write and deny-read hold; symlinks stay inside", () =>
    Effect.gen(function*() {
      const { processes } = yield* server({ workdir: "/work/project" }, { filesystem: policy })
      const id = computerId("mounts")
      const exec = (command: string) => processes.exec("s", { command, computer_id: id })
      const wrote = yield* exec("pwd && cat a.txt && echo made > new.txt")
      assert.strictEqual(wrote.stdout, "/work/project\nfrom the host\n")
      assert.strictEqual(readFileSync(join(project, "new.txt"), "utf8"), "made\n")
      const refused = yield* exec("touch /docs/x; echo no >> locked/config; touch secret/x; ls -A secret; cat secret/key; cat to-outside/private.txt; echo end")
      assert.strictEqual(refused.stdout, "end\n")
      assert.match(refused.stderr, /\/docs\/x.*Read-only file system/)
      assert.match(refused.stderr, /locked\/config.*Read-only file system/)
      assert.notInclude(refused.stderr, "SECRET-KEY")
      assert.notInclude(refused.stdout + refused.stderr, "OUTSIDE")
      assert.strictEqual(readFileSync(join(project, "locked", "config"), "utf8"), "fixed\n")
      assert.strictEqual(readFileSync(join(project, "secret", "key"), "utf8"), "SECRET-KEY\n")
    }))
})

describeIf(dockerWorks, requirement())("how the engine gets the user's directories", () => {
  // Staged copies need a root server in the engine's mount namespace; any other gets checked paths.
  const staged = process.getuid?.() === 0 ? it.scopedLive : it.scopedLive.skip
  staged("staged: with a state directory the engine binds copies made for each start, and none is left mounted", () =>
    Effect.gen(function*() {
      const stateDir = mkdtempSync(join(root, "state-"))
      const staging = join(stateDir, "engine-mounts")
      const { computers, processes } = yield* server({ workdir: "/work/project" }, { filesystem: policy, stateDir })
      const id = computerId("staged")
      const first = yield* processes.exec("s", { command: "cat a.txt; ls -A secret; echo no >> locked/config", computer_id: id })
      assert.strictEqual(first.stdout, "from the host\n")
      assert.match(first.stderr, /locked\/config.*Read-only file system/)
      const info = yield* Effect.promise(() => docker().getContainer(`kilntainer-${id}`).inspect())
      const binds = info.HostConfig.Binds ?? []
      assert.isTrue(binds.every((bind) => bind.startsWith(`${staging}/`)), `binds not staged: ${binds.join(", ")}`)
      const mounted = () => readFileSync("/proc/self/mountinfo", "utf8").split("\n").filter((line) => line.includes(staging))
      assert.deepStrictEqual(mounted(), [])
      yield* computers.restart("s", id)
      const again = yield* processes.exec("s", { command: "cat a.txt", computer_id: id })
      assert.strictEqual(again.stdout, "from the host\n")
      assert.deepStrictEqual(mounted(), [])
    }), 120_000)

  staged("staged: a crash's leftovers are swept when the backend starts, another server's staging in progress is not", () =>
    Effect.gen(function*() {
      const stateDir = mkdtempSync(join(root, "state-"))
      const staging = join(stateDir, "engine-mounts")
      const point = (container: string) => join(staging, container, "k")
      for (const container of ["crashed", "busy"]) {
        mkdirSync(point(container), { recursive: true })
        assert.strictEqual(spawnSync("mount", ["--bind", docs, point(container)]).status, 0)
      }
      const hourAgo = new Date(Date.now() - 3_600_000)
      utimesSync(join(staging, "crashed"), hourAgo, hourAgo)
      const mounted = () => readFileSync("/proc/self/mountinfo", "utf8").split("\n").filter((line) => line.includes(staging)).length
      yield* Effect.addFinalizer(() => Effect.sync(() => spawnSync("umount", ["--lazy", point("busy")])))
      yield* server({}, { filesystem: policy, stateDir })
      assert.isFalse(existsSync(join(staging, "crashed")), "the crash's leftovers are still there")
      assert.strictEqual(mounted(), 1, "the other server's staging was touched")
      assert.strictEqual(readFileSync(join(point("busy"), "readme"), "utf8"), "docs\n")
    }), 120_000)

  it.scopedLive("checked: a source replaced since a container was made refuses its start, and a new container gets it where it is", () =>
    Effect.gen(function*() {
      const source = join(root, "checked")
      mkdirSync(source)
      writeFileSync(join(source, "c.txt"), "checked\n")
      const { computers, processes } = yield* server({}, { filesystem: { mounts: [{ source, target: "/work/c", readOnly: false }], denyRead: [], denyWrite: [] } })
      const id = computerId("checked")
      assert.strictEqual((yield* processes.exec("s", { command: "cat /work/c/c.txt", computer_id: id })).stdout, "checked\n")
      renameSync(source, `${source}.moved`)
      symlinkSync(outside, source)
      const refused = yield* Effect.flip(computers.restart("s", id))
      assert.match(refused.message, /mounts no longer match the host.*factory-reset/)
      const fresh = yield* processes.exec("s", { command: "cat /work/c/c.txt; ls /work/c", computer_id: computerId("checked") })
      assert.strictEqual(fresh.stdout, "checked\nc.txt\n")
    }), 120_000)
})

describeIf(dockerWorks, requirement())("an adopted container", () => {
  it.live("runs our processes, is listed, and survives delete, factory reset, restart and shutdown", () =>
    Effect.gen(function*() {
      const container = yield* Effect.promise(async () => {
        const made = await docker().createContainer({ name: ADOPTED, Image: TEST_IMAGE, Cmd: ["sleep", "infinity"], WorkingDir: "/srv" })
        await made.start()
        return made
      })
      const computer = ADOPTED
      yield* Effect.scoped(Effect.gen(function*() {
        const { computers, processes } = yield* server({}, { adoptContainer: ADOPTED })
        const listed = (yield* computers.list("s")).find((c) => c.computer_id === computer)
        assert.strictEqual(listed?.sandbox_id, container.id)
        assert.isFalse(listed?.temporary)
        const ran = yield* processes.exec("s", { command: "pwd; echo kept > /srv/marker; sleep 30 & echo started", computer_id: computer })
        assert.strictEqual(ran.stdout, "/srv\nstarted\n")
        for (const attempt of [computers.delete("s", computer), computers.factoryReset("s", computer), computers.restart("s", computer)]) {
          const error = yield* Effect.flip(attempt)
          assert.match(error.message, /adopted with --docker-container/)
        }
        // The refusals touched nothing: its processes still run, the computer still works.
        const after = yield* processes.exec("s", { command: "cat /srv/marker; pgrep -c sleep", computer_id: computer })
        assert.strictEqual(after.stdout, "kept\n2\n")
        // A new temporary computer of the same server is still ours to make and remove.
        const other = yield* computers.create("s", { computer_id: computerId("beside") })
        assert.notStrictEqual(yield* other.providerId, container.id)
      }))
      const info = yield* Effect.promise(() => container.inspect())
      assert.isTrue(info.State.Running)
      assert.strictEqual(info.RestartCount, 0)
      const marker = yield* Effect.promise(async () => {
        const exec = await container.exec({ Cmd: ["cat", "/srv/marker"], AttachStdout: true })
        const stream = await exec.start({})
        return await new Promise<string>((resolve) => {
          let text = ""
          stream.on("data", (chunk: Buffer) => (text += chunk.toString("latin1")))
          stream.on("end", () => resolve(text))
        })
      })
      assert.include(marker, "kept")
    }), 120_000)

  it.live("a missing container or one of ours is refused when the backend starts", () =>
    Effect.gen(function*() {
      const missing = yield* Effect.flip(Effect.scoped(server({}, { adoptContainer: `kt-no-such-${process.pid}` })))
      assert.match(String(missing.message), /there is no container named kt-no-such/)
    }), 60_000)
})
