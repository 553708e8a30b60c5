import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Either, Exit, Fiber, Layer, Option, Scope, Stream } from "effect"
import { spawnSync } from "node:child_process"
import { hostname } from "node:os"
import { afterAll } from "vitest"
import * as DockerBackend from "../../../src/layers/backends/DockerBackend.js"
import { parseRunFlags, parseSize } from "../../../src/layers/backends/DockerRunFlags.js"
import type { BackendComputer, BackendProcess, ExitInfo, SpawnSpec } from "../../../src/services/Backend.js"
import { Backend } from "../../../src/services/Backend.js"
import { docker, dockerWorks, TEST_IMAGE } from "../../support/Docker.js"
import { describeIf } from "../../support/Requirements.js"

const run = Math.random().toString(36).slice(2, 8)
const instancePrefix = `test-${run}`
const ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" }

const options = (overrides: Partial<DockerBackend.DockerBackendOptions> = {}): DockerBackend.DockerBackendOptions => ({
  engine: "docker",
  dockerHost: undefined,
  image: TEST_IMAGE,
  cpu: undefined,
  memory: undefined,
  pidsLimit: 512,
  network: false,
  runFlags: [],
  instanceId: `${instancePrefix}-${Math.random().toString(36).slice(2, 6)}`,
  ...overrides
})

const backendLayer = (overrides: Partial<DockerBackend.DockerBackendOptions> = {}) => DockerBackend.layer(options(overrides))

let counter = 0
const computerId = (what: string) => `t${run}-${what}-${counter++}`

interface Result {
  readonly stdout: string
  readonly stderr: string
  readonly exit: ExitInfo | undefined
}

const collect = (process: BackendProcess) =>
  process.events.pipe(
    Stream.runFold({ stdout: "", stderr: "", exit: undefined } as Result, (acc, event) =>
      event._tag === "Exit"
        ? { ...acc, exit: event.exit }
        : event._tag === "Stdout"
        ? { ...acc, stdout: acc.stdout + Buffer.from(event.data).toString() }
        : { ...acc, stderr: acc.stderr + Buffer.from(event.data).toString() })
  )

const spec = (argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}): SpawnSpec => ({
  argv,
  cwd: DockerBackend.HOME,
  env: ENV,
  ...extra
})

const exec = (computer: BackendComputer, argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}) =>
  Effect.scoped(Effect.flatMap(computer.spawn(spec(argv, extra)), collect))

const sh = (computer: BackendComputer, script: string) => exec(computer, ["sh", "-c", script])

const inspect = (id: string) => Effect.promise(() => docker().getContainer(id).inspect())
const exists = (id: string) =>
  Effect.promise(() => docker().getContainer(id).inspect().then(() => true, () => false))

/** Runs `effect` until its value is `ok` (bounded). */
const eventually = <A, E>(effect: Effect.Effect<A, E>, ok: (a: A) => boolean, what: string, millis = 10_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + millis
    for (;;) {
      const value = yield* effect
      if (ok(value)) return value
      if (Date.now() > deadline) return assert.fail(`timed out waiting for ${what}`)
      yield* Effect.sleep("100 millis")
    }
  })

afterAll(async () => {
  if (!dockerWorks) return
  const client = docker()
  const containers = await client.listContainers({ all: true })
  await Promise.all(
    containers
      .filter((c) =>
        (c.Labels?.[DockerBackend.LABEL.instance] ?? "").startsWith(instancePrefix) ||
        c.Names.some((name) => name.includes(`t${run}-`))
      )
      .map((c) => client.getContainer(c.Id).remove({ force: true }).catch(() => {}))
  )
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
    assert.strictEqual(parseSize("2g"), 2 * 1024 ** 3)
    assert.isUndefined(parseSize("lots"))
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
})

