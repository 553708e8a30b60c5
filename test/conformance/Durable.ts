/**
 * The computer is the home of its processes: cases every backend that declares `heldProcesses` must
 * pass (issue 21). Two `run`s in a row are two servers over one provider state: the first one's
 * clean shutdown lets the computer's processes go, and they run on for the second. `keep` holds a
 * server up beside another; where the target has a CLI, server A is the built CLI over stdio, killed
 * with SIGKILL.
 */
import { assert, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { createHash } from "node:crypto"
import { startServer } from "../support/McpHarness.js"
import { type ConformanceTarget, keep, needing, run, services } from "./ConformanceRun.js"

/** A computer id of this run (several suites share an engine). */
const unique = (name: string) => `${name}-${process.pid.toString(36)}${Math.floor(Math.random() * 1296).toString(36)}`

/** `seq -w 1 1625000`: 1,625,000 lines of 8 bytes. */
const LINES = 1_625_000
const TOTAL = LINES * 8

/** Answers every HTTP request with one page, after saying it serves. */
const SERVE = `import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
print("Serving HTTP", flush=True)
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 20\\r\\n\\r\\nhello from the site\\n")
    c.close()
`

/** A GET of the page: its body, or a traceback and a non-zero exit. */
const FETCH = "import socket; c = socket.create_connection(('127.0.0.1', PORT)); c.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); " +
  "r = b''.join(iter(lambda: c.recv(4096), b'')); print(r.split(b'\\r\\n\\r\\n', 1)[1].decode(), end='')"

/** Polls `read` until `done` holds (at most `tries` times, 100 ms apart), returning the last value. */
const eventually = <A, E, R>(read: Effect.Effect<A, E, R>, done: (a: A) => boolean, tries = 150) =>
  Effect.gen(function*() {
    let last = yield* read
    for (let i = 0; i < tries && !done(last); i++) {
      yield* Effect.sleep(Duration.millis(100))
      last = yield* read
    }
    return last
  })

/** What the process of the SIGKILL case writes: 40 numbered lines, over about 4 s. */
const FORTY = Array.from({ length: 40 }, (_, i) => `line ${i + 1}\n`).join("")

export const durableCases = (target: ConformanceTarget) => {
  it.live("a permanent computer's process started by server A, A then SIGKILLed, is listed by server B under its handle; B waits for it and reads every byte", (context) =>
    target.cli === undefined
      ? Effect.sync(() => context.skip("no CLI for this target"))
      : needing(target, ["heldProcesses"], Effect.gen(function*() {
        const id = unique("conf-a-killed")
        const cli = target.cli!
        const a = yield* Effect.promise(() => startServer(cli.args, { ...cli.env }))
        const spawned = yield* Effect.promise(async () => {
          const created = await a.call("computer_create", { computer_id: id, temporary: false })
          if (created.isError) throw new Error(created.text)
          const result = await a.call("spawn", {
            computer_id: id,
            command: "for i in $(seq 1 40); do echo line $i; sleep 0.1; done; exit 3",
            background: true
          })
          if (result.isError) throw new Error(result.text)
          return result.structured as { readonly pid: string }
        })
        assert.match(spawned.pid, /^p\d+$/)
        process.kill(a.pid!, "SIGKILL")
        yield* Effect.promise(() => a.transport.close().catch(() => undefined))
        yield* run(target, Effect.gen(function*() {
          const { computers, processes } = yield* services
          const listed = yield* processes.list("b", { computer_id: id, status: "all" })
          const found = listed.processes.find((listedOne) => listedOne.pid === spawned.pid)
          assert.isDefined(found, `ps on server B lists ${spawned.pid}: ${JSON.stringify(listed)}`)
          assert.match(found!.command, /for i in/)
          const done = yield* processes.wait("b", { id: spawned.pid, computer_id: id, timeoutMs: 60_000 })
          assert.strictEqual(done.outcome, "exited")
          assert.strictEqual(done.exitCode, 3)
          const all = yield* processes.read("b", { id: spawned.pid, computer_id: id, stdoutCursor: 0, maxBytes: 100_000 })
          assert.strictEqual(all.stdout, FORTY)
          assert.strictEqual(all.next?.stdout ?? FORTY.length, FORTY.length)
          yield* computers.delete("b", id)
        }))
      }))(context), 240_000)

  it.live("a process started by server A is read, written to and killed by server B while A still runs",
    needing(target, ["heldProcesses", "stdin"], Effect.gen(function*() {
      const id = unique("conf-beside")
      const a = yield* keep(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        yield* computers.create("a", { computer_id: id, temporary: false })
        const spawned = yield* processes.spawn("a", {
          computer_id: id,
          command: "echo ready; while read line; do echo got $line; done",
          background: true
        })
        return spawned.pid
      }))
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
        // A, still up, sees what B wrote and that B killed it.
        const seen = yield* a.run(Effect.gen(function*() {
          const { processes } = yield* services
          return yield* eventually(processes.read("a", { id: a.value, computer_id: id, stdoutCursor: 0 }), (r) => r.status === "terminated")
        }))
        assert.strictEqual(seen.status, "terminated")
        assert.strictEqual(seen.stdout, "ready\ngot from-b\n")
        assert.strictEqual(seen.signal, "SIGKILL")
        // Why it ended is the computer's record, shared by every server: A says it was B's kill.
        assert.strictEqual(seen.reason, "killed with SIGKILL (kill tool)")
        yield* computers.delete("b", id)
      })).pipe(Effect.ensuring(a.close))
    })), 240_000)

  it.live("a terminal started by server A is picked up by server B after A shut down: its screen as it was, its input, its end",
    needing(target, ["heldProcesses", "pty", "stdin"], Effect.gen(function*() {
      const id = unique("conf-tty")
      const pid = yield* run(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        yield* computers.create("a", { computer_id: id, temporary: false })
        const spawned = yield* processes.spawn("a", {
          computer_id: id,
          command: "echo first-line; printf 'name? '; read name; echo \"hello $name\"",
          tty: true,
          cols: 100,
          rows: 20,
          background: true
        })
        const asked = yield* processes.wait("a", { id: spawned.pid, computer_id: id, pattern: "name\\? ", timeoutMs: 30_000 })
        assert.strictEqual(asked.outcome, "matched")
        return spawned.pid
      }))
      yield* run(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        // The screen is rebuilt from the terminal's retained output.
        const shown = yield* processes.read("b", { id: pid, computer_id: id })
        assert.isDefined(shown.screen)
        assert.match(shown.stdout, /^first-line$/m)
        assert.match(shown.stdout, /^name\?/m)
        yield* processes.stdin("b", { id: pid, computer_id: id, input: "kiln\\r" })
        const done = yield* processes.wait("b", { id: pid, computer_id: id, timeoutMs: 30_000 })
        assert.strictEqual(done.exitCode, 0)
        const read = yield* processes.read("b", { id: pid, computer_id: id })
        assert.match(read.stdout, /^hello kiln$/m)
        yield* computers.delete("b", id)
      }))
    })), 240_000)

  it.live("a web server in a permanent computer keeps answering after the server that started it shut down, until a new server kills it",
    needing(target, ["heldProcesses"], Effect.gen(function*() {
      const id = unique("conf-web")
      const port = 20000 + Math.floor(Math.random() * 20000)
      // Server A starts it, then shuts down cleanly (its runtime closes: the client disconnected).
      yield* run(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        yield* computers.create("a", { computer_id: id, temporary: false })
        // A web server in a few lines of python3's socket module: the test image's python3 is the
        // minimal one, without http.server (the host's and the computer image's have it).
        yield* processes.exec("a", { computer_id: id, command: `cat > serve.py <<'PY'\n${SERVE}PY` })
        const spawned = yield* processes.spawn("a", {
          computer_id: id,
          command: `exec python3 serve.py ${port}`,
          pattern: "Serving HTTP",
          env: { PYTHONUNBUFFERED: "1" },
          timeoutMs: 30_000
        })
        assert.strictEqual(spawned.status, "running", `${spawned.stdout}${spawned.stderr}`)
      }))
      const fetch = `python3 -c "${FETCH.replace("PORT", String(port))}"`
      yield* run(target, Effect.gen(function*() {
        const { computers, processes } = yield* services
        const answered = yield* processes.exec("new-session", { computer_id: id, command: fetch })
        assert.strictEqual(answered.stdout, "hello from the site\n", answered.stderr)
        assert.strictEqual(answered.exit_code, 0)
        // This server did not start it, and ends it: ps lists it under its handle.
        const listed = yield* processes.list("new-session", { computer_id: id })
        const served = listed.processes.find((one) => one.command.includes("serve.py") && one.status === "running")
        assert.isDefined(served, JSON.stringify(listed))
        const killed = yield* processes.kill("new-session", { id: served!.pid, computer_id: id, signal: "SIGKILL" })
        assert.strictEqual(killed.status, "terminated")
        const refused = yield* processes.exec("new-session", { computer_id: id, command: fetch })
        assert.notStrictEqual(refused.exit_code, 0)
        yield* computers.delete("new-session", id)
      }))
    })), 180_000)

  it.live("a 13 MB output is read in full through cursors, middle included",
    needing(target, ["heldProcesses"], Effect.gen(function*() {
      const { processes } = yield* services
      const done = yield* processes.spawn("c", { command: `seq -w 1 ${LINES}`, timeoutMs: 120_000 })
      assert.strictEqual(done.exitCode, 0)
      assert.isDefined(done.omitted?.stdout)
      // The inline result's cursor points at the first byte it left out: the head shown ends there.
      let cursor = done.next!.stdout
      assert.isBelow(cursor, TOTAL)
      const shown = Buffer.from(done.stdout.split("\n[…")[0]!, "utf8")
      assert.strictEqual(shown.length, cursor, "the head shown ends where the cursor points")
      const hash = createHash("sha256").update(shown)
      for (let page = 0; cursor < TOTAL && page < 100; page++) {
        const read = yield* processes.read("c", { id: done.pid, stdoutCursor: cursor, maxBytes: 1_000_000 })
        assert.isUndefined(read.omitted, `nothing was left out at ${cursor}`)
        const bytes = Buffer.from(read.stdout, "utf8")
        const next = read.next?.stdout ?? cursor + bytes.length
        assert.strictEqual(next, cursor + bytes.length, "a page is exactly the range asked")
        assert.isAbove(bytes.length, 0)
        hash.update(bytes)
        cursor = next
      }
      assert.strictEqual(cursor, TOTAL)
      const expected = createHash("sha256")
      for (let i = 1; i <= LINES; i++) expected.update(`${String(i).padStart(7, "0")}\n`)
      assert.strictEqual(hash.digest("hex"), expected.digest("hex"))
    })), 180_000)
}
