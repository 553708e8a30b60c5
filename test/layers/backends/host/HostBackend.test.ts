/**
 * The host provider's own calls: startup checks, the computer records (labels, keys, uids, the
 * holder), find/create/start/remove/adopt, and what a connection reports. Lifecycles through the
 * kernel are in HostLifecycle.test.ts; what processes see in HostSandbox.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Option, Scope } from "effect"
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { fromLabels, toLabels } from "../../../../src/domain/ComputerMetadata.js"
import * as HostBackend from "../../../../src/layers/backends/host/HostBackend.js"
import * as ComputerRecord from "../../../../src/layers/backends/host/ComputerRecord.js"
import { processStartTime } from "../../../../src/layers/server/ProcessOwner.js"
import { collect, metadata, open, run, spec } from "../../../support/HostComputer.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"

const root = mkdtempSync(join(tmpdir(), "kt-host-provider-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

let counter = 0
const freshDir = () => mkdtempSync(join(root, `s${++counter}-`))
const backendOf = (stateDir: string) => HostBackend.make({ stateDir, network: false, sandbox: "bwrap" })
const recordOf = (stateDir: string, id: string) =>
  JSON.parse(readFileSync(join(stateDir, "computers", id, "computer.json"), "utf8")) as {
    labels: Record<string, string>
    key: string
    uid?: number
    gid?: number
    holder?: { pid: number; start: string; token: string }
  }

/** A record as kilntainers before the provider contract wrote it. */
const writeLegacy = (stateDir: string, id: string, temporary: boolean, owner: { pid: number; startTime: string }) => {
  mkdirSync(join(stateDir, "computers", id, "home"), { recursive: true })
  writeFileSync(
    join(stateDir, "computers", id, "computer.json"),
    JSON.stringify({ id, temporary, createdAt: "2026-01-02T03:04:05.000Z", image: "host", owner })
  )
}

/**
 * The host pid of the kt-agent of computer `id`: the agent whose mounts hold that computer's
 * workspace (the sandbox's command line carries no host path to tell computers apart).
 */
const agentPid = (id: string) => {
  const read = (path: string) => {
    try {
      return readFileSync(path, "utf8")
    } catch {
      return ""
    }
  }
  const agent = readdirSync("/proc").find((pid) =>
    /^\d+$/.test(pid) &&
    read(`/proc/${pid}/cmdline`).startsWith("/run/kt-agent\0") &&
    read(`/proc/${pid}/mountinfo`).includes(`/computers/${id}/home /home/agent `)
  )
  return agent === undefined ? undefined : Number(agent)
}

