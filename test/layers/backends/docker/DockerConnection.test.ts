/**
 * A connection to a running container, against a real engine: processes through the container's
 * agent (pipes, terminals, signals, the exact environment) and the loss of the container when it is
 * removed or stopped from outside, or its agent dies. The exec fallback has its own file
 * (DockerExec.test.ts); lifecycles go through the kernel (DockerLifecycle.test.ts).
 */
import { assert, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Option, Scope } from "effect"
import { afterAll } from "vitest"
import * as DockerBackend from "../../../../src/layers/backends/docker/DockerBackend.js"
import type { Connection } from "../../../../src/services/Backend.js"
import {
  collect,
  computerIds,
  docker,
  dockerComputer,
  dockerWorks,
  eventually,
  PATH_ENV,
  removeOurContainers,
  requirement,
  run,
  sh,
  spec,
  testMetadata,
  testOptions
} from "../../../support/Docker.js"
import { describeIf } from "../../../support/Requirements.js"

const computerId = computerIds()

afterAll(removeOurContainers)

const connected = (what: string) =>
  Effect.flatMap(DockerBackend.make(testOptions()), (backend) => dockerComputer(backend, testMetadata(computerId(what))))

/** Completes a Deferred with the connection's `lost`, so a test can look without waiting. */
const watchLost = (connection: Connection) =>
  Effect.gen(function*() {
    const lost = yield* Deferred.make<string>()
    yield* Effect.forkScoped(Effect.flatMap(connection.lost, (reason) => Deferred.succeed(lost, reason)))
    return lost
  })

