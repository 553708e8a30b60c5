/**
 * The computer is the home of its processes: cases every backend that declares `heldProcesses` must
 * pass (issue 21). Two `run`s in a row are two servers over one provider state: the first one's
 * clean shutdown lets the computer's processes go, and they run on for the second.
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { type ConformanceTarget, needing, run, services } from "./ConformanceRun.js"

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

export const durableCases = (target: ConformanceTarget) => {
  it.live("a web server in a permanent computer keeps answering after the server that started it shut down",
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