describeIf(dockerWorks, "a Docker engine with the debian:bookworm-slim test image")("DockerBackend", () => {
  it.live("ping answers true for the local engine and false for a missing socket", () =>
    Effect.gen(function*() {
      assert.isTrue(yield* DockerBackend.ping({ engine: "docker", dockerHost: undefined }))
      const started = Date.now()
      assert.isFalse(yield* DockerBackend.ping({ engine: "docker", dockerHost: "unix:///nonexistent/docker.sock" }))
      assert.isBelow(Date.now() - started, 2000)
    }))

  it.live("a missing image that cannot be pulled is a clear error", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const error = yield* Effect.flip(Layer.build(backendLayer({
        image: "kilntainers-test/missing-image:nope",
        onPullProgress: (line) => lines.push(line)
      })).pipe(Effect.scoped))
      assert.strictEqual(error._tag, "BackendError")
      assert.include(error.message, "'kilntainers-test/missing-image:nope' is not present on the docker engine")
      assert.include(error.message, "pulling it failed")
    }))

  it.live("unknown --docker-run-flag fails the layer", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Layer.build(backendLayer({ runFlags: ["--frobnicate"] })).pipe(Effect.scoped))
      assert.include(error.message, "unsupported --docker-run-flag")
    }))

  it.scopedLive("runs processes: exit code, stdout, stderr, exact environment, working directory", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("basic"), temporary: true })
      const result = yield* sh(computer, "echo out; echo err >&2; exit 3")
      assert.deepStrictEqual(result, { stdout: "out\n", stderr: "err\n", exit: { exitCode: 3, signal: null } })
      const env = yield* exec(computer, ["env"], { env: { PATH: "/usr/bin:/bin", ONLY: "this" } })
      assert.strictEqual(env.stdout, "PATH=/usr/bin:/bin\nONLY=this\n")
      const pwd = yield* exec(computer, ["sh", "-c", "pwd; id -u; echo $HOME"], { env: { ...ENV, HOME: DockerBackend.HOME } })
      assert.strictEqual(pwd.stdout, "/home/agent\n0\n/home/agent\n")
      const tmp = yield* exec(computer, ["pwd"], { cwd: "/tmp" })
      assert.strictEqual(tmp.stdout, "/tmp\n")
      const missing = yield* Effect.flip(Effect.scoped(computer.spawn(spec(["no-such-command"]))))
      assert.strictEqual(missing._tag, "SpawnFailed")
      assert.match(missing.message, /command not found|No such file or directory/)
      const badCwd = yield* Effect.flip(Effect.scoped(computer.spawn(spec(["true"], { cwd: "/no/such/dir" }))))
      assert.strictEqual(badCwd._tag, "SpawnFailed")
      assert.include(badCwd.message, "/no/such/dir")
      const big = yield* sh(computer, "head -c 3000000 /dev/zero | tr '\\0' x; echo done >&2")
      assert.strictEqual(big.stdout.length, 3_000_000)
      assert.strictEqual(big.stderr, "done\n")
    }).pipe(Effect.provide(backendLayer())))

  it.scopedLive("stdin is forwarded and closeStdin gives cat its EOF", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("stdin"), temporary: true })
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["cat"]))
        assert.isNumber(process.pid)
        const fiber = yield* Effect.fork(collect(process))
        yield* process.write(new TextEncoder().encode("hello\n"))
        yield* process.write(new TextEncoder().encode("world\n"))
        yield* process.closeStdin
        return yield* Fiber.join(fiber).pipe(Effect.timeout("10 seconds"))
      }))
      assert.deepStrictEqual(result, { stdout: "hello\nworld\n", stderr: "", exit: { exitCode: 0, signal: null } })
    }).pipe(Effect.provide(backendLayer())))

  it.scopedLive("TTY: a real terminal of the given size, resizable", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("tty"), temporary: true })
      const tty = yield* exec(computer, ["tty"], { tty: { cols: 100, rows: 20 } })
      assert.match(tty.stdout, /^\/dev\/pts\/\d+\r\n$/)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["sh", "-c", "stty size; read x; stty size"], { tty: { cols: 100, rows: 20 } }))
        const fiber = yield* Effect.fork(collect(process))
        yield* Effect.sleep("300 millis")
        yield* process.resize(120, 40)
        yield* process.write(new TextEncoder().encode("\r"))
        return yield* Fiber.join(fiber).pipe(Effect.timeout("10 seconds"))
      }))
      assert.match(result.stdout, /^20 100\r\n[\s\S]*40 120\r\n$/)
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
    }).pipe(Effect.provide(backendLayer())))

  it.scopedLive("signals reach the process group: no sleep survives a kill, nor a closed scope", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("kill"), temporary: true })
      const sleeps = sh(computer, "ps -eo args | grep '^sleep 30[0-9]' || true").pipe(Effect.map((r) => r.stdout))
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["sh", "-c", "sleep 300 & sleep 301"]))
        const fiber = yield* Effect.fork(collect(process))
        yield* eventually(sleeps, (out) => out.includes("sleep 300") && out.includes("sleep 301"), "the sleeps to start")
        yield* process.signal("SIGTERM")
        return yield* Fiber.join(fiber).pipe(Effect.timeout("10 seconds"))
      }))
      assert.deepStrictEqual(result.exit, { exitCode: null, signal: "SIGTERM" })
      yield* eventually(sleeps, (out) => out === "", "no sleep left after the kill")

      // Closing the process's scope while it runs SIGKILLs its whole session.
      const scope = yield* Scope.make()
      const process = yield* computer.spawn(spec(["sh", "-c", "sleep 302 & sleep 303"])).pipe(Scope.extend(scope))
      const events = yield* Effect.fork(collect(process))
      yield* eventually(sleeps, (out) => out.includes("sleep 303"), "the second sleeps to start")
      yield* Scope.close(scope, Exit.void)
      const closed = yield* Fiber.join(events).pipe(Effect.timeout("10 seconds"))
      assert.strictEqual(closed.exit?.signal, "SIGKILL")
      yield* eventually(sleeps, (out) => out === "", "no sleep left after the scope closed")
    }).pipe(Effect.provide(backendLayer())))

  it.scopedLive("labels and hardening of the container; no network by default; apt/dpkg still work as root", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const id = computerId("labels")
      const computer = yield* backend.open({ id, temporary: true })
      const info = yield* inspect(computer.providerId)
      assert.strictEqual(info.Name, `/kilntainer-${id}`)
      const labels = info.Config.Labels
      assert.strictEqual(labels["kilntainers"], "true")
      assert.strictEqual(labels["kilntainers.computer-id"], id)
      assert.strictEqual(labels["kilntainers.temporary"], "true")
      assert.strictEqual(labels["kilntainers.image"], TEST_IMAGE)
      assert.isTrue(labels["kilntainers.instance"]!.startsWith(instancePrefix))
      assert.isFalse(Number.isNaN(Date.parse(labels["kilntainers.created"]!)))
      assert.strictEqual(labels["kilntainers.owner-host"], hostname())
      assert.strictEqual(labels["kilntainers.owner-pid"], String(process.pid))
      assert.strictEqual(labels["kilntainers.owner-start"], DockerBackend.processStartTime("self"))
      const host = info.HostConfig
      assert.strictEqual(host.NetworkMode, "none")
      assert.deepStrictEqual(host.CapDrop, ["ALL"])
      assert.sameMembers(host.CapAdd ?? [], [...DockerBackend.DEFAULT_CAPABILITIES])
      assert.include(host.SecurityOpt ?? [], "no-new-privileges")
      assert.strictEqual(host.PidsLimit, 512)
      assert.strictEqual(host.Memory, 1024 ** 3)
      assert.strictEqual(host.MemorySwap, 1024 ** 3)
      assert.strictEqual(host.NanoCpus, 1e9)
      assert.isTrue(host.Init)

      const net = yield* exec(computer, ["cat", "/proc/net/dev"])
      const interfaces = net.stdout.split("\n").slice(2).filter((l) => l.trim()).map((l) => l.trim().split(":")[0])
      assert.deepStrictEqual(interfaces, ["lo"])
      const caps = yield* sh(computer, "grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status")
      assert.include(caps.stdout, "NoNewPrivs:\t1")
      assert.notInclude(caps.stdout, "CapEff:\t000001ffffffffff")

      // A package with files, a maintainer script that adds a user and chowns: what apt/dpkg need.
      const deb = yield* sh(computer, [
        "set -e; mkdir -p /tmp/p/DEBIAN /tmp/p/usr/share/ktdemo; echo hi > /tmp/p/usr/share/ktdemo/f",
        "printf 'Package: ktdemo\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: x <x@y>\\nDescription: demo\\n' > /tmp/p/DEBIAN/control",
        "printf '#!/bin/sh\\nuseradd -r ktdemo && chown ktdemo /usr/share/ktdemo/f\\n' > /tmp/p/DEBIAN/postinst",
        "chmod 755 /tmp/p/DEBIAN/postinst; dpkg-deb --build /tmp/p /tmp/ktdemo.deb >/dev/null",
        "apt-get install -y /tmp/ktdemo.deb >/dev/null 2>&1; stat -c %U /usr/share/ktdemo/f; dpkg -r ktdemo >/dev/null; echo removed"
      ].join("\n"))
      assert.deepStrictEqual({ out: deb.stdout, code: deb.exit?.exitCode }, { out: "ktdemo\nremoved\n", code: 0 })
    }).pipe(Effect.provide(backendLayer())))

  it.live("a temporary computer's container is removed when its scope closes", () =>
    Effect.gen(function*() {
      const providerId = yield* Effect.scoped(Effect.gen(function*() {
        const backend = yield* Backend
        const computer = yield* backend.open({ id: computerId("temp"), temporary: true })
        assert.isTrue(yield* exists(computer.providerId))
        return computer.providerId
      })).pipe(Effect.provide(backendLayer()))
      assert.isFalse(yield* exists(providerId))
    }))

  it.live("a permanent computer survives its server: a fresh layer re-opens it by id and finds its files", () =>
    Effect.gen(function*() {
      const id = computerId("perm")
      const first = yield* Effect.scoped(Effect.gen(function*() {
        const backend = yield* Backend
        const computer = yield* backend.open({ id, temporary: false })
        const wrote = yield* sh(computer, "echo kept > /home/agent/note")
        assert.strictEqual(wrote.exit?.exitCode, 0)
        return computer.providerId
      })).pipe(Effect.provide(backendLayer()))
      assert.strictEqual((yield* inspect(first)).State.Running, true)

      yield* Effect.scoped(Effect.gen(function*() {
        const backend = yield* Backend
        const listed = (yield* backend.list).find((c) => c.id === id)
        assert.deepInclude(listed, { id, temporary: false, providerId: first, image: TEST_IMAGE, state: "running" })
        const mismatch = yield* Effect.flip(Effect.scoped(backend.open({ id, temporary: true })))
        assert.include(mismatch.message, "exists as a permanent computer")
        const computer = yield* backend.open({ id, temporary: false })
        assert.strictEqual(computer.providerId, first)
        assert.strictEqual((yield* exec(computer, ["cat", "note"])).stdout, "kept\n")
        yield* computer.destroy
        assert.isFalse(yield* exists(first))
      })).pipe(Effect.provide(backendLayer()))
    }))

  it.live("a stopped permanent computer is started again when opened", () =>
    Effect.gen(function*() {
      const id = computerId("stopped")
      const first = yield* Effect.scoped(Effect.gen(function*() {
        const computer = yield* (yield* Backend).open({ id, temporary: false })
        return computer.providerId
      })).pipe(Effect.provide(backendLayer()))
      yield* Effect.promise(() => docker().getContainer(first).stop({ t: 1 }))
      yield* Effect.scoped(Effect.gen(function*() {
        const computer = yield* (yield* Backend).open({ id, temporary: false })
        assert.strictEqual((yield* exec(computer, ["echo", "up"])).stdout, "up\n")
        yield* computer.destroy
      })).pipe(Effect.provide(backendLayer()))
    }))

  it.scopedLive("restart keeps the files, factory reset erases them, destroy removes the container", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("life"), temporary: false })
      yield* sh(computer, "echo state > /home/agent/f; echo sys > /etc/kt-marker")
      const before = computer.providerId
      yield* computer.restart
      assert.strictEqual(computer.providerId, before)
      assert.strictEqual((yield* sh(computer, "cat /home/agent/f /etc/kt-marker")).stdout, "state\nsys\n")
      yield* computer.factoryReset
      assert.notStrictEqual(computer.providerId, before)
      assert.isFalse(yield* exists(before))
      const after = yield* sh(computer, "ls /home/agent; test -e /etc/kt-marker && echo marker; pwd")
      assert.strictEqual(after.stdout, "/home/agent\n")
      assert.strictEqual((yield* inspect(computer.providerId)).Config.Labels["kilntainers.image"], TEST_IMAGE)
      const id = computer.providerId
      yield* computer.destroy
      assert.isFalse(yield* exists(id))
      const gone = yield* Effect.flip(Effect.scoped(computer.spawn(spec(["true"]))))
      assert.strictEqual(gone._tag, "BackendError")
    }).pipe(Effect.provide(backendLayer())))

  it.live("factory reset uses the image recorded on the container, not the current --image", () =>
    Effect.gen(function*() {
      const id = computerId("image")
      yield* Effect.scoped(Effect.gen(function*() {
        yield* (yield* Backend).open({ id, temporary: false })
      })).pipe(Effect.provide(backendLayer()))
      // A second server configured with another image (the same one under another tag).
      const otherTag = `kilntainers-test-other:${run}`
      yield* Effect.promise(() => docker().getImage(TEST_IMAGE).tag({ repo: "kilntainers-test-other", tag: run }))
      yield* Effect.scoped(Effect.gen(function*() {
        const computer = yield* (yield* Backend).open({ id, temporary: false })
        yield* computer.factoryReset
        assert.strictEqual((yield* inspect(computer.providerId)).Config.Labels["kilntainers.image"], TEST_IMAGE)
        assert.strictEqual(computer.image, TEST_IMAGE)
        yield* computer.destroy
      })).pipe(Effect.provide(backendLayer({ image: otherTag })), Effect.ensuring(Effect.promise(() => docker().getImage(otherTag).remove().catch(() => {}))))
    }))

  it.scopedLive("a container with our name but not our labels is refused and left untouched", () =>
    Effect.gen(function*() {
      const id = computerId("foreign")
      const foreign = yield* Effect.promise(() =>
        docker().createContainer({ name: `kilntainer-${id}`, Image: TEST_IMAGE, Cmd: ["sleep", "infinity"], Labels: { other: "yes" } })
      )
      yield* Effect.promise(() => foreign.start())
      const backend = yield* Backend
      const error = yield* Effect.flip(Effect.scoped(backend.open({ id, temporary: true })))
      assert.strictEqual(error._tag, "BackendError")
      assert.include(error.message, "not created by kilntainers")
      const info = yield* inspect(foreign.id)
      assert.isTrue(info.State.Running)
      assert.deepStrictEqual(info.Config.Labels, { other: "yes" })
      assert.isUndefined((yield* backend.list).find((c) => c.providerId === foreign.id))
    }).pipe(Effect.provide(backendLayer())))

  it.live("the reaper removes temporary containers of dead servers on this host, and nothing else", () =>
    Effect.gen(function*() {
      const deadPid = spawnSync("true").pid!
      const fake = (what: string, labels: Record<string, string>) =>
        Effect.promise(() =>
          docker().createContainer({
            name: `kilntainer-${computerId(what)}`,
            Image: TEST_IMAGE,
            Cmd: ["sleep", "infinity"],
            Labels: {
              "kilntainers": "true",
              "kilntainers.computer-id": what,
              "kilntainers.image": TEST_IMAGE,
              "kilntainers.instance": `${instancePrefix}-dead`,
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
        "kilntainers.owner-start": DockerBackend.processStartTime("self")!
      })
      const otherHost = yield* fake("elsewhere", { "kilntainers.temporary": "true", "kilntainers.owner-host": "another-host" })
      yield* Layer.build(backendLayer()).pipe(Effect.scoped)
      assert.isFalse(yield* exists(orphan))
      assert.isTrue(yield* exists(permanent))
      assert.isTrue(yield* exists(live))
      assert.isTrue(yield* exists(otherHost))
    }))

  it.scopedLive("a fork bomb stays within the pids limit and the backend keeps answering", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("bomb"), temporary: true })
      const bomb = yield* computer.spawn(spec(["sh", "-c", "for i in $(seq 5000); do sleep 100 & done; wait"]))
      const bombEvents = yield* Effect.fork(collect(bomb))
      const top = Effect.promise(() => docker().getContainer(computer.providerId).top())
      const full = yield* eventually(top, (t) => t.Processes.length >= 90, "the pids limit to be reached", 20_000)
      assert.isAtMost(full.Processes.length, 100)
      yield* Effect.sleep("1 second")
      assert.isAtMost((yield* top).Processes.length, 100)
      // The backend still answers at once: a spawn succeeds or fails clearly within seconds.
      const started = Date.now()
      const attempt = yield* Effect.either(Effect.scoped(Effect.flatMap(computer.spawn(spec(["echo", "alive"])), collect)))
      assert.isBelow(Date.now() - started, 10_000)
      if (Either.isLeft(attempt)) assert.include(attempt.left.message, "limit")
      else assert.strictEqual(attempt.right.stdout, "alive\n")
      console.log(`fork bomb: a new spawn answered in ${Date.now() - started} ms: ${Either.isLeft(attempt) ? attempt.left.message : "ran"}`)
      // Restarting the computer is the way out; afterwards it works again.
      yield* Fiber.interrupt(bombEvents)
      yield* computer.restart
      const after = yield* exec(computer, ["echo", "alive"])
      assert.strictEqual(after.stdout, "alive\n")

      // The classic bomb keeps forking as slots free up.
      const classic = yield* computer.spawn(spec(["bash", "-c", ":(){ :|:& };:"]))
      const classicEvents = yield* Effect.fork(collect(classic))
      yield* eventually(top, (t) => t.Processes.length >= 90, "the classic bomb to fill the limit", 20_000)
      assert.isAtMost((yield* top).Processes.length, 100)
      const again = Date.now()
      const second = yield* Effect.either(Effect.scoped(Effect.flatMap(computer.spawn(spec(["echo", "alive"])), collect)))
      assert.isBelow(Date.now() - again, 15_000)
      console.log(`classic fork bomb: a new spawn answered in ${Date.now() - again} ms: ${Either.isLeft(second) ? second.left.message : "ran"}`)
      yield* Fiber.interrupt(classicEvents)
      yield* computer.restart
      assert.strictEqual((yield* exec(computer, ["echo", "alive"])).stdout, "alive\n")
    }).pipe(Effect.provide(backendLayer({ pidsLimit: 100 }))), 90_000)

  it.scopedLive("a container removed from outside is reported through lost and its processes end", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("lost"), temporary: true })
      const process = yield* computer.spawn(spec(["sleep", "300"]))
      const events = yield* Effect.fork(collect(process))
      const lost = yield* Deferred.make<string>()
      yield* Effect.fork(Effect.flatMap(computer.lost, (reason) => Deferred.succeed(lost, reason)))
      yield* Effect.sleep("200 millis")
      assert.isFalse(yield* Deferred.isDone(lost))
      yield* Effect.promise(() => docker().getContainer(computer.providerId).remove({ force: true }))
      const reason = yield* Deferred.await(lost).pipe(Effect.timeout("10 seconds"))
      assert.include(reason, "removed outside kilntainers")
      const result = yield* Fiber.join(events).pipe(Effect.timeout("10 seconds"))
      assert.isDefined(result.exit)
      const after = yield* Effect.flip(Effect.scoped(computer.spawn(spec(["true"]))))
      assert.include(after.message, "removed outside kilntainers")
    }).pipe(Effect.provide(backendLayer())))

  it.scopedLive("restart through the handle is not reported as lost", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const computer = yield* backend.open({ id: computerId("notlost"), temporary: true })
      const fiber = yield* Effect.fork(computer.lost)
      yield* computer.restart
      yield* Effect.sleep("1 second")
      assert.isTrue(Option.isNone(yield* Fiber.poll(fiber)))
      assert.strictEqual((yield* exec(computer, ["echo", "ok"])).stdout, "ok\n")
    }).pipe(Effect.provide(backendLayer())))
})