describe("HostBackend (provider calls)", () => {
  it.live("refuses to start without bwrap and says how to fix it", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Effect.scoped(HostBackend.make({ stateDir: root, network: false, sandbox: "bwrap", bwrap: "/nonexistent/bwrap" })))
      assert.strictEqual(error._tag, "ProviderError")
      assert.strictEqual(error.reason, "Unavailable")
      assert.include(error.message, "host backend: cannot start sandboxes:")
      assert.include(error.message, "sudo apt-get install bubblewrap")
      assert.include(error.message, "--unsafe-no-sandbox")
    }))

  it.live("refuses invalid limits as Invalid", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Effect.scoped(HostBackend.make({ stateDir: root, network: false, sandbox: "none", limits: { pids: 3 } })))
      assert.strictEqual(error.reason, "Invalid")
      assert.include(error.message, "invalid pids limit 3")
    }))

  it("reads the records of older versions as metadata the kernel understands", () => {
    const legacy = ComputerRecord.parse(JSON.stringify({
      id: "old",
      temporary: true,
      createdAt: "2026-01-02T03:04:05.000Z",
      image: "host",
      owner: { pid: 4242, startTime: "99" }
    }))
    assert.isTrue(Option.isSome(legacy))
    const record = Option.getOrThrow(legacy)
    assert.strictEqual(record.metadata.id, "old")
    assert.strictEqual(record.metadata.temporary, true)
    assert.strictEqual(record.metadata.created, "2026-01-02T03:04:05.000Z")
    assert.deepInclude(record.metadata.owner!, { pid: 4242, start: "99" })
    assert.strictEqual(record.key, undefined)
    assert.strictEqual(ComputerRecord.providerId(record), "host-old")
    assert.isTrue(Option.isNone(ComputerRecord.parse("{\"labels\":{\"kilntainers\":\"true\"},\"key\":\"k\"}")), "labels without an id are not a computer")
    assert.isTrue(Option.isNone(ComputerRecord.parse("not json")))
  })

  describeIf(bwrapWorks, "bubblewrap")("sandboxed", () => {
    it.scopedLive("create records the kernel's metadata as labels, with a key, and find reads it back", () =>
      Effect.gen(function*() {
        const stateDir = freshDir()
        const backend = yield* backendOf(stateDir)
        assert.strictEqual(backend.labelStyle, "dashed")
        assert.strictEqual(backend.image, "host")
        assert.deepStrictEqual(yield* backend.find({}), [])
        const made = metadata("box", false)
        const instance = yield* backend.create({ ...made, nonce: "n1", owner: { host: "h", pid: 7, start: "8" } })
        const record = recordOf(stateDir, "box")
        assert.deepStrictEqual(record.labels, toLabels("dashed", { ...made, nonce: "n1", owner: { host: "h", pid: 7, start: "8" } }))
        assert.deepStrictEqual(Option.getOrThrow(fromLabels("dashed", record.labels)).id, "box")
        // The sandbox id is opaque: no host path in it.
        assert.match(instance.providerId, /^host-[0-9a-z]{12}$/)
        assert.strictEqual(instance.providerId, `host-${record.key}`)
        assert.strictEqual(statSync(join(stateDir, "computers", "box")).mode & 0o777, 0o700)
        assert.isTrue(existsSync(join(stateDir, "computers", "box", "home")))
        const [found] = yield* backend.find({ id: "box" })
        assert.deepStrictEqual(found?.metadata, instance.metadata)
        assert.strictEqual(found?.providerId, instance.providerId)
        assert.strictEqual(found?.state, "stopped", "nothing is connected to it")
        assert.deepStrictEqual(yield* backend.find({ temporary: true }), [])
        assert.deepStrictEqual(yield* backend.find({ id: "../box" }), [])
        // A stray directory without a record is not a computer.
        mkdirSync(join(stateDir, "computers", "stray", "home"), { recursive: true })
        assert.deepStrictEqual((yield* backend.find({})).map((i) => i.metadata.id), ["box"])
      }))

    it.scopedLive("a taken id is a Conflict; a directory without a record is taken over", () =>
      Effect.gen(function*() {
        const stateDir = freshDir()
        const backend = yield* backendOf(stateDir)
        yield* backend.create(metadata("taken"))
        const again = yield* Effect.flip(backend.create(metadata("taken")))
        assert.strictEqual(again.reason, "Conflict")
        mkdirSync(join(stateDir, "computers", "left", "home"), { recursive: true })
        writeFileSync(join(stateDir, "computers", "left", "home", "kept.txt"), "from before\n")
        const left = yield* backend.create(metadata("left"))
        assert.strictEqual((yield* backend.find({ id: "left" }))[0]?.providerId, left.providerId)
      }))

    it.scopedLive("a connected computer is running and held; another server is refused until it lets go", () =>
      Effect.gen(function*() {
        const stateDir = freshDir()
        const first = yield* backendOf(stateDir)
        const instance = yield* first.create(metadata("keeper", false))
        const scope = yield* Scope.make()
        const connection = yield* first.connect(instance).pipe(Scope.extend(scope))
        assert.strictEqual((yield* run(connection, ["sh", "-c", "echo still here > notes.txt"])).exit?.exitCode, 0)
        assert.strictEqual((yield* first.find({ id: "keeper" }))[0]?.state, "running")
        assert.deepInclude(recordOf(stateDir, "keeper").holder!, { pid: process.pid, start: processStartTime("self")! })
        // Another server (a second backend, even in this process) may not run the same workspace.
        const second = yield* backendOf(stateDir)
        const refused = yield* Effect.flip(Effect.scoped(second.connect(instance)))
        assert.strictEqual(refused.reason, "Conflict")
        assert.include(refused.message, "in use by another kilntainers server")
        yield* Scope.close(scope, Exit.void)
        const [stopped] = yield* second.find({ id: "keeper" })
        assert.strictEqual(stopped?.state, "stopped")
        assert.strictEqual(stopped?.providerId, instance.providerId)
        assert.strictEqual(stopped?.metadata.created, instance.metadata.created)
        assert.isUndefined(recordOf(stateDir, "keeper").holder)
        const reopened = yield* second.connect(yield* second.start(stopped!))
        assert.strictEqual((yield* run(reopened, ["cat", "notes.txt"])).stdout, "still here\n")
      }))

    it.scopedLive("a holder that died holds nothing; a record of an older version is completed on start", () =>
      Effect.gen(function*() {
        const stateDir = freshDir()
        // Same pid, another start time: that server is gone.
        writeLegacy(stateDir, "old", false, { pid: process.pid, startTime: "0" })
        writeFileSync(join(stateDir, "computers", "old", "home", "notes.txt"), "from before\n")
        const backend = yield* backendOf(stateDir)
        const [found] = yield* backend.find({ id: "old" })
        assert.strictEqual(found?.providerId, "host-old")
        assert.strictEqual(found?.state, "stopped")
        assert.strictEqual(found?.metadata.created, "2026-01-02T03:04:05.000Z")
        const started = yield* backend.start(found!)
        const record = recordOf(stateDir, "old")
        assert.match(record.key, /^[0-9a-z]{12}$/)
        assert.strictEqual(started.providerId, `host-${record.key}`)
        assert.strictEqual(record.labels["kilntainers-computer-id"], "old")
        const connection = yield* backend.connect(started)
        assert.strictEqual((yield* run(connection, ["cat", "notes.txt"])).stdout, "from before\n")
      }))

    it.scopedLive("remove deletes the computer's directory, but never a newer computer of the same id", () =>
      Effect.gen(function*() {
        const stateDir = freshDir()
        const backend = yield* backendOf(stateDir)
        const first = yield* backend.create(metadata("again", false))
        yield* backend.remove(first)
        assert.isFalse(existsSync(join(stateDir, "computers", "again")))
        yield* backend.remove(first)
        const second = yield* backend.create(metadata("again", false))
        assert.notStrictEqual(second.providerId, first.providerId)
        yield* backend.remove(first)
        assert.isTrue(existsSync(join(stateDir, "computers", "again", "computer.json")), "the old instance is not the new computer")
        const missing = yield* Effect.flip(backend.start(first))
        assert.strictEqual(missing.reason, "NotFound")
      }))

    it.scopedLive("adopt renames a running computer's directory and record; its sandbox goes on", () =>
      Effect.gen(function*() {
        const stateDir = freshDir()
        const backend = yield* backendOf(stateDir)
        const pooled = { ...metadata("pool-abc"), pooled: true }
        const instance = yield* backend.create(pooled)
        const scope = yield* Scope.make()
        const connection = yield* backend.connect(instance).pipe(Scope.extend(scope))
        yield* run(connection, ["sh", "-c", "echo made in the pool > pool.txt"])
        yield* backend.create(metadata("taken"))
        const refused = yield* Effect.flip(backend.adopt!(instance, metadata("taken")))
        assert.strictEqual(refused.reason, "Conflict")
        const adopted = yield* backend.adopt!(instance, { ...metadata("mine"), created: pooled.created })
        assert.strictEqual(adopted.providerId, instance.providerId)
        assert.strictEqual(adopted.metadata.id, "mine")
        assert.isFalse(existsSync(join(stateDir, "computers", "pool-abc")))
        assert.strictEqual(readFileSync(join(stateDir, "computers", "mine", "home", "pool.txt"), "utf8"), "made in the pool\n")
        assert.strictEqual(recordOf(stateDir, "mine").labels["kilntainers-computer-id"], "mine")
        assert.strictEqual((yield* run(connection, ["cat", "pool.txt"])).stdout, "made in the pool\n")
        assert.deepStrictEqual((yield* backend.find({ id: "mine" })).map((i) => i.state), ["running"])
        yield* Scope.close(scope, Exit.void)
        assert.isUndefined(recordOf(stateDir, "mine").holder, "the renamed computer is let go")
      }))

    it.scopedLive("lost completes when the agent is killed from outside, and the connection fails after", () =>
      Effect.gen(function*() {
        const id = `lost-${process.pid}`
        const { connection } = yield* open(yield* backendOf(freshDir()), id)
        const sleeper = yield* connection.spawn(spec(["sleep", "313"]))
        const events = yield* Effect.fork(collect(sleeper))
        const pid = agentPid(id)
        assert.isDefined(pid)
        process.kill(pid!, "SIGKILL")
        const reason = yield* connection.lost.pipe(Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => "lost never completed" }))
        // The sandbox's launcher reports its agent's death as its own exit.
        assert.match(reason, /^the computer's agent (was killed by|exited with code)/)
        assert.deepStrictEqual((yield* Fiber.join(events)).exit, { exitCode: null, signal: "SIGKILL" })
        const after = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["true"]))))
        assert.strictEqual(after._tag, "ProviderError")
        if (after._tag === "ProviderError") assert.strictEqual(after.reason, "Unavailable")
      }))

    it.scopedLive("closing a connection ends its processes; lost does not complete then", () =>
      Effect.gen(function*() {
        const backend = yield* backendOf(freshDir())
        const instance = yield* backend.create(metadata(`close-${process.pid}`))
        const scope = yield* Scope.make()
        const connection = yield* backend.connect(instance).pipe(Scope.extend(scope))
        const sleeper = yield* connection.spawn(spec(["sleep", "314"])).pipe(Scope.extend(scope))
        const events = yield* Effect.fork(collect(sleeper))
        yield* Scope.close(scope, Exit.void)
        assert.isDefined((yield* Fiber.join(events)).exit)
        assert.isTrue(Option.isNone(yield* Effect.timeoutOption(connection.lost, "100 millis")))
        yield* backend.remove(instance)
      }))

    it.scopedLive.runIf(process.getuid?.() === 0)(
      "as root: a computer has its own unprivileged uid, kept across servers; a computer made again gets new ones",
      () =>
        Effect.gen(function*() {
          const stateDir = freshDir()
          const backend = yield* backendOf(stateDir)
          const a = yield* backend.create(metadata("a", false))
          yield* backend.create(metadata("b", false))
          const first = yield* Scope.make()
          yield* run(yield* backend.connect(a).pipe(Scope.extend(first)), ["sh", "-c", "echo a > mine.txt"])
          const ra = recordOf(stateDir, "a")
          assert.isAtLeast(ra.uid!, 65536)
          assert.strictEqual(ra.gid, ra.uid)
          assert.notStrictEqual(recordOf(stateDir, "b").uid, ra.uid)
          assert.strictEqual(statSync(join(stateDir, "computers", "a", "home")).uid, ra.uid)
          assert.strictEqual(statSync(join(stateDir, "computers", "a", "home", "mine.txt")).uid, ra.uid)
          yield* Scope.close(first, Exit.void)

          const next = yield* backendOf(stateDir)
          const [found] = yield* next.find({ id: "a" })
          yield* Effect.scoped(next.connect(yield* next.start(found!)))
          const again = recordOf(stateDir, "a")
          assert.deepStrictEqual([again.key, again.uid, again.gid], [ra.key, ra.uid, ra.gid])
          yield* next.remove(found!)
          const remade = yield* next.create(metadata("a", false))
          assert.notStrictEqual(remade.providerId, a.providerId)
          assert.notStrictEqual(recordOf(stateDir, "a").uid, ra.uid)
        })
    )

    it.scopedLive.runIf(process.getuid?.() === 0)(
      "as root: a workspace of an older version (root's files, no uid recorded) is given to the computer's uid",
      () =>
        Effect.gen(function*() {
          const stateDir = freshDir()
          writeLegacy(stateDir, "old", false, { pid: process.pid, startTime: "0" })
          mkdirSync(join(stateDir, "computers", "old", "home", "project"), { recursive: true })
          writeFileSync(join(stateDir, "computers", "old", "home", "project", "notes.txt"), "from before\n", { mode: 0o600 })
          chownSync(join(stateDir, "computers", "old", "home", "project", "notes.txt"), 0, 0)
          const backend = yield* backendOf(stateDir)
          const [found] = yield* backend.find({ id: "old" })
          const connection = yield* backend.connect(yield* backend.start(found!))
          const edit = yield* run(connection, ["sh", "-c", "cat project/notes.txt && echo more >> project/notes.txt"])
          assert.deepStrictEqual(edit.exit, { exitCode: 0, signal: null })
          assert.strictEqual(edit.stdout, "from before\n")
          const { uid, key } = recordOf(stateDir, "old")
          assert.strictEqual(statSync(join(stateDir, "computers", "old", "home", "project", "notes.txt")).uid, uid)
          assert.match(key, /^[0-9a-z]{12}$/)
        })
    )
  })
})
