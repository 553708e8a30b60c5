/**
 * The egress proxy driven by real clients — curl, python's urllib, node — through a TCP listener
 * that hands each accepted socket to the proxy exactly as the relay hands it a connection. The
 * upstreams are local servers on 127.0.0.1 with a CA of their own; names are pinned with
 * --egress-resolve. Nothing leaves this machine.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, FiberSet, Redacted } from "effect"
import type { Scope } from "effect"
import { execFile } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { type AddressInfo, connect, createServer, type Socket } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as AuditLog from "../../../src/layers/AuditLog.js"
import * as Egress from "../../../src/layers/egress/Egress.js"
import type { ProxyLimits } from "../../../src/layers/egress/EgressProxy.js"
import { defaultSettings } from "../../../src/services/Settings.js"
import * as Upstreams from "./Upstreams.js"

const dir = mkdtempSync(join(tmpdir(), "kt-egress-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const SECRET = "Bearer kt-test-SECRET-9f8e7d6c5b4a"
let serial = 0

interface Harness {
  readonly port: number
  readonly otherPort: number
  readonly upstreams: Upstreams.Upstreams
  readonly bundle: string
  readonly auditPath: string
  readonly egress: Egress.EgressShape
  readonly env: Record<string, string>
}

/** The proxy on a TCP port, with upstreams, an audit log file and the computer's CA bundle in a file. */
const harness = (options: {
  readonly allow: ReadonlyArray<string>
  readonly headers?: ReadonlyArray<string>
  readonly limits?: Partial<ProxyLimits>
}): Effect.Effect<Harness, unknown, Scope.Scope> =>
  Effect.gen(function*() {
    const here = join(dir, `h${serial++}`)
    const upstreams = yield* Upstreams.start(here)
    const auditPath = join(here, "audit.log")
    const audit = yield* AuditLog.make({ path: auditPath, maxBytes: 1 << 20, keep: 1, secrets: [Redacted.make(SECRET)] })
    const egress = yield* Egress.make({
      settings: {
        ...defaultSettings.egress,
        allowHosts: options.allow,
        resolve: ["good.test=127.0.0.1", "api.test=127.0.0.1", "evil.test=127.0.0.1"],
        headers: (options.headers ?? []).map((rule) => ({ rule, value: Redacted.make(SECRET) })),
        upstreamCaFiles: [upstreams.caFile]
      },
      stateDir: here,
      audit,
      limits: options.limits
    })
    const bundle = join(here, "bundle.pem")
    writeFileSync(bundle, egress.computer.caBundle)
    const run = yield* FiberSet.makeRuntime<never>()
    const listen = (computer: string) => {
      const server = createServer((socket) => void run(egress.serve(computer, socket)))
      return Effect.acquireRelease(
        Effect.async<number>((resume) => {
          server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
        }),
        () => Effect.sync(() => server.close())
      )
    }
    // Each listener stands for one computer's relay.
    const port = yield* listen("test-computer")
    const otherPort = yield* listen("other-computer")
    const env = { ...egress.computer.env, PATH: process.env.PATH ?? "/usr/bin:/bin" } as Record<string, string>
    for (const name of Object.keys(env)) if (env[name] === Egress.CA_BUNDLE_PATH) env[name] = bundle
    for (const name of ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"]) env[name] = `http://127.0.0.1:${port}`
    // Inside a computer 127.0.0.1 is its own loopback, rightly direct; here the upstreams are on it.
    delete env.NO_PROXY
    delete env.no_proxy
    return { port, otherPort, upstreams, bundle, auditPath, egress, env }
  })

/** Runs a client program; its exit code, stdout and stderr. */
const client = (file: string, args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.async<{ readonly code: number; readonly out: string; readonly err: string }>((resume) => {
    const child = execFile(file, args, { env, timeout: 30_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1
      resume(Effect.succeed({ code, out: stdout, err: stderr }))
    })
    return Effect.sync(() => child.kill())
  })

const curl = (h: Harness, url: string, ...extra: Array<string>) => client("curl", ["-sS", "--max-time", "20", ...extra, url], h.env)

const PYTHON = String.raw`
import json, sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=20) as response:
        print(response.status, response.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except urllib.error.URLError as e:
    print("URLError", e.reason)
`

/** Node without NODE_USE_ENV_PROXY (Node 20 here): an explicit CONNECT, then TLS trusting the bundle. */
const NODE = String.raw`
const http = require("node:http"), tls = require("node:tls"), fs = require("node:fs")
const [proxyPort, host, port, path] = process.argv.slice(1)
const ca = fs.readFileSync(process.env.NODE_EXTRA_CA_CERTS, "utf8")
http.request({ host: "127.0.0.1", port: proxyPort, method: "CONNECT", path: host + ":" + port }).on("connect", (res, socket) => {
  if (res.statusCode !== 200) { console.log("refused", res.statusCode, res.statusMessage); socket.destroy(); return }
  const secure = tls.connect({ socket, servername: host, ca }, () => {
    const issuer = secure.getPeerCertificate().issuer.CN
    secure.write("GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n")
    let body = ""
    secure.on("data", (d) => body += d).on("end", () => console.log(issuer + "|" + body.split("\r\n\r\n")[1]))
  })
  secure.on("error", (e) => console.log("tls error", e.message))
}).on("error", (e) => console.log("error", e.message)).end()
`

const audit = (h: Harness) =>
  readFileSync(h.auditPath, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line))

/** The audit's writer runs in the background: wait until `count` egress entries are on disk. */
const auditEntries = (h: Harness, count: number) =>
  Effect.gen(function*() {
    for (let tries = 0; tries < 100; tries++) {
      const entries = audit(h).filter((entry) => entry.type === "egress")
      if (entries.length >= count) return entries
      yield* Effect.sleep("50 millis")
    }
    return audit(h).filter((entry) => entry.type === "egress")
  })

/** A raw TCP client of the proxy. */
const raw = (port: number) =>
  Effect.acquireRelease(
    Effect.async<Socket>((resume) => {
      const socket = connect(port, "127.0.0.1", () => resume(Effect.succeed(socket)))
      socket.on("error", () => {})
    }),
    (socket) => Effect.sync(() => socket.destroy())
  )

/** What a raw client receives until the proxy closes the connection (or `ms` pass). */
const receive = (socket: Socket, ms = 10_000) =>
  Effect.async<{ readonly text: string; readonly closed: boolean }>((resume) => {
    let text = ""
    if (socket.closed) return resume(Effect.succeed({ text, closed: true }))
    socket.on("data", (data) => (text += data.toString("latin1")))
    socket.once("close", () => resume(Effect.succeed({ text, closed: true })))
    const timer = setTimeout(() => resume(Effect.succeed({ text, closed: false })), ms)
    return Effect.sync(() => clearTimeout(timer))
  })

describe("the egress proxy", () => {
  it.scopedLive("curl reaches allowed hosts: plain HTTP forwarded, HTTPS tunnelled with the upstream's own certificate", () =>
    Effect.gen(function*() {
      const h = yield* harness({ allow: ["good.test"] })
      const plain = yield* curl(h, `http://good.test:${h.upstreams.httpPort}/plain?x=1`)
      assert.strictEqual(plain.out, `hello good.test:${h.upstreams.httpPort} /plain?x=1\n`, plain.err)
      const secure = yield* curl(h, `https://good.test:${h.upstreams.httpsPort}/tls`, "-v")
      assert.strictEqual(secure.out, `hello good.test:${h.upstreams.httpsPort} /tls\n`, secure.err)
      assert.match(secure.err, /issuer: CN=kilntainers egress CA [0-9a-f]+; O=kilntainers/)
      const upstreamCa = new (yield* Effect.promise(() => import("node:crypto"))).X509Certificate(h.upstreams.caPem)
      assert.include(secure.err, upstreamCa.subject.split("\n")[0]!.replace("CN=", ""), "the client saw the upstream's own CA")
      assert.strictEqual(h.egress.caCertificate, undefined, "no header rules: no interception CA at all")
      const entries = yield* auditEntries(h, 2)
      assert.deepStrictEqual(
        entries.map((entry) => [entry.method, entry.host, entry.decision, entry.rule, entry.bytesDown > 0]),
        [["GET", "good.test", "allowed", "good.test", true], ["CONNECT", "good.test", "allowed", "good.test", true]]
      )
    }), 60_000)

  it.scopedLive("a denied host gets a 403 naming the rule to add, and the upstream sees no connection", () =>
    Effect.gen(function*() {
      const h = yield* harness({ allow: ["good.test"] })
      const before = h.upstreams.connections()
      const plain = yield* curl(h, `http://evil.test:${h.upstreams.httpPort}/`, "-i")
      assert.include(plain.out, "403 Forbidden by the kilntainers egress allowlist (--allow-host evil.test)")
      assert.include(plain.out, `evil.test:${h.upstreams.httpPort} is not on the egress allowlist; to allow it, start kilntainers with --allow-host evil.test`)
      const secure = yield* curl(h, `https://evil.test:${h.upstreams.httpsPort}/`)
      assert.notStrictEqual(secure.code, 0)
      assert.include(secure.err, "403")
      const python = yield* client("python3", ["-c", PYTHON, `https://evil.test:${h.upstreams.httpsPort}/`], h.env)
      assert.include(python.out, "Forbidden by the kilntainers egress allowlist (--allow-host evil.test)")
      // A raw address not on the list, in any spelling.
      for (const url of [`http://127.0.0.1:${h.upstreams.httpPort}/`, `http://2130706433:${h.upstreams.httpPort}/`]) {
        const direct = yield* curl(h, url, "-i")
        assert.include(direct.out, "403 Forbidden", url)
      }
      assert.strictEqual(h.upstreams.connections(), before, "no denied request reached an upstream")
      const entries = yield* auditEntries(h, 5)
      assert.isTrue(entries.every((entry) => entry.decision === "denied"))
      assert.deepStrictEqual(entries.map((entry) => entry.host), ["evil.test", "evil.test", "evil.test", "127.0.0.1", "127.0.0.1"])
    }), 60_000)

  it.scopedLive("'*' allows every public host but never a private address it was not told about", () =>
    Effect.gen(function*() {
      const h = yield* harness({ allow: ["*"] })
      const before = h.upstreams.connections()
      const raw = yield* curl(h, `http://127.0.0.1:${h.upstreams.httpPort}/`, "-i")
      assert.include(raw.out, "403 Forbidden")
      assert.include(raw.out, "is not a public address")
      // good.test is pinned by --egress-resolve: the user named it.
      const pinned = yield* curl(h, `http://good.test:${h.upstreams.httpPort}/pinned`)
      assert.strictEqual(pinned.out, `hello good.test:${h.upstreams.httpPort} /pinned\n`)
      assert.strictEqual(h.upstreams.connections(), before + 1)
    }), 60_000)

  it.scopedLive("python (HTTPS_PROXY) and node reach an allowed HTTPS host", () =>
    Effect.gen(function*() {
      const h = yield* harness({ allow: ["good.test"] })
      const python = yield* client("python3", ["-c", PYTHON, `https://good.test:${h.upstreams.httpsPort}/py`], h.env)
      assert.strictEqual(python.out.trim(), `200 hello good.test:${h.upstreams.httpsPort} /py`, python.err)
      const node = yield* client(process.execPath, ["-e", NODE, String(h.port), "good.test", String(h.upstreams.httpsPort), "/node"], h.env)
      assert.match(node.out.trim(), new RegExp(`^kilntainers egress CA [0-9a-f]+\\|hello good.test /node$`), node.err)
      const denied = yield* client(process.execPath, ["-e", NODE, String(h.port), "evil.test", String(h.upstreams.httpsPort), "/"], h.env)
      assert.strictEqual(denied.out.trim(), "refused 403 Forbidden by the kilntainers egress allowlist (--allow-host evil.test)")
    }), 60_000)

  it.scopedLive("the injected header reaches the upstream through interception; the secret reaches no client, log or audit line", () =>
    Effect.gen(function*() {
      const h = yield* harness({ allow: ["good.test", "api.test"], headers: ["api.test:Authorization=KT_TEST_TOKEN"] })
      assert.isDefined(h.egress.caCertificate)
      assert.include(h.egress.computer.caBundle, h.egress.caCertificate!.trim())
      // curl: the client's own Authorization is replaced, the echo of ours is masked.
      const viaCurl = yield* curl(h, `https://api.test:${h.upstreams.httpsPort}/echo`, "-i", "-H", "Authorization: mine")
      assert.strictEqual(viaCurl.code, 0, viaCurl.err)
      assert.notInclude(viaCurl.out, SECRET)
      assert.include(viaCurl.out, `x-echo-authorization: ${"*".repeat(SECRET.length)}`)
      const viaPython = yield* client("python3", ["-c", PYTHON, `https://api.test:${h.upstreams.httpsPort}/echo`], h.env)
      assert.match(viaPython.out, /^200 /, viaPython.err)
      assert.notInclude(viaPython.out, SECRET)
      const echoed = JSON.parse(viaPython.out.slice(4))
      assert.strictEqual(echoed.headers.authorization, "*".repeat(SECRET.length))
      const received = h.upstreams.seen.filter((seen) => seen.url === "/echo")
      assert.strictEqual(received.length, 2)
      for (const seen of received) {
        assert.strictEqual(seen.scheme, "https")
        assert.strictEqual(seen.headers.authorization, SECRET, "the upstream got the server's secret, not the client's")
        assert.strictEqual(seen.headers["accept-encoding"], "identity")
      }
      // The interception certificate is ours; other hosts stay tunnelled with their own.
      const intercepted = yield* curl(h, `https://api.test:${h.upstreams.httpsPort}/`, "-v")
      assert.match(intercepted.err, /issuer: CN=kilntainers egress CA [0-9a-f]+; O=kilntainers/)
      assert.notStrictEqual(/issuer: (.*)/.exec(intercepted.err)![1], /issuer: (.*)/.exec((yield* curl(h, `https://good.test:${h.upstreams.httpsPort}/`, "-v")).err)![1])
      const goodSeen = h.upstreams.seen.filter((seen) => seen.headers.host === `good.test:${h.upstreams.httpsPort}`)
      assert.isTrue(goodSeen.every((seen) => seen.headers.authorization === undefined), "no header for hosts without a rule")
      // Plain HTTP to the host with the rule is refused: the credential never travels in clear text.
      const seenBefore = h.upstreams.seen.length
      const plain = yield* curl(h, `http://api.test:${h.upstreams.httpPort}/echo`, "-i")
      assert.match(plain.out, /^HTTP\/1\.1 403 /)
      assert.include(plain.out, "its credential is sent only over HTTPS")
      assert.strictEqual(h.upstreams.seen.length, seenBefore)
      const text = readFileSync(h.auditPath, "utf8")
      assert.notInclude(text, SECRET)
      const entries = yield* auditEntries(h, 6)
      const injected = entries.filter((entry) => entry.injected !== undefined)
      assert.isAtLeast(injected.length, 3)
      for (const entry of injected) assert.deepStrictEqual(entry.injected, ["Authorization"])
      assert.notInclude(h.egress.summary, SECRET)
      assert.include(h.egress.summary, "api.test: Authorization from $KT_TEST_TOKEN")
    }), 60_000)

  it.scopedLive("a client that does not trust the interception CA fails its handshake, and the secret is never sent", () =>
    Effect.gen(function*() {
      const h = yield* harness({ allow: ["api.test"], headers: ["api.test:Authorization=KT_TEST_TOKEN"] })
      const untrusting = yield* curl(h, `https://api.test:${h.upstreams.httpsPort}/echo`, "--cacert", h.upstreams.caFile)
      assert.notStrictEqual(untrusting.code, 0)
      assert.strictEqual(h.upstreams.seen.length, 0)
    }), 60_000)
})

describe("the egress proxy under a hostile client", () => {
  const limits = { maxConnectionsPerComputer: 4, maxHeaderBytes: 8 * 1024, headTimeoutMs: 1500, idleTimeoutMs: 1000 }

  it.scopedLive("a huge header is refused and costs nothing else", () =>
    Effect.gen(function*() {
      const h = yield* harness({ allow: ["good.test"], limits })
      const socket = yield* raw(h.port)
      socket.write(`GET http://good.test:${h.upstreams.httpPort}/ HTTP/1.1\r\nHost: good.test\r\nX-Big: ${"a".repeat(64 * 1024)}\r\n\r\n`)
      const answer = yield* receive(socket)
      assert.match(answer.text, /^HTTP\/1.1 400 Request Header Fields Too Large/)
      assert.isTrue(answer.closed)
      const longLine = yield* raw(h.port)
      longLine.write(`GET http://good.test:${h.upstreams.httpPort}/${"p".repeat(64 * 1024)} HTTP/1.1\r\n\r\n`)
      assert.match((yield* receive(longLine)).text, /^HTTP\/1.1 400/)
      const fine = yield* curl(h, `http://good.test:${h.upstreams.httpPort}/after`)
      assert.strictEqual(fine.out, `hello good.test:${h.upstreams.httpPort} /after\n`)
    }), 60_000)

  it.scopedLive("silent and stalled connections are closed on time; a flood is capped per computer", () =>
    Effect.gen(function*() {
      const h = yield* harness({ allow: ["good.test"], limits })
      // Silent: never sends a request head.
      const silent = yield* raw(h.port)
      const started = performance.now()
      const silentEnd = yield* receive(silent, 5_000)
      assert.isTrue(silentEnd.closed, "a connection that never speaks is closed")
      assert.isBelow(performance.now() - started, 4_000)
      // A tunnel that goes quiet is closed after an idle period or two.
      const quiet = yield* raw(h.port)
      quiet.write(`CONNECT good.test:${h.upstreams.httpsPort} HTTP/1.1\r\nHost: good.test\r\n\r\n`)
      const quietEnd = yield* receive(quiet, 5_000)
      assert.include(quietEnd.text, "200 Connection Established")
      assert.isTrue(quietEnd.closed)
      // A flood: the fifth connection at once is answered 503, the first four are held.
      const held = yield* Effect.forEach([1, 2, 3, 4], () => raw(h.port))
      for (const socket of held) socket.write("GET http://good.test/ HTTP/1.1\r\nHost: good.test\r\nX-Slow: ")
      const heldEnds = yield* Effect.forEach(held, (socket) => Effect.fork(receive(socket, 5_000)))
      yield* Effect.sleep("100 millis")
      assert.strictEqual(h.egress.open("test-computer"), 4)
      const fifth = yield* raw(h.port)
      const refused = yield* receive(fifth, 5_000)
      assert.match(refused.text, /^HTTP\/1.1 503 Service Unavailable/)
      assert.include(refused.text, "4 proxy connections open")
      // Another computer is served meanwhile.
      const other = yield* curl(h, `http://good.test:${h.upstreams.httpPort}/other`, "--proxy", `http://127.0.0.1:${h.otherPort}`)
      assert.strictEqual(other.out, `hello good.test:${h.upstreams.httpPort} /other\n`, other.err)
      assert.strictEqual(h.egress.open("test-computer"), 4)
      // Once the slow ones are gone (head timeout), the computer may connect again.
      for (const end of heldEnds) assert.isTrue((yield* Fiber.join(end)).closed)
      assert.strictEqual(h.egress.open("test-computer"), 0)
      const again = yield* curl(h, `http://good.test:${h.upstreams.httpPort}/again`)
      assert.strictEqual(again.out, `hello good.test:${h.upstreams.httpPort} /again\n`)
    }), 60_000)
})
