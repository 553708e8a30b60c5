/**
 * Kill means the whole tree: descendants that left the process group (`setsid`, double forks,
 * daemons that closed their output) end with kill SIGKILL, with sandbox_exec's timeout, with the
 * process's teardown and with the computer; a guest that kills its own shepherd leaves no strays.
 * Other signals still go to the process group only (a REPL's SIGINT must not kill its jobs), but a
 * process that dies of the signal it was sent takes what it left behind along.
 * Bounded: a few sleeps per test, every wait has a deadline.
 */
import { assert, it } from "@effect/vitest"
import { Duration, Effect, Exit, Layer, Scope, Stream } from "effect"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as DockerBackend from "../../src/layers/backends/docker/DockerBackend.js"
import * as HostBackend from "../../src/layers/backends/host/HostBackend.js"
import * as Runtime from "../../src/layers/Runtime.js"
import { type Connection, ownedEvents } from "../../src/services/Backend.js"
import { Backend } from "../../src/services/Backend.js"
import { Processes } from "../../src/services/Processes.js"
import { Settings } from "../../src/services/Settings.js"
import { docker, dockerWorks, requirement, TEST_IMAGE } from "../support/Docker.js"
import * as ProviderComputer from "../support/ProviderComputer.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const dir = mkdtempSync(join(tmpdir(), "kt-tree-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
let counter = 0
const marker = () => 4000 + (process.pid % 1000) * 10 + counter++

/** A tree that escapes its process group three ways; every sleep carries the marker `n`. */
const escapingTree = (n: number) =>
  `setsid sleep ${n}1 & (setsid sh -c 'sleep ${n}2 & sleep ${n}3' &) ; nohup sleep ${n}4 >/dev/null 2>&1 </dev/null & sleep ${n}5`

/** The tree's sleeps, seen from the host (the sandbox's processes are in the host's process table). */
const sleeps = (n: number) => {
  const found: Array<string> = []
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").replace(/\0/g, " ").trim()
      if (cmdline.startsWith(`sleep ${n}`)) found.push(cmdline)
    } catch {
      // ended while we looked
    }
  }
  return found
}
const alive = (n: number) => Effect.sync(() => sleeps(n))
const until = (n: number, count: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100 && sleeps(n).length !== count; i++) yield* Effect.sleep(Duration.millis(50))
    return sleeps(n).length === count
  })
const gone = (n: number) => until(n, 0)
const allStarted = (n: number) => until(n, 5)

describeIf(bwrapWorks, "bubblewrap")("process trees on the host backend", () => {
  const runtime = () => {
    const stateDir = mkdtempSync(join(dir, "rt-"))
    const settings = Settings.make({ stateDir })
    return Runtime.layer(settings, HostBackend.layer({ stateDir, network: false, sandbox: "bwrap" }))
  }

  it.live("kill SIGKILL ends setsid, double-forked and nohup descendants", () =>
    Effect.gen(function*() {
      const processes = yield* Processes
      const n = marker()
      const { pid: id } = yield* processes.spawn("t", { command: escapingTree(n), background: true })
      assert.isTrue(yield* allStarted(n), "the whole tree started")
      const killed = yield* processes.kill("t", { id, signal: "SIGKILL" })
      assert.strictEqual(killed.signal, "SIGKILL")
      // The five sleeps and the setsid shell; the killed shell itself is not counted.
      assert.strictEqual(killed.descendantsKilled, 6)
      assert.strictEqual((yield* processes.list("t", { status: "all" })).processes.find((p) => p.pid === id)?.descendantsKilled, 6)
      assert.isTrue(yield* gone(n), `left: ${(yield* alive(n)).join(", ")}`)
    }).pipe(Effect.provide(runtime())))

  it.live("sandbox_exec's timeout ends the whole tree", () =>
    Effect.gen(function*() {
      const processes = yield* Processes
      const n = marker()
      const result = yield* processes.exec("t", { command: `echo started; ${escapingTree(n)}`, timeout: 1 })
      assert.strictEqual(result.exit_code, 124)
      assert.isTrue(yield* gone(n), `left: ${(yield* alive(n)).join(", ")}`)
    }).pipe(Effect.provide(runtime())))

  it.live("other signals go to the process group only: a shell that survives one keeps its job in another session", () =>
    Effect.gen(function*() {
      const processes = yield* Processes
      const n = marker()
      const { pid: id } = yield* processes.spawn("t", {
        // (background jobs of a non-interactive shell ignore SIGINT, hence SIGTERM)
        command: `trap 'echo got TERM' TERM; setsid sleep ${n}1 & sleep ${n}2 & wait; wait`,
        background: true
      })
      assert.isTrue(yield* until(n, 2))
      yield* processes.kill("t", { id, signal: "SIGTERM" })
      assert.isTrue(yield* until(n, 1), "sleep in the group ended, the setsid one runs on")
      assert.deepStrictEqual(yield* alive(n), [`sleep ${n}1`])
      yield* processes.kill("t", { id, signal: "SIGKILL" })
      assert.isTrue(yield* gone(n))
    }).pipe(Effect.provide(runtime())))

  it.live("a process that dies of the signal it was sent (kill's default SIGTERM) takes its tree along", () =>
    Effect.gen(function*() {
      const processes = yield* Processes
      const n = marker()
      const { pid: id } = yield* processes.spawn("t", { command: escapingTree(n), background: true })
      assert.isTrue(yield* allStarted(n))
      const killed = yield* processes.kill("t", { id })
      assert.strictEqual(killed.signal, "SIGTERM")
      // At least the three that left the process group (the group itself got the SIGTERM).
      assert.isAtLeast(killed.descendantsKilled ?? 0, 3)
      assert.isTrue(yield* gone(n), `left: ${(yield* alive(n)).join(", ")}`)
    }).pipe(Effect.provide(runtime())))

  const direct = (body: (computer: Connection) => Effect.Effect<void, unknown, Scope.Scope>) =>
    Effect.gen(function*() {
      const backend = yield* HostBackend.make({ stateDir: mkdtempSync(join(dir, "b-")), network: false, sandbox: "bwrap" })
      const { connection } = yield* ProviderComputer.open(backend, `tree-${process.pid}-${counter++}`)
      yield* body(connection)
    })

  it.scopedLive("closing a process's scope while it runs tears its tree down", () =>
    direct((computer) =>
      Effect.gen(function*() {
        const n = marker()
        yield* Effect.scoped(Effect.gen(function*() {
          yield* computer.spawn({ argv: ["sh", "-c", escapingTree(n)], cwd: "/home/agent", env: { PATH } })
          assert.isTrue(yield* allStarted(n))
        }))
        assert.isTrue(yield* gone(n), `left: ${(yield* alive(n)).join(", ")}`)
      })))

  it.scopedLive("a daemon that closed its output outlives its process, and ends with the computer", () =>
    Effect.gen(function*() {
      const n = marker()
      const scope = yield* Scope.make()
      yield* Effect.gen(function*() {
        const backend = yield* HostBackend.make({ stateDir: mkdtempSync(join(dir, "d-")), network: false, sandbox: "bwrap" })
        const { connection: computer } = yield* ProviderComputer.open(backend, `daemon-${process.pid}`)
        const events = yield* Effect.scoped(Effect.flatMap(
          computer.spawn({ argv: ["sh", "-c", `setsid sleep ${n}1 >/dev/null 2>&1 </dev/null & echo started`], cwd: "/home/agent", env: { PATH } }),
          (process) => Stream.runCollect(ownedEvents(process))
        ))
        assert.strictEqual(events.length, 2)
        yield* Effect.sleep(Duration.millis(200))
        assert.strictEqual((yield* alive(n)).length, 1, "the daemon runs on after its process closed")
      }).pipe(Scope.extend(scope))
      yield* Scope.close(scope, Exit.void)
      assert.isTrue(yield* gone(n))
    }))

  it.scopedLive("a guest that kills its own shepherd leaves no strays behind", () =>
    direct((computer) =>
      Effect.gen(function*() {
        const n = marker()
        const exit = yield* Effect.scoped(Effect.flatMap(
          computer.spawn({ argv: ["sh", "-c", `setsid sleep ${n}1 & sleep 0.2; kill -9 $PPID; sleep ${n}2`], cwd: "/home/agent", env: { PATH } }),
          (process) => Stream.runFold(ownedEvents(process), undefined as unknown, (acc, event) => (event._tag === "Exit" ? event.exit : acc))
        ))
        assert.deepStrictEqual(exit, { exitCode: null, signal: "SIGKILL" })
        assert.isTrue(yield* gone(n), `left: ${(yield* alive(n)).join(", ")}`)
        // and the computer goes on
        const again = yield* Effect.scoped(Effect.flatMap(
          computer.spawn({ argv: ["echo", "ok"], cwd: "/home/agent", env: { PATH } }),
          (process) => Stream.runCollect(ownedEvents(process))
        ))
        assert.strictEqual(again.length, 2)
      })))
})

