/**
 * The Docker provider's own calls against a real engine: settings, labels, hardening, find, the
 * errors it gives, start, restart, remove, adopt. Lifecycle behaviour (attach or create, reaping,
 * factory reset, loss and recovery) is tested through the kernel in DockerLifecycle.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Option } from "effect"
import { existsSync, mkdtempSync, readdirSync, utimesSync, writeFileSync } from "node:fs"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { fromLabels } from "../../../../src/domain/ComputerMetadata.js"
import * as DockerBackend from "../../../../src/layers/backends/docker/DockerBackend.js"
import { initMissing, nonRootUser } from "../../../../src/layers/backends/docker/DockerContainers.js"
import { parseRunFlags } from "../../../../src/layers/backends/docker/DockerRunFlags.js"
import { processStartTime } from "../../../../src/layers/server/ProcessOwner.js"
import {
  computerIds,
  docker,
  dockerComputer,
  dockerWorks,
  foreignContainer,
  removeOurContainers,
  requirement,
  run,
  sh,
  TEST_ENGINE,
  TEST_IMAGE,
  testMetadata,
  testOptions
} from "../../../support/Docker.js"
import { describeIf } from "../../../support/Requirements.js"

const computerId = computerIds()

const provider = (overrides: Parameters<typeof testOptions>[0] = {}) => DockerBackend.make(testOptions(overrides))
const inspect = (id: string) => Effect.promise(() => docker().getContainer(id).inspect())
const exists = (id: string) => Effect.promise(() => docker().getContainer(id).inspect().then(() => true, () => false))

/** A warm pool's container, made and handed out under a new id: the same instance, its metadata the real id's, still pooled. */
const adoptPooled = (backend: Effect.Effect.Success<ReturnType<typeof provider>>) =>
  Effect.gen(function*() {
    const poolId = computerId("pool")
    const pooled = yield* dockerComputer(backend, testMetadata(poolId, { pooled: true }))
    const realId = computerId("real")
    const { pooled: _, ...metadata } = pooled.instance.metadata
    const adopted = yield* backend.adopt!(pooled.instance, { ...metadata, id: realId })
    assert.strictEqual(adopted.providerId, pooled.instance.providerId)
    assert.deepStrictEqual(adopted.metadata, { ...metadata, id: realId, pooled: true })
    return { poolId, realId, pooled, adopted }
  })

afterAll(removeOurContainers)

describe("what the engines say", () => {
  it("an init binary missing: Docker's words at start, Podman's at create; other init failures are not that", () => {
    assert.isTrue(initMissing("OCI runtime create failed: exec: \"docker-init\": executable file not found in $PATH: unknown"))
    assert.isTrue(initMissing("container create: container-init binary not found on the host: stat /usr/libexec/podman/catatonit: no such file or directory"))
    assert.isFalse(initMissing("runc create failed: unable to start container process: error during container init: error setting rlimits for ready process: error setting rlimit type 7: operation not permitted"))
    assert.isFalse(initMissing("no such image: debian:nope"))
  })

  it("a --user other than root, whatever its spelling", () => {
    for (const user of ["agent", "1000", "1000:1000", "agent:agent", "rootless", "10"]) assert.isTrue(nonRootUser(user), user)
    for (const user of [undefined, "0", "root", "0:0", "root:root", "root:1000", " 0 "]) assert.isFalse(nonRootUser(user), String(user))
  })
})

