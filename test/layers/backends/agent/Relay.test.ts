/**
 * The agent's relay: a loopback port inside the computer whose connections the server serves. An
 * in-process handler answers; clients inside (python, curl) reach it through 127.0.0.1:<port> on
 * the host sandbox and in a Docker container, both without any network. Flow control keeps a stream
 * that nobody reads from stalling the others, and from growing the server's memory.
 */
import { assert, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { RELAY_WINDOW } from "../../../../src/layers/backends/agent/AgentProtocol.js"
import type { RelayConnection, RelaySettings } from "../../../../src/layers/backends/agent/Relay.js"
import * as DockerBackend from "../../../../src/layers/backends/docker/DockerBackend.js"
import * as HostBackend from "../../../../src/layers/backends/host/HostBackend.js"
import { type Connection, ownedEvents } from "../../../../src/services/Backend.js"
import { Backend } from "../../../../src/services/Backend.js"
import { dockerWorks, requirement, TEST_IMAGE } from "../../../support/Docker.js"
import * as ProviderComputer from "../../../support/ProviderComputer.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"

const dir = mkdtempSync(join(tmpdir(), "kt-relay-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const PORT = 3128
const PATH = "/usr/local/bin:/usr/bin:/bin"

/**
 * The first line the client sends picks the behaviour:
 *   ECHO\n…       everything after it comes back, then EOF once the client shut its side down;
 *   HOLD\n…       nothing is ever read (a stalled stream);
 *   GET / HTTP…   a plain HTTP answer through node's http server fed with the duplex.
 */
const held: Array<RelayConnection> = []
const http = createServer((request, response) => {
  response.setHeader("connection", "close")
  response.end(`hello from the server, you asked for ${request.url}\n`)
})
const handler = (computerId: string, connection: RelayConnection) =>
  Effect.gen(function*() {
    const first = yield* Effect.async<Buffer | undefined>((resume) => {
      connection.socket.once("readable", () => resume(Effect.succeed((connection.socket.read() as Buffer | null) ?? undefined)))
    })
    if (first === undefined) return
    const head = first.toString("latin1")
    if (head.startsWith("GET ")) {
      connection.socket.unshift(first)
      yield* Effect.async<void>((resume) => {
        connection.socket.once("close", () => resume(Effect.void))
        http.emit("connection", connection.socket)
      })
      return
    }
    if (head.startsWith("HOLD")) {
      held.push(connection)
      return yield* Effect.never
    }
    const rest = first.subarray(first.indexOf(10) + 1)
    yield* connection.write(Buffer.from(`${computerId}:`))
    if (rest.length > 0) yield* connection.write(rest)
    yield* connection.read.pipe(Stream.runForEach((chunk) => connection.write(chunk)))
    yield* connection.end
  }).pipe(Effect.orDie)
const relay: RelaySettings = { port: PORT, handler }

const CLIENT = String.raw`
import hashlib, socket, sys, threading, time
def connect():
    s = socket.create_connection(("127.0.0.1", ${PORT}), timeout=20)
    return s
def echo(payload):
    s = connect()
    # Send while reading: an echo fills every buffer on the way back otherwise. The timeout bounds
    # each send and recv (sendall's would bound the whole 20 MiB, which a loaded machine can exceed),
    # and the chunks are joined once (adding to one bytes object copies it each time).
    data = memoryview(b"ECHO\n" + payload)
    def send():
        sent = 0
        while sent < len(data):
            sent += s.send(data[sent:sent + 65536])
        s.shutdown(socket.SHUT_WR)
    sender = threading.Thread(target=send)
    sender.start()
    chunks = []
    while True:
        d = s.recv(1 << 16)
        if not d: break
        chunks.append(d)
    sender.join()
    s.close()
    return b"".join(chunks)
mode = sys.argv[1]
if mode == "echo":
    print(echo(b"ping").decode())
elif mode == "bulk":
    payload = bytes(range(256)) * (20 * 4096)
    start = time.time()
    got = echo(payload)
    sys.stderr.write("bulk: %.2f s\n" % (time.time() - start)) if len(sys.argv) > 2 else None
    prefix, _, body = got.partition(b":")
    print(len(body), hashlib.sha256(body).hexdigest(), hashlib.sha256(payload).hexdigest())
elif mode == "stall":
    # A stream that the server never reads: the agent stops reading it once its window is full, so
    # this client's writes block (timeout), while another connection is served at once.
    stalled = connect()
    stalled.settimeout(2)
    stalled.sendall(b"HOLD\n")
    sent = 0
    try:
        while sent < 64 * 1024 * 1024:
            sent += stalled.send(b"x" * 65536)
    except socket.timeout:
        pass
    start = time.time()
    answer = echo(b"still served")
    print("%d|%s|%.2f" % (sent, answer.decode(), time.time() - start))
elif mode == "http":
    s = connect()
    s.sendall(b"GET /pypi HTTP/1.1\r\nHost: example\r\n\r\n")
    got = b""
    while True:
        d = s.recv(1 << 16)
        if not d: break
        got += d
    print(got.decode().split("\r\n\r\n", 1)[1].strip())
`

const run = (computer: Connection, cwd: string, argv: ReadonlyArray<string>) =>
  Effect.scoped(Effect.flatMap(
    computer.spawn({ argv, cwd, env: { PATH } }),
    (process) =>
      Stream.runFold(ownedEvents(process), { out: "", err: "" }, (acc, event) =>
        event._tag === "Stdout"
          ? { ...acc, out: acc.out + Buffer.from(event.data).toString() }
          : event._tag === "Stderr"
          ? { ...acc, err: acc.err + Buffer.from(event.data).toString() }
          : acc)
  ))

const python = (computer: Connection, cwd: string, mode: string) =>
  Effect.map(run(computer, cwd, ["python3", "-c", CLIENT, mode]), (r) => {
    assert.strictEqual(r.err, "", `python ${mode}`)
    return r.out.trim()
  })

const exercise = (computer: Connection, id: string, cwd: string) =>
  Effect.gen(function*() {
    assert.strictEqual(yield* python(computer, cwd, "echo"), `${id}:ping`)
    const [length, got, sent] = (yield* python(computer, cwd, "bulk")).split(" ")
    assert.strictEqual(Number(length), 256 * 20 * 4096)
    assert.strictEqual(got, sent, "every byte through the relay, in order")
    assert.strictEqual(yield* python(computer, cwd, "http"), "hello from the server, you asked for /pypi")
    held.length = 0
    const [sent2, answer, seconds] = (yield* python(computer, cwd, "stall")).split("|")
    assert.strictEqual(answer, `${id}:still served`, "a second stream is served while the first stalls")
    assert.isBelow(Number(seconds), 2)
    // The stalled stream's bytes wait in the client's and the agent's socket buffers, not here.
    assert.isBelow(Number(sent2), 64 * 1024 * 1024)
    assert.strictEqual(held.length, 1)
    assert.isAtMost(held[0]!.socket.readableLength, RELAY_WINDOW)
  })

describeIf(bwrapWorks, "bubblewrap")("the relay on the host sandbox", () => {
  it.scopedLive("clients inside reach the server's handler through the loopback port, with no network", () =>
    Effect.gen(function*() {
      const backend = yield* HostBackend.make({ stateDir: dir, network: false, sandbox: "bwrap", relay })
      const id = `relay-${process.pid}`
      const computer = (yield* ProviderComputer.open(backend, id)).connection
      yield* exercise(computer, id, "/home/agent")
      const curl = yield* run(computer, "/home/agent", ["curl", "-s", `http://127.0.0.1:${PORT}/from-curl`])
      assert.strictEqual(curl.out, "hello from the server, you asked for /from-curl\n")
      // Nothing else is reachable: the computer has no network.
      const direct = yield* run(computer, "/home/agent", ["curl", "-s", "-m", "2", "http://1.1.1.1/"])
      assert.strictEqual(direct.out, "")
    }), 120_000)

  it.scopedLive("each computer's connections reach the handler with its own computer id, concurrently", () =>
    Effect.gen(function*() {
      const backend = yield* HostBackend.make({ stateDir: dir, network: false, sandbox: "bwrap", relay })
      const a = (yield* ProviderComputer.open(backend, `relay-a-${process.pid}`)).connection
      const b = (yield* ProviderComputer.open(backend, `relay-b-${process.pid}`)).connection
      assert.strictEqual(yield* python(a, "/home/agent", "echo"), `relay-a-${process.pid}:ping`)
      assert.strictEqual(yield* python(b, "/home/agent", "echo"), `relay-b-${process.pid}:ping`)
      const sums = yield* Effect.all([python(a, "/home/agent", "bulk"), python(b, "/home/agent", "bulk")], { concurrency: 2 })
      for (const sum of sums) {
        const [, got, sent] = sum.split(" ")
        assert.strictEqual(got, sent)
      }
    }), 120_000)
})

describeIf(dockerWorks, requirement())("the relay in a Docker container", () => {
  it.scopedLive("clients inside reach the server's handler through the loopback port, with no network", () =>
    Effect.gen(function*() {
      const backend = yield* Effect.provide(Backend, Layer.fresh(DockerBackend.layer({
        engine: "docker",
        dockerHost: undefined,
        image: TEST_IMAGE,
        cpu: undefined,
        memory: undefined,
        pidsLimit: 512,
        network: false,
        runFlags: [],
        relay
      })))
      const id = `relay-${process.pid}`
      const computer = (yield* ProviderComputer.open(backend, id)).connection
      yield* exercise(computer, id, DockerBackend.HOME)
    }), 120_000)
})
