/**
 * The exec fallback (one Engine API exec per process, for containers that cannot run the agent),
 * against a real engine: through DockerExec directly on a container made by the provider, and
 * chosen by a connection to a container whose root is read-only (the agent cannot be copied in).
 */
import { assert, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Scope, Stream } from "effect"
import { afterAll } from "vitest"
import * as DockerBackend from "../../../../src/layers/backends/docker/DockerBackend.js"
import * as DockerEngine from "../../../../src/layers/backends/docker/DockerEngine.js"
import * as DockerExec from "../../../../src/layers/backends/docker/DockerExec.js"
import { type Connection, ownedEvents } from "../../../../src/services/Backend.js"
import {
  collect,
  computerIds,
  docker,
  dockerComputer,
  dockerWorks,
  eventually,
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

/** A container and its processes through Engine exec only, as a Connection's `spawn`. */
const execOnly = (what: string) =>
  Effect.gen(function*() {
    const backend = yield* DockerBackend.make(testOptions())
    const engine = yield* DockerEngine.make(testOptions())
    const { instance } = yield* dockerComputer(backend, testMetadata(computerId(what)))
    const host: DockerExec.ExecHost = { engine, providerId: instance.providerId, current: () => true }
    const connection: Pick<Connection, "spawn"> = { spawn: (s) => DockerExec.spawn(host, s) }
    return connection
  })

describeIf(dockerWorks, requirement())("the Docker exec fallback", () => {
  it.scopedLive("runs processes with exactly their environment; a command that cannot start is SpawnFailed", () =>
    Effect.gen(function*() {
      const connection = yield* execOnly("basic")
      assert.deepStrictEqual(yield* sh(connection, "echo out; echo err >&2; exit 3"), {
        stdout: "out\n",
        stderr: "err\n",
        exit: { exitCode: 3, signal: null }
      })
      assert.strictEqual((yield* run(connection, ["env"], { env: { PATH: "/usr/bin:/bin", ONLY: "this" } })).stdout, "PATH=/usr/bin:/bin\nONLY=this\n")
      assert.strictEqual((yield* run(connection, ["pwd"], { cwd: "/tmp" })).stdout, "/tmp\n")
      // An Engine exec's parent is outside the container.
      assert.match((yield* sh(connection, "grep PPid /proc/$$/status")).stdout, /PPid:\s+0\n/)
      const missing = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["no-such-command"]))))
      assert.strictEqual(missing._tag, "SpawnFailed")
      assert.include(missing.message, "'no-such-command': command not found")
      const badCwd = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["true"], { cwd: "/no/such/dir" }))))
      assert.strictEqual(badCwd._tag, "SpawnFailed")
      assert.include(badCwd.message, "/no/such/dir")
      const equals = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["A=b"]))))
      assert.include(equals.message, "containing '='")
      const big = yield* sh(connection, "head -c 3000000 /dev/zero | tr '\\0' x; echo done >&2")
      assert.strictEqual(big.stdout.length, 3_000_000)
      assert.strictEqual(big.stderr, "done\n")
    }))

  it.scopedLive("stdin, EOF, and a terminal of the given size that can be resized", () =>
    Effect.gen(function*() {
      const connection = yield* execOnly("stdin")
      const cat = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["cat"]))
        const fiber = yield* Effect.fork(collect(process))
        yield* process.write(new TextEncoder().encode("hello\n"))
        yield* process.closeStdin
        const failed = yield* Effect.flip(process.write(new TextEncoder().encode("late\n")))
        assert.include(failed.message, "stdin is closed")
        return yield* Fiber.join(fiber).pipe(Effect.timeout("10 seconds"))
      }))
      assert.deepStrictEqual(cat, { stdout: "hello\n", stderr: "", exit: { exitCode: 0, signal: null } })
      const tty = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["sh", "-c", "tty; stty size; read x; stty size"], { tty: { cols: 100, rows: 20 } }))
        const fiber = yield* Effect.fork(collect(process))
        yield* Effect.sleep("300 millis")
        yield* process.resize(120, 40)
        yield* process.write(new TextEncoder().encode("\r"))
        return yield* Fiber.join(fiber).pipe(Effect.timeout("10 seconds"))
      }))
      assert.match(tty.stdout, /^\/dev\/pts\/\d+\r\n20 100\r\n[\s\S]*40 120\r\n$/)
      assert.deepStrictEqual(tty.exit, { exitCode: 0, signal: null })
    }))

  it.scopedLive("a signal reaches the process group; closing the scope SIGKILLs the session", () =>
    Effect.gen(function*() {
      const connection = yield* execOnly("kill")
      const sleeps = sh(connection, "ps -eo args | grep '^sleep 31[0-9]' || true").pipe(Effect.map((r) => r.stdout))
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["sh", "-c", "sleep 310 & sleep 311"]))
        const fiber = yield* Effect.fork(collect(process))
        yield* eventually(sleeps, (out) => out.includes("sleep 310") && out.includes("sleep 311"), "the sleeps to start")
        yield* process.signal("TERM")
        return yield* Fiber.join(fiber).pipe(Effect.timeout("10 seconds"))
      }))
      assert.deepStrictEqual(result.exit, { exitCode: null, signal: "SIGTERM" })
      yield* eventually(sleeps, (out) => out === "", "no sleep left after the kill")

      const scope = yield* Scope.make()
      // The first sleep leaves the process group, not the session.
      const script = `perl -e 'setpgrp(0, 0); exec "sleep", "312"' & sleep 313`
      const process = yield* connection.spawn(spec(["sh", "-c", script])).pipe(Scope.extend(scope))
      const events = yield* Effect.fork(collect(process))
      yield* eventually(sleeps, (out) => out.includes("sleep 312") && out.includes("sleep 313"), "the second sleeps to start")
      yield* Scope.close(scope, Exit.void)
      const closed = yield* Fiber.join(events).pipe(Effect.timeout("10 seconds"))
      assert.strictEqual(closed.exit?.signal, "SIGKILL")
      yield* eventually(sleeps, (out) => out === "", "the whole session gone after the scope closed")
    }))

  it.scopedLive("output waits for its reader: a process that writes more than the buffer is held back, nothing is lost", () =>
    Effect.gen(function*() {
      const connection = yield* execOnly("pressure")
      const running = sh(connection, "ps -eo args | grep -c '^head -c 50000000' || true").pipe(Effect.map((r) => r.stdout.trim()))
      yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["head", "-c", "50000000", "/dev/zero"]))
        // Nobody reads for a while: the writer must be blocked, not buffered without bound.
        yield* Effect.sleep("1500 millis")
        assert.strictEqual(yield* running, "1", "the writer is still there, held back")
        const total = yield* ownedEvents(process).pipe(
          Stream.runFold(0, (n, event) => (event._tag === "Stdout" ? n + event.data.byteLength : n))
        )
        assert.strictEqual(total, 50_000_000)
      }))
    }), 60_000)

  it.scopedLive("a connection uses Engine exec where the agent cannot run (a read-only root); the engine's events still tell its loss", () =>
    Effect.gen(function*() {
      const backend = yield* DockerBackend.make(testOptions({ runFlags: ["--read-only", "--tmpfs /home/agent", "--tmpfs /tmp"] }))
      const { connection, instance } = yield* dockerComputer(backend, testMetadata(computerId("readonly")))
      const result = yield* sh(connection, "grep PPid /proc/$$/status; echo hi > /home/agent/f && cat /home/agent/f")
      assert.match(result.stdout, /^PPid:\s+0\nhi\n$/)
      // No agent to die with it: only the engine's events can say that the container stopped.
      const lost = yield* Effect.fork(connection.lost)
      const sleeper = yield* Effect.fork(collect(yield* connection.spawn(spec(["sleep", "300"]))))
      yield* Effect.promise(() => docker().getContainer(instance.providerId).stop({ t: 0 }))
      assert.match(yield* Fiber.join(lost).pipe(Effect.timeout("10 seconds")), /was stopped outside kilntainers/)
      assert.isDefined((yield* Fiber.join(sleeper).pipe(Effect.timeout("10 seconds"))).exit)
    }))

  it.scopedLive("an agent too slow to start: a temporary computer does without it, a permanent one is refused and says so", () =>
    Effect.gen(function*() {
      // 1 ms: no agent starts that fast, as none does on an engine too loaded to answer in time.
      const backend = yield* DockerBackend.make(testOptions({ agentStartMs: 1 }))
      const temporary = yield* dockerComputer(backend, testMetadata(computerId("slow-temp")))
      assert.isUndefined(temporary.connection.held)
      assert.match((yield* sh(temporary.connection, "grep PPid /proc/$$/status")).stdout, /^PPid:\s+0\n$/)
      const id = computerId("slow-perm")
      const permanent = yield* Effect.acquireRelease(backend.create(testMetadata(id, { temporary: false })), (made) => Effect.ignore(backend.remove(made)))
      const refused = yield* Effect.flip(Effect.scoped(backend.connect(permanent)))
      assert.strictEqual(refused._tag, "ProviderError")
      assert.strictEqual(refused.reason, "Timeout")
      assert.include(refused.message, `kilntainer-${id}`)
      assert.include(refused.message, "runs its processes only through its agent")
      // The image is not marked as one that cannot run the agent: with time to start, it does.
      const patient = yield* DockerBackend.make(testOptions())
      const again = yield* Effect.scoped(Effect.map(patient.connect(permanent), (connection) => connection.held !== undefined))
      assert.isTrue(again)
    }), 120_000)

  it.scopedLive("with an egress policy, a container that cannot run the agent is refused: its relay would be its only network", () =>
    Effect.gen(function*() {
      let served = 0
      const backend = yield* DockerBackend.make(testOptions({
        runFlags: ["--read-only", "--tmpfs /home/agent", "--tmpfs /tmp"],
        relay: { port: 3128, handler: () => Effect.sync(() => void served++) }
      }))
      const id = computerId("readonly-egress")
      const instance = yield* Effect.acquireRelease(backend.create(testMetadata(id)), (made) => Effect.ignore(backend.remove(made)))
      for (let attempt = 0; attempt < 2; attempt++) {
        // The second connection is refused from what the first learned of the image, just as clearly.
        const refused = yield* Effect.flip(Effect.scoped(backend.connect(instance)))
        assert.strictEqual(refused._tag, "ProviderError")
        assert.strictEqual(refused.reason, "Unavailable")
        assert.include(refused.message, `kilntainer-${id}`)
        assert.include(refused.message, "the agent's relay")
        assert.include(refused.message, "it would have none")
      }
      assert.strictEqual(served, 0)
    }))
})