describe("DockerRunFlags", () => {
  it("maps the supported flags in every spelling", () => {
    const parsed = parseRunFlags([
      "--cap-add=SYS_PTRACE", "--cap-drop KILL", "-e", "A=1", "--volume=/srv:/data:ro", "--read-only",
      "--tmpfs /home/agent:size=64m", "--user=1000:1000", "--shm-size 256m", "--ulimit nofile=1024:2048",
      "--add-host=db:10.0.0.2", "--dns 1.1.1.1", "--label team=x"
    ])
    assert.isTrue(Either.isRight(parsed))
    const flags = Either.getOrThrow(parsed)
    assert.deepStrictEqual(flags.capAdd, ["SYS_PTRACE"])
    assert.deepStrictEqual(flags.capDrop, ["KILL"])
    assert.deepStrictEqual(flags.env, ["A=1"])
    assert.deepStrictEqual(flags.binds, ["/srv:/data:ro"])
    assert.isTrue(flags.readOnly)
    assert.deepStrictEqual(flags.tmpfs, { "/home/agent": "size=64m" })
    assert.strictEqual(flags.user, "1000:1000")
    assert.strictEqual(flags.shmSize, 256 * 1024 ** 2)
    assert.deepStrictEqual(flags.ulimits, [{ Name: "nofile", Soft: 1024, Hard: 2048 }])
    assert.deepStrictEqual(flags.extraHosts, ["db:10.0.0.2"])
    assert.deepStrictEqual(flags.dns, ["1.1.1.1"])
    assert.deepStrictEqual(flags.labels, { team: "x" })
  })

  it("refuses unknown and dangerous flags with a clear message", () => {
    const unknown = parseRunFlags(["--frobnicate=1"])
    assert.isTrue(Either.isLeft(unknown) && unknown.left.includes("unsupported --docker-run-flag '--frobnicate'"))
    const privileged = parseRunFlags(["--privileged"])
    assert.isTrue(Either.isLeft(privileged) && privileged.left.includes("not allowed"))
    assert.isTrue(Either.isLeft(parseRunFlags(["--cap-add", "ALL"])))
    assert.isTrue(Either.isLeft(parseRunFlags(["--label", "kilntainers.instance=x"])))
  })

  it("reserves only the labels the backend reads (kilntainers, kilntainers.*) and takes a key alone, as docker run", () => {
    for (const key of ["kilntainers", "kilntainers.computer-id", "kilntainers.anything"]) {
      const refused = parseRunFlags(["--label", `${key}=x`])
      assert.isTrue(Either.isLeft(refused) && refused.left.includes("kilntainers' own"), key)
    }
    const theirs = Either.getOrThrow(parseRunFlags([
      "--label", "kilntainers-http-test", "--label=kilntainers_run=1", "--label kilntainersx=2", "--label=team"
    ]))
    assert.deepStrictEqual(theirs.labels, { "kilntainers-http-test": "", kilntainers_run: "1", kilntainersx: "2", team: "" })
    assert.isTrue(Either.isLeft(parseRunFlags(["--label", "=x"])))
  })

  it("maps engine addresses like DOCKER_HOST", () => {
    const unix = Either.getOrThrow(DockerBackend.connectionOptions({ engine: "docker", dockerHost: "unix:///tmp/d.sock" }))
    assert.strictEqual(unix.socketPath, "/tmp/d.sock")
    const tcp = Either.getOrThrow(DockerBackend.connectionOptions({ engine: "docker", dockerHost: "tcp://10.1.2.3:2375" }))
    assert.deepInclude(tcp, { host: "10.1.2.3", port: "2375", protocol: "http" })
    const ssh = Either.getOrThrow(DockerBackend.connectionOptions({ engine: "docker", dockerHost: "ssh://me@box" }))
    assert.deepInclude(ssh, { host: "box", port: "22", protocol: "ssh", username: "me" })
    assert.isTrue(Either.isLeft(DockerBackend.connectionOptions({ engine: "docker", dockerHost: "ftp://x" })))
  })

  it.effect("a bad setting fails the layer before the engine is touched", () =>
    Effect.gen(function*() {
      // An address nothing answers on: only the settings check can have failed.
      const nowhere = { dockerHost: "unix:///nonexistent/docker.sock" }
      for (const [overrides, said] of [
        [{ runFlags: ["--frobnicate"] }, "unsupported --docker-run-flag"],
        [{ memory: "lots" }, "invalid memory limit 'lots'"],
        [{ memory: "1m" }, "is too small"],
        [{ cpu: 0 }, "invalid CPU count 0"],
        [{ pidsLimit: 1.5 }, "invalid pids limit 1.5"]
      ] as const) {
        const error = yield* Effect.flip(Effect.scoped(provider({ ...nowhere, ...overrides })))
        assert.strictEqual(error._tag, "ProviderError")
        assert.strictEqual(error.reason, "Invalid")
        assert.include(error.message, said)
      }
      const unreachable = yield* Effect.flip(Effect.scoped(provider(nowhere)))
      assert.strictEqual(unreachable.reason, "Unavailable")
      assert.include(
        unreachable.message,
        `${TEST_ENGINE} backend: cannot reach the engine: no ${TEST_ENGINE} engine answers at unix:///nonexistent/docker.sock`
      )
    }))
})

