/**
 * The computer is the home of its processes: the cases every backend that declares `heldProcesses`
 * must pass (issue 21's "Done when"). Server A is a real kilntainers process (the built CLI over
 * stdio, killed with SIGKILL) where the target says how to start one; server B is this process's
 * runtime over the same provider state.
 */
import { assert, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { createHash } from "node:crypto"
import { startServer } from "../support/McpHarness.js"
import { type ConformanceTarget, needing, run, services } from "./ConformanceRun.js"

/** A computer id of this run (several suites share an engine or a fake account). */
const unique = (name: string) => `${name}-${process.pid.toString(36)}${Math.floor(Math.random() * 1296).toString(36)}`

/** Polls `read` until `done` holds (bounded), returning the last value. */
const eventually = <A, E, R>(read: Effect.Effect<A, E, R>, done: (a: A) => boolean, tries = 100) =>
  Effect.gen(function*() {
    let last = yield* read
    for (let i = 0; i < tries && !done(last); i++) {
      yield* Effect.sleep(Duration.millis(100))
      last = yield* read
    }
    return last
  })

export const durableCases = (target: ConformanceTarget) => {
  it.live("a permanent computer's process started by server A, A then SIGKILLed, is listed by server B under its handle; B waits for it and reads every byte", (context) =>
    target.cli === undefined ? Effect.sync(() => context.skip("no CLI for this target")) : needing(target, ["heldProcesses"], Effect.gen(function*() {
      const id = unique("conf-a-killed")
      const cli = target.cli!
      const a = yield* Effect.promise(() => startServer(cli.args, cli.env))
      const started = yield* Effect.promise(async () => {
        const created = await a.call("computer_create", { computer_id: id, temporary: false })
        if (created.isError) throw new Error(created.text)
        const spawned = await a.call("spawn", {
          computer_id: id,
          command: "for i in $(seq 1 40); do echo line $i; sleep 0.1; done; exit 3",
          background: true
        })
        if (spawned.isError) throw new Error(spawned.text)
        return spawned.structured as { pid: string }
      })
      yield* Effect.sleep(Duration.millis(500))
      process.kill(a.pid!, "SIGKILL")
      yield* run(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        const listed = yield* processes.list("b", { computer_id: id, status: "all" })
        const found = listed.processes.find((p) => p.pid === started.pid)
        assert.isDefined(found, `ps on server B lists ${started.pid}: ${JSON.stringify(listed)}`)
        assert.match(found!.command, /for i in/)
        const done = yield* processes.wait("b", { id: started.pid, computer_id: id, timeoutMs: 30_000 })
        assert.strictEqual(done.outcome, "exited")
        assert.strictEqual(done.exitCode, 3)
        const all = yield* processes.read("b", { id: started.pid, computer_id: id, stdoutCursor: 0, maxBytes: 100_000 })
        assert.strictEqual(all.stdout, Array.from({ length: 40 }, (_, i) => `line ${i + 1}\n`).join(""))
        yield* computers.delete("b", id)
      }))
    }))(context), 180_000)

  it.live("a process started by server A is read, written to and killed by server B while A still runs",
    needing(target, ["heldProcesses", "stdin"], Effect.gen(function*() {
      const id = unique("conf-beside")
      // A: a server of its own, kept running through the case.
      const a = yield* run(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        yield* computers.create("a", { computer_id: id, temporary: false })
        const spawned = yield* processes.spawn("a", { computer_id: id, command: "echo ready; while read line; do echo got $line; done", background: true })
        return spawned.pid
      }), { keep: true })
      yield* run(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        const ready = yield* eventually(processes.read("b", { id: a.value, computer_id: id, stdoutCursor: 0 }), (r) => r.stdout === "ready\n")
        assert.strictEqual(ready.stdout, "ready\n")
        const wrote = yield* processes.stdin("b", { id: a.value, computer_id: id, input: "from-b\\n" })
        assert.strictEqual(wrote.bytes, 7)
        const echoed = yield* eventually(processes.read("b", { id: a.value, computer_id: id, stdoutCursor: 6 }), (r) => r.stdout === "got from-b\n")
        assert.strictEqual(echoed.stdout, "got from-b\n")
        const killed = yield* processes.kill("b", { id: a.value, computer_id: id, signal: "SIGKILL" })
        assert.strictEqual(killed.status, "terminated")
        // A sees what B did.
        const seen = yield* a.run(Effect.gen(function*() {
          const { processes } = yield* services
          return yield* eventually(processes.read("a", { id: a.value, computer_id: id, stdoutCursor: 0 }), (r) => r.status === "terminated")
        }))
        assert.strictEqual(seen.stdout, "ready\ngot from-b\n")
        assert.strictEqual(seen.signal, "SIGKILL")
        yield* computers.delete("b", id)
      }))
      yield* a.close
    })), 180_000)

  it.live("a web server in a permanent computer keeps answering after its client disconnected, until killed from a new session",
    needing(target, ["heldProcesses"], Effect.gen(function*() {
      const id = unique("conf-web")
      const port = 20000 + Math.floor(Math.random() * 20000)
      const server = yield* run(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        yield* computers.create("a", { computer_id: id, temporary: false })
        yield* processes.exec("a", { computer_id: id, command: "mkdir -p site && echo hello from the site > site/index.html" })
        const spawned = yield* processes.spawn("a", {
          computer_id: id,
          command: `cd site && python3 -m http.server ${port} --bind 127.0.0.1`,
          pattern: "Serving HTTP",
          env: { PYTHONUNBUFFERED: "1" },
          timeoutMs: 20_000
        })
        assert.strictEqual(spawned.status, "running")
        return spawned.pid
      }))
      // The server that started it is gone (its runtime closed: the client disconnected).
      const fetch = `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:${port}/').read().decode().strip())"`
      yield* run(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        const answered = yield* processes.exec("new-session", { computer_id: id, command: fetch })
        assert.strictEqual(answered.stdout, "hello from the site\n")
        const killed = yield* processes.kill("new-session", { id: server, computer_id: id })
        assert.strictEqual(killed.status, "terminated")
        const refused = yield* processes.exec("new-session", { computer_id: id, command: fetch })
        assert.notStrictEqual(refused.exit_code, 0)
        yield* computers.delete("new-session", id)
      }))
    })), 180_000)

  it.live("a 13 MB output is read in full through cursors, middle included",
    needing(target, ["heldProcesses"], Effect.gen(function*() {
      const { processes } = yield* services
      // 1,625,000 lines of 8 bytes: 13,000,000 bytes.
      const exec = yield* processes.exec("c", { command: "seq -w 1 1625000" })
      assert.strictEqual(exec.exit_code, 0)
      assert.isTrue(exec.truncated)
      assert.strictEqual(exec.stdout_bytes, 13_000_000)
      const id = exec.pid!
      // The inline result's cursor points at the first byte it left out.
      let cursor = exec.next!.stdout
      assert.isBelow(cursor, 13_000_000)
      const hash = createHash("sha256")
      const shown = Buffer.from(exec.stdout.split("\n[…")[0]!, "utf8")
      assert.strictEqual(shown.length, cursor, "the head shown ends where the cursor points")
      hash.update(shown)
      for (let page = 0; cursor < 13_000_000 && page < 1000; page++) {
        const read = yield* processes.read("c", { id, stdoutCursor: cursor, maxBytes: 1_000_000 })
        assert.isUndefined(read.omitted, `nothing was left out at ${cursor}`)
        const bytes = Buffer.from(read.stdout, "utf8")
        assert.strictEqual(read.next!.stdout, cursor + bytes.length, "a page is exactly the range asked")
        hash.update(bytes)
        cursor = read.next!.stdout
      }
      assert.strictEqual(cursor, 13_000_000)
      let expected = ""
      for (let i = 1; i <= 1625000; i++) expected += `${String(i).padStart(7, "0")}\n`
      assert.strictEqual(hash.digest("hex"), createHash("sha256").update(expected).digest("hex"))
    })), 180_000)
}