describeIf(dockerWorks, requirement())("process trees on the Docker backend", () => {
  /** Processes inside the container whose command line contains the marker. */
  const inContainer = (container: string, n: number) =>
    Effect.promise(async () => {
      const exec = await docker().getContainer(container).exec({
        Cmd: ["sh", "-c", `for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep ${n}' || true`],
        AttachStdout: true
      })
      const stream = await exec.start({})
      const chunks: Array<Buffer> = []
      await new Promise((resolve) => {
        stream.on("data", (c: Buffer) => chunks.push(c))
        stream.on("end", resolve)
      })
      // demultiplexed: 8-byte headers
      const raw = Buffer.concat(chunks)
      let text = ""
      for (let at = 0; at + 8 <= raw.length;) {
        const size = raw.readUInt32BE(at + 4)
        text += raw.subarray(at + 8, at + 8 + size).toString()
        at += 8 + size
      }
      return Number(text.trim() || "0")
    })

  it.scopedLive("kill SIGKILL and a teardown end setsid, double-forked and nohup descendants", () =>
    Effect.gen(function*() {
      const backend = yield* Effect.provide(Backend, Layer.fresh(DockerBackend.layer({
        engine: "docker",
        dockerHost: undefined,
        image: TEST_IMAGE,
        cpu: undefined,
        memory: undefined,
        pidsLimit: 512,
        network: false,
        runFlags: []
      })))
      const { connection: computer, instance } = yield* ProviderComputer.open(backend, `tree-${process.pid}`)
      const count = (n: number) => inContainer(instance.providerId, n)
      const until = (n: number, expected: number) =>
        Effect.gen(function*() {
          for (let i = 0; i < 100 && (yield* count(n)) !== expected; i++) yield* Effect.sleep(Duration.millis(50))
          return yield* count(n)
        })
      const n = marker()
      yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn({ argv: ["sh", "-c", escapingTree(n)], cwd: DockerBackend.HOME, env: { PATH } })
        assert.strictEqual(yield* until(n, 5), 5)
        yield* process.signal("SIGKILL")
        assert.strictEqual(yield* until(n, 0), 0)
      }))
      const m = marker()
      yield* Effect.scoped(Effect.gen(function*() {
        yield* computer.spawn({ argv: ["sh", "-c", escapingTree(m)], cwd: DockerBackend.HOME, env: { PATH } })
        assert.strictEqual(yield* until(m, 5), 5)
      }))
      assert.strictEqual(yield* until(m, 0), 0)
    }), 120_000)
})