describeIf(dockerWorks, requirement())("the Docker provider", () => {
  it.live("ping answers true for the local engine and false for a missing socket", () =>
    Effect.gen(function*() {
      assert.isTrue(yield* DockerBackend.ping({ engine: TEST_ENGINE, dockerHost: undefined }))
      const started = Date.now()
      assert.isFalse(yield* DockerBackend.ping({ engine: TEST_ENGINE, dockerHost: "unix:///nonexistent/docker.sock" }))
      assert.isBelow(Date.now() - started, 2000)
    }))

  it.live("a missing image that cannot be pulled is a clear error", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const error = yield* Effect.flip(Effect.scoped(provider({ image: "kilntainers-test/missing-image:nope", onPullProgress: (line) => lines.push(line) })))
      assert.strictEqual(error._tag, "ProviderError")
      assert.include(error.message, `'kilntainers-test/missing-image:nope' is not present on the ${TEST_ENGINE} engine`)
      assert.include(error.message, "pulling it failed")
    }))

  it.scopedLive("a limit the engine cannot set fails the create with how to lower it, and leaves no container", () =>
    Effect.gen(function*() {
      // Above fs.nr_open: no engine can give it, whatever its capabilities.
      const backend = yield* provider({ runFlags: ["--ulimit=nofile=2000000:2000000"] })
      const id = computerId("rlimit")
      const error = yield* Effect.flip(Effect.scoped(dockerComputer(backend, testMetadata(id))))
      assert.strictEqual(error._tag, "ProviderError")
      assert.include(error.message, "setting rlimit")
      assert.include(error.message, "default_ulimits in containers.conf")
      assert.deepStrictEqual(yield* backend.find({ id }), [])
    }))

  it.scopedLive("a container carries the computer's metadata as labels, and the hardening; apt/dpkg work as root with --user=0", () =>
    Effect.gen(function*() {
      const backend = yield* provider()
      const id = computerId("labels")
      const metadata = testMetadata(id, { nonce: "n1" })
      const { connection, instance } = yield* dockerComputer(backend, metadata)
      assert.strictEqual(instance.state, "running")
      const info = yield* inspect(instance.providerId)
      assert.strictEqual(info.Name, `/kilntainer-${id}`)
      assert.strictEqual(info.Config.Hostname, id)
      const labels = info.Config.Labels
      assert.strictEqual(labels["kilntainers"], "true")
      assert.strictEqual(labels["kilntainers.computer-id"], id)
      assert.strictEqual(labels["kilntainers.temporary"], "true")
      assert.strictEqual(labels["kilntainers.image"], TEST_IMAGE)
      assert.strictEqual(labels["kilntainers.instance"], `test-${process.pid}`)
      assert.strictEqual(labels["kilntainers.created"], metadata.created)
      assert.strictEqual(labels["kilntainers.owner-host"], hostname())
      assert.strictEqual(labels["kilntainers.owner-pid"], String(process.pid))
      assert.strictEqual(labels["kilntainers.owner-start"], processStartTime("self"))
      assert.strictEqual(labels["kilntainers.create-nonce"], "n1")
      assert.deepStrictEqual(Option.getOrThrow(fromLabels("dotted", labels)), metadata)
      const host = info.HostConfig
      assert.strictEqual(host.NetworkMode, "none")
      if (TEST_ENGINE === "docker") {
        // Podman's inspect lists every dropped capability instead of ALL: the bounding set below
        // says what is left, on either engine.
        assert.deepStrictEqual(host.CapDrop, ["ALL"])
        assert.sameMembers(host.CapAdd ?? [], [...DockerBackend.DEFAULT_CAPABILITIES])
      }
      assert.include(host.SecurityOpt ?? [], "no-new-privileges")
      assert.strictEqual(host.PidsLimit, 512)
      assert.strictEqual(host.Memory, 1024 ** 3)
      assert.strictEqual(host.MemorySwap, 1024 ** 3)
      assert.strictEqual(host.NanoCpus, 1e9)
      // The engine's init is PID 1; where the engine has none (Podman without catatonit), our shell reaper is.
      const pid1 = (yield* run(connection, ["cat", "/proc/1/cmdline"])).stdout.replace(/\0/g, " ")
      if (TEST_ENGINE === "docker" || host.Init === true) assert.isTrue(host.Init, pid1)
      else assert.match(pid1, /^\/bin\/sh -c trap /)

      const net = yield* run(connection, ["cat", "/proc/net/dev"])
      const interfaces = net.stdout.split("\n").slice(2).filter((l) => l.trim()).map((l) => l.trim().split(":")[0])
      assert.deepStrictEqual(interfaces, ["lo"])
      const caps = yield* sh(connection, "grep CapEff /proc/self/status; grep CapBnd /proc/self/status; grep NoNewPrivs /proc/self/status")
      assert.include(caps.stdout, "NoNewPrivs:\t1")
      assert.notInclude(caps.stdout, "CapEff:\t000001ffffffffff")
      // CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, FSETID 4, KILL 5, SETGID 6, SETUID 7: nothing else can ever be had.
      assert.include(caps.stdout, "CapBnd:\t00000000000000fb")

      // The guest is agent and holds no capability; the bounding set is what root (--user=0) gets.
      assert.strictEqual((yield* sh(connection, "id -un")).stdout, "agent\n")
      assert.include(caps.stdout, "CapEff:\t0000000000000000")

      // A package with files, a maintainer script that adds a user and chowns: what apt/dpkg need,
      // as root (--docker-run-flag --user=0: the old guest).
      const asRoot = yield* dockerComputer(yield* provider({ runFlags: ["--user=0"] }), testMetadata(computerId("labels-root")))
      const deb = yield* sh(asRoot.connection, [
        "set -e; mkdir -p /tmp/p/DEBIAN /tmp/p/usr/share/ktdemo; echo hi > /tmp/p/usr/share/ktdemo/f",
        "printf 'Package: ktdemo\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: x <x@y>\\nDescription: demo\\n' > /tmp/p/DEBIAN/control",
        "printf '#!/bin/sh\\nuseradd -r ktdemo && chown ktdemo /usr/share/ktdemo/f\\n' > /tmp/p/DEBIAN/postinst",
        "chmod 755 /tmp/p/DEBIAN/postinst; dpkg-deb --build /tmp/p /tmp/ktdemo.deb >/dev/null",
        "apt-get install -y /tmp/ktdemo.deb >/dev/null 2>&1; stat -c %U /usr/share/ktdemo/f; dpkg -r ktdemo >/dev/null; echo removed"
      ].join("\n"))
      assert.deepStrictEqual({ out: deb.stdout, code: deb.exit?.exitCode }, { out: "ktdemo\nremoved\n", code: 0 })
    }))

  it.scopedLive("find: our containers by id and kind, decoded from their labels; nothing else", () =>
    Effect.gen(function*() {
      const backend = yield* provider()
      const temporary = yield* dockerComputer(backend, testMetadata(computerId("find-temp")))
      const permanent = yield* dockerComputer(backend, testMetadata(computerId("find-perm"), { temporary: false }))
      // Under our name and with our marker, but not a computer of ours: never found.
      const foreignId = computerId("find-foreign")
      yield* foreignContainer(foreignId, { kilntainers: "true", "kilntainers.computer-id": foreignId })
      const byId = yield* backend.find({ id: temporary.instance.metadata.id })
      assert.deepStrictEqual(byId, [temporary.instance])
      const permanents = yield* backend.find({ temporary: false })
      assert.isTrue(permanents.some((found) => found.providerId === permanent.instance.providerId && !found.metadata.temporary))
      assert.isFalse(permanents.some((found) => found.providerId === temporary.instance.providerId))
      assert.deepStrictEqual(yield* backend.find({ id: foreignId }), [])
      assert.deepStrictEqual(yield* backend.find({ id: computerId("never-made") }), [])
    }))

  it.scopedLive("a name taken by a container that is not ours is a Conflict that says so, and the container is left untouched", () =>
    Effect.gen(function*() {
      const backend = yield* provider()
      const id = computerId("foreign")
      const foreign = yield* foreignContainer(id)
      // Its labels as made (the image's own labels come with them).
      const labels = (yield* inspect(foreign.id)).Config.Labels
      const error = yield* Effect.flip(backend.create(testMetadata(id)))
      assert.strictEqual(error.reason, "Conflict")
      assert.include(error.message, "was not created by kilntainers")
      const info = yield* inspect(foreign.id)
      assert.isTrue(info.State.Running)
      assert.deepStrictEqual(info.Config.Labels, labels)
      assert.deepInclude(labels, { other: "yes", "kilntainers.owner-pid": String(process.pid) })
      // Our own container under the name is a Conflict too: the kernel then finds and attaches it.
      const ours = yield* dockerComputer(backend, testMetadata(computerId("twice")))
      const again = yield* Effect.flip(backend.create(ours.instance.metadata))
      assert.strictEqual(again.reason, "Conflict")
      assert.include(again.message, "already exists")
    }))

  it.scopedLive("start runs a stopped or paused container again; restart keeps its writable layer; remove is idempotent", () =>
    Effect.gen(function*() {
      const backend = yield* provider()
      const { connection, instance } = yield* dockerComputer(backend, testMetadata(computerId("start"), { temporary: false }))
      yield* sh(connection, "echo kept > /home/agent/kt-marker")
      yield* Effect.promise(() => docker().getContainer(instance.providerId).stop({ t: 1 }))
      const stopped = (yield* backend.find({ id: instance.metadata.id }))[0]!
      assert.strictEqual(stopped.state, "stopped")
      assert.strictEqual((yield* backend.start(stopped)).state, "running")
      assert.isTrue((yield* inspect(instance.providerId)).State.Running)
      yield* Effect.promise(() => docker().getContainer(instance.providerId).pause())
      assert.strictEqual((yield* backend.find({ id: instance.metadata.id }))[0]!.state, "paused")
      yield* backend.start(instance)
      assert.isFalse((yield* inspect(instance.providerId)).State.Paused)
      // Starting one that runs is harmless.
      yield* backend.start(instance)

      const restarted = yield* backend.restart(instance)
      assert.strictEqual(restarted.providerId, instance.providerId)
      const after = yield* Effect.scoped(Effect.flatMap(backend.connect(restarted), (c) => sh(c, "cat /home/agent/kt-marker")))
      assert.strictEqual(after.stdout, "kept\n")

      yield* backend.remove(instance)
      assert.isFalse(yield* exists(instance.providerId))
      yield* backend.remove(instance)
      const gone = yield* Effect.flip(backend.start(instance))
      assert.strictEqual(gone.reason, "NotFound")
    }))

  it.scopedLive("without a state directory, adopt renames a pool's container to its real id: found under it, its pool labels kept", () =>
    Effect.gen(function*() {
      const backend = yield* provider()
      const { poolId, realId, pooled, adopted } = yield* adoptPooled(backend)
      const info = yield* inspect(adopted.providerId)
      assert.strictEqual(info.Name, `/kilntainer-${realId}`)
      assert.strictEqual(info.Config.Labels["kilntainers.computer-id"], poolId)
      assert.strictEqual(info.Config.Labels["kilntainers.pooled"], "true")
      const found = yield* backend.find({ id: realId })
      assert.deepStrictEqual(found.map((i) => [i.providerId, i.metadata.id]), [[adopted.providerId, realId]])
      assert.deepStrictEqual(yield* backend.find({ id: poolId }), [])
      assert.isTrue((yield* backend.find({ temporary: true })).some((i) => i.metadata.id === realId && i.metadata.pooled))
      // Its processes keep running through the connection made before the rename.
      assert.strictEqual((yield* run(pooled.connection, ["echo", "still"])).stdout, "still\n")
      // The pool's name is free again; a name taken meanwhile is a Conflict.
      const other = yield* dockerComputer(backend, testMetadata(computerId("other")))
      const clash = yield* Effect.flip(backend.adopt!(other.instance, { ...other.instance.metadata, id: realId }))
      assert.strictEqual(clash.reason, "Conflict")
    }))

  it.scopedLive("with a state directory, adopt records the real id there (no rename): found under it, by a second server too, the record gone with the container", () =>
    Effect.gen(function*() {
      const stateDir = mkdtempSync(join(tmpdir(), "kt-pool-ids-"))
      const backend = yield* provider({ stateDir })
      const { poolId, realId, pooled, adopted } = yield* adoptPooled(backend)
      const info = yield* inspect(adopted.providerId)
      assert.strictEqual(info.Name, `/kilntainer-${poolId}`, "the container keeps its pool name")
      assert.strictEqual(info.Config.Labels["kilntainers.computer-id"], poolId)
      const record = join(stateDir, "pool-ids", `${adopted.providerId}.${realId}`)
      assert.isTrue(existsSync(record))
      const found = yield* backend.find({ id: realId })
      assert.deepStrictEqual(found.map((i) => [i.providerId, i.metadata.id, i.metadata.pooled]), [[adopted.providerId, realId, true]])
      assert.deepStrictEqual(yield* backend.find({ id: poolId }), [])
      assert.isTrue((yield* backend.find({ temporary: true })).some((i) => i.metadata.id === realId))
      assert.isFalse((yield* backend.find({ temporary: false })).some((i) => i.providerId === adopted.providerId))
      // Another server instance over the same engine and state directory sees the same identity.
      const second = yield* provider({ stateDir })
      assert.deepStrictEqual((yield* second.find({ id: realId })).map((i) => i.providerId), [adopted.providerId])
      assert.strictEqual((yield* run(pooled.connection, ["echo", "still"])).stdout, "still\n")
      // Removed (the computer deleted, or reaped after a crash): the record goes with it.
      yield* second.remove(found[0]!)
      assert.isFalse(existsSync(record))
      assert.deepStrictEqual(yield* backend.find({ id: realId }), [])
    }))

  it.scopedLive("a record whose container is gone is pruned by a later listing; a recent one is left (its container may be in a listing under way)", () =>
    Effect.gen(function*() {
      const stateDir = mkdtempSync(join(tmpdir(), "kt-pool-ids-"))
      const backend = yield* provider({ stateDir })
      const pooled = yield* dockerComputer(backend, testMetadata(computerId("pool"), { pooled: true }))
      const { pooled: _, ...metadata } = pooled.instance.metadata
      yield* backend.adopt!(pooled.instance, { ...metadata, id: computerId("kept") })
      const dir = join(stateDir, "pool-ids")
      const stale = join(dir, `${"ab".repeat(32)}.gone`)
      const recent = join(dir, `${"cd".repeat(32)}.recent`)
      writeFileSync(stale, "")
      writeFileSync(recent, "")
      utimesSync(stale, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000))
      yield* backend.find({})
      assert.isFalse(existsSync(stale))
      assert.isTrue(existsSync(recent))
      assert.strictEqual(readdirSync(dir).length, 2)
    }))
})