describeIf(dockerWorks, requirement())("a Docker connection", () => {
  it.scopedLive("--docker-run-flag --user=0 keeps the old root guest, for apt-get install", () =>
    Effect.gen(function*() {
      const backend = yield* DockerBackend.make({ ...testOptions(), runFlags: ["--user=0"] })
      const { connection } = yield* dockerComputer(backend, testMetadata(computerId("root")))
      assert.strictEqual((yield* sh(connection, "id -un; id -u")).stdout, "root\n0\n")
    }))

  it.scopedLive("runs processes: exit code, stdout, stderr, exact environment, working directory", () =>
    Effect.gen(function*() {
      const { connection } = yield* connected("basic")
      assert.strictEqual(connection.home, DockerBackend.HOME)
      const result = yield* sh(connection, "echo out; echo err >&2; exit 3")
      assert.deepStrictEqual(result, { stdout: "out\n", stderr: "err\n", exit: { exitCode: 3, signal: null } })
      const env = yield* run(connection, ["env"], { env: { PATH: "/usr/bin:/bin", ONLY: "this" } })
      assert.strictEqual(env.stdout, "PATH=/usr/bin:/bin\nONLY=this\n")
      // The guest user, as on host (DockerGuest.ts): made by the root step even though the test image has no `agent`.
      const pwd = yield* run(connection, ["sh", "-c", "pwd; id -un; id -u; id -g; echo $HOME; stat -c %U /home/agent"], {
        env: { ...PATH_ENV, HOME: DockerBackend.HOME }
      })
      assert.strictEqual(pwd.stdout, "/home/agent\nagent\n1000\n1000\n/home/agent\nagent\n")
      // Nothing of root's capabilities stays with it.
      assert.match((yield* sh(connection, "grep CapEff /proc/self/status")).stdout, /^CapEff:\s+0+\n$/)
      assert.strictEqual((yield* run(connection, ["pwd"], { cwd: "/tmp" })).stdout, "/tmp\n")
      const missing = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["no-such-command"]))))
      assert.strictEqual(missing._tag, "SpawnFailed")
      assert.match(missing.message, /command not found|No such file or directory/)
      const badCwd = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["true"], { cwd: "/no/such/dir" }))))
      assert.strictEqual(badCwd._tag, "SpawnFailed")
      assert.include(badCwd.message, "/no/such/dir")
      const nul = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["echo", "a\0b"]))))
      assert.strictEqual(nul._tag, "SpawnFailed")
      const big = yield* sh(connection, "head -c 3000000 /dev/zero | tr '\\0' x; echo done >&2")
      assert.strictEqual(big.stdout.length, 3_000_000)
      assert.strictEqual(big.stderr, "done\n")
      // Through the agent: the process's parent is inside the container (an Engine exec's is not).
      assert.match((yield* sh(connection, "grep PPid /proc/$$/status")).stdout, /^PPid:\s+[1-9]\d*\n$/)
    }))

  it.scopedLive("stdin is forwarded and closeStdin gives cat its EOF", () =>
    Effect.gen(function*() {
      const { connection } = yield* connected("stdin")
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["cat"]))
        assert.isNumber(process.pid)
        const fiber = yield* Effect.fork(collect(process))
        yield* process.write(new TextEncoder().encode("hello\n"))
        yield* process.write(new TextEncoder().encode("world\n"))
        yield* process.closeStdin
        return yield* Fiber.join(fiber).pipe(Effect.timeout("10 seconds"))
      }))
      assert.deepStrictEqual(result, { stdout: "hello\nworld\n", stderr: "", exit: { exitCode: 0, signal: null } })
    }))

  it.scopedLive("TTY: a real terminal of the given size, resizable", () =>
    Effect.gen(function*() {
      const { connection } = yield* connected("tty")
      const tty = yield* run(connection, ["tty"], { tty: { cols: 100, rows: 20 } })
      assert.match(tty.stdout, /^\/dev\/pts\/\d+\r\n$/)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["sh", "-c", "stty size; read x; stty size"], { tty: { cols: 100, rows: 20 } }))
        const fiber = yield* Effect.fork(collect(process))
        yield* Effect.sleep("300 millis")
        yield* process.resize(120, 40)
        yield* process.write(new TextEncoder().encode("\r"))
        return yield* Fiber.join(fiber).pipe(Effect.timeout("10 seconds"))
      }))
      assert.match(result.stdout, /^20 100\r\n[\s\S]*40 120\r\n$/)
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
    }))

  it.scopedLive("signals reach the process group: no sleep survives a kill, nor a closed scope", () =>
    Effect.gen(function*() {
      const { connection } = yield* connected("kill")
      const sleeps = sh(connection, "ps -eo args | grep '^sleep 30[0-9]' || true").pipe(Effect.map((r) => r.stdout))
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["sh", "-c", "sleep 300 & sleep 301"]))
        const fiber = yield* Effect.fork(collect(process))
        yield* eventually(sleeps, (out) => out.includes("sleep 300") && out.includes("sleep 301"), "the sleeps to start")
        yield* process.signal("SIGTERM")
        return yield* Fiber.join(fiber).pipe(Effect.timeout("10 seconds"))
      }))
      // The group's SIGTERM ends both sleeps; one that had not died yet when the shell's end was seen
      // is killed by the agent's shepherd (and counted).
      assert.strictEqual(result.exit?.exitCode, null)
      assert.strictEqual(result.exit?.signal, "SIGTERM")
      yield* eventually(sleeps, (out) => out === "", "no sleep left after the kill")

      // Closing the process's scope lets go of it: the computer holds it, and it runs on; SIGKILL
      // (from any connection) ends its whole tree.
      const scope = yield* Scope.make()
      const process = yield* connection.spawn(spec(["sh", "-c", "sleep 302 & sleep 303"])).pipe(Scope.extend(scope))
      const events = yield* Effect.fork(collect(process))
      yield* eventually(sleeps, (out) => out.includes("sleep 303"), "the second sleeps to start")
      yield* Scope.close(scope, Exit.void)
      const closed = yield* Fiber.join(events).pipe(Effect.timeout("10 seconds"))
      assert.isUndefined(closed.exit, "letting go is not an exit")
      assert.include(yield* sleeps, "sleep 303")
      const again = yield* connection.held!.attach(process.handle!, { stdout: 0, stderr: 0 })
      yield* again.process.signal("SIGKILL")
      const killed = yield* collect(again.process).pipe(Effect.timeout("10 seconds"))
      assert.strictEqual(killed.exit?.signal, "SIGKILL")
      yield* eventually(sleeps, (out) => out === "", "no sleep left after the kill")
    }))

  it.scopedLive("a container removed from outside is lost, with that said; its processes end and no new one starts", () =>
    Effect.gen(function*() {
      const { connection, instance } = yield* connected("removed")
      const process = yield* connection.spawn(spec(["sleep", "300"]))
      const events = yield* Effect.fork(collect(process))
      const lost = yield* watchLost(connection)
      yield* Effect.sleep("300 millis")
      assert.isFalse(yield* Deferred.isDone(lost), "a running container is not lost")
      yield* Effect.promise(() => docker().getContainer(instance.providerId).remove({ force: true }))
      const reason = yield* Deferred.await(lost).pipe(Effect.timeout("10 seconds"))
      assert.include(reason, `its container kilntainer-${instance.metadata.id} was removed outside kilntainers`)
      // Its events end (the connection to its agent went with the container); the kernel says why.
      yield* Fiber.join(events).pipe(Effect.timeout("10 seconds"))
      const after = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["true"]))))
      assert.include(after.message, "removed outside kilntainers")
    }))

  it.scopedLive("a container stopped from outside is lost, with its exit code", () =>
    Effect.gen(function*() {
      const { connection, instance } = yield* connected("stopped")
      const lost = yield* watchLost(connection)
      yield* Effect.promise(() => docker().getContainer(instance.providerId).stop({ t: 0 }))
      const reason = yield* Deferred.await(lost).pipe(Effect.timeout("10 seconds"))
      assert.match(reason, /was stopped outside kilntainers \(exit code \d+\)/)
    }))

  it.scopedLive("the agent killed inside a running container is a loss too; the container itself is fine", () =>
    Effect.gen(function*() {
      const { connection, instance } = yield* connected("agent")
      const lost = yield* watchLost(connection)
      // From outside the agent's reach: an exec of our own, as root in the container.
      const exec = yield* Effect.promise(() =>
        docker().getContainer(instance.providerId).exec({ Cmd: ["sh", "-c", "pkill -KILL -x kt-agent"], AttachStdout: true })
      )
      yield* Effect.promise(() => exec.start({}).then((stream) => new Promise((resolve) => { stream.on("end", resolve); stream.resume() })))
      const reason = yield* Deferred.await(lost).pipe(Effect.timeout("10 seconds"))
      assert.match(reason, /^its agent ended: /)
      assert.isTrue((yield* Effect.promise(() => docker().getContainer(instance.providerId).inspect())).State.Running)
    }))

  it.scopedLive("closing a connection is no loss: the container stays as it was, and a new connection works", () =>
    Effect.gen(function*() {
      const backend = yield* DockerBackend.make(testOptions())
      const { connection, instance } = yield* dockerComputer(backend, testMetadata(computerId("reconnect")))
      const scope = yield* Scope.make()
      const second = yield* backend.connect(instance).pipe(Scope.extend(scope))
      const lost = yield* Effect.fork(second.lost)
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual((yield* run(connection, ["echo", "first"])).stdout, "first\n")
      yield* Effect.sleep("500 millis")
      assert.isTrue(Option.isNone(yield* Fiber.poll(lost)))
      assert.strictEqual((yield* backend.find({ id: instance.metadata.id }))[0]?.state, "running")
    }))
})
