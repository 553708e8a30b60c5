/**
 * Egress end to end, as a user runs it: the built CLI started with `--allow-host`, `--egress-resolve`,
 * `--egress-header`, `--egress-ca-file` and `--audit-log`, driven by the MCP SDK's Client over stdio,
 * on the host sandbox and on Docker. Every upstream is a local server on 127.0.0.1 with a test CA of
 * its own (Upstreams.ts); names are pinned with --egress-resolve. Nothing here sends a packet
 * beyond this machine: the "direct" attempts aim at this machine's own address, where the test
 * listens and counts what arrives.
 *
 * From inside a computer: an allowed host is reached with curl, python3 and node (through the proxy
 * variables and the CA bundle the backend put there, not by hand); a denied host gets the 403 naming
 * the rule and no upstream connection; a raw IP, a name lookup, UDP and a direct TCP connection all
 * fail; the injected header arrives upstream while the secret is in no process's environment, in no
 * file of the computer, in no tool result and not in the audit log, which records processes, files,
 * the computer's lifecycle and every egress decision; the dashboard's feed carries the recent entries.
 */
import { Effect, Exit, Scope } from "effect"
import { createSocket } from "node:dgram"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { createServer, type Server } from "node:net"
import { networkInterfaces, tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, assert, beforeAll, it } from "vitest"
import { COMPUTER_IMAGE, engineWorks, removeOurContainers, TEST_ENGINE } from "../../support/Docker.js"
import { binPath, type Harness, startServer } from "../../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../../support/Requirements.js"
import * as Upstreams from "./Upstreams.js"

const built = existsSync(binPath)
const SECRET = `Bearer kt-egress-${Math.random().toString(36).slice(2)}-${Date.now().toString(36)}`
/** The secret as the computer may be told to look for it: never in a command line the audit log could keep. */
const SECRET_B64 = Buffer.from(SECRET).toString("base64")

/** This machine's own non-loopback IPv4 address: where a leak would arrive, without leaving the machine. */
const ownAddress = () =>
  Object.values(networkInterfaces()).flat().find((address) => address !== undefined && address.family === "IPv4" && !address.internal)?.address

/** A Node 20 client through the proxy by hand (Node 20 ignores HTTPS_PROXY), trusting NODE_EXTRA_CA_CERTS only. */
const NODE_CLIENT = `
const http = require("http"), tls = require("tls")
const [host, port] = process.argv.slice(2)
const proxy = new URL(process.env.HTTPS_PROXY)
const req = http.request({ host: proxy.hostname, port: proxy.port, method: "CONNECT", path: host + ":" + port })
req.on("connect", (res, socket) => {
  if (res.statusCode !== 200) { console.log("CONNECT " + res.statusCode); process.exit(3) }
  const s = tls.connect({ socket, servername: host }, () => s.write("GET /node HTTP/1.1\\r\\nHost: " + host + "\\r\\nConnection: close\\r\\n\\r\\n"))
  let out = ""
  s.on("data", (d) => (out += d))
  s.on("end", () => console.log(out.split("\\r\\n\\r\\n").slice(1).join("")))
  s.on("error", (e) => { console.log("TLS " + e.message); process.exit(4) })
})
req.on("error", (e) => { console.log("PROXY " + e.message); process.exit(5) })
req.end()
`

interface Exec {
  readonly stdout: string
  readonly stderr: string
  readonly exit_code: number
}

interface Backend {
  readonly name: string
  readonly available: boolean
  readonly needs: string
  readonly args: ReadonlyArray<string>
  readonly cleanup?: () => Promise<void>
}

const backends: ReadonlyArray<Backend> = [
  {
    name: "host",
    available: bwrapWorks && built,
    needs: "bubblewrap and a built CLI (npm run build)",
    args: ["--backend", "host"]
  },
  {
    name: "docker",
    available: engineWorks(TEST_ENGINE, COMPUTER_IMAGE) && built,
    needs: `a ${TEST_ENGINE} engine with the computer image ${COMPUTER_IMAGE} (kilntainers image build) and a built CLI`,
    // The image has curl and python3; node is the host's (both are Debian bookworm).
    args: ["--backend", "docker", "--engine", TEST_ENGINE, "--image", COMPUTER_IMAGE, "--docker-run-flag=--volume=/usr/bin/node:/usr/local/bin/node:ro"],
    cleanup: removeOurContainers
  }
]

for (const backend of backends) {
  describeIf(backend.available, backend.needs)(`egress from inside a ${backend.name} computer`, () => {
    const dir = mkdtempSync(join(tmpdir(), `kt-egress-${backend.name}-`))
    const auditPath = join(dir, "audit.jsonl")
    const scope = Effect.runSync(Scope.make())
    let upstreams: Upstreams.Upstreams
    let server: Harness
    /** A TCP and a UDP listener on this machine's own address, counting what reaches them. */
    let tcp: Server
    let tcpPort = 0
    let tcpConnections = 0
    const udp = createSocket("udp4")
    let udpPort = 0
    let udpMessages = 0
    const address = ownAddress()

    const exec = async (command: string): Promise<Exec> => {
      const result = await server.call("sandbox_exec", { command, timeout: 60 })
      assert.isFalse(result.isError, result.text)
      assert.notInclude(result.text, SECRET, "a tool result never carries the secret")
      return result.structured as Exec
    }
    const https = (host: string) => `https://${host}:${upstreams.httpsPort}`
    const http = (host: string) => `http://${host}:${upstreams.httpPort}`

    beforeAll(async () => {
      upstreams = await Effect.runPromise(Scope.extend(Upstreams.start(dir), scope))
      tcp = createServer((socket) => {
        tcpConnections++
        socket.destroy()
      })
      tcpPort = await new Promise<number>((resolve) => tcp.listen(0, "0.0.0.0", () => resolve((tcp.address() as { port: number }).port)))
      udp.on("message", () => udpMessages++)
      udpPort = await new Promise<number>((resolve) => udp.bind(0, "0.0.0.0", () => resolve(udp.address().port)))
      server = await startServer([
        ...backend.args,
        "--allow-host", "allowed.test,echo.test",
        "--egress-resolve", "allowed.test=127.0.0.1",
        "--egress-resolve", "echo.test=127.0.0.1",
        "--egress-resolve", "denied.test=127.0.0.1",
        "--egress-ca-file", upstreams.caFile,
        "--egress-header", "echo.test:Authorization=KT_TEST_EGRESS_SECRET",
        "--audit-log", auditPath
      ], { KT_TEST_EGRESS_SECRET: SECRET })
      // The computer is made by the first call.
      assert.strictEqual((await exec("echo ready")).stdout, "ready\n")
    }, 180_000)

    afterAll(async () => {
      await server?.client.close()
      await backend.cleanup?.()
      await Effect.runPromise(Scope.close(scope, Exit.void))
      tcp?.close()
      udp.close()
      rmSync(dir, { recursive: true, force: true })
    }, 60_000)

    it("every process has the proxy and CA variables, and the bundle is at the system's path", async () => {
      const env = await exec("env | grep -iE '^(https?_proxy|no_proxy|ssl_cert_file|node_extra_ca_certs|requests_ca_bundle|curl_ca_bundle|git_ssl_cainfo|pip_cert)=' | sort")
      for (const line of [
        "HTTPS_PROXY=http://127.0.0.1:3128",
        "HTTP_PROXY=http://127.0.0.1:3128",
        "https_proxy=http://127.0.0.1:3128",
        "http_proxy=http://127.0.0.1:3128",
        "NO_PROXY=localhost,127.0.0.1,::1",
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        "NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt",
        "REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
        "CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
        "GIT_SSL_CAINFO=/etc/ssl/certs/ca-certificates.crt",
        "PIP_CERT=/etc/ssl/certs/ca-certificates.crt"
      ]) assert.include(env.stdout.split("\n"), line)
      // The call's own variables win over the proxy's.
      const own = await server.call("sandbox_exec", { command: "echo $HTTPS_PROXY", env: { HTTPS_PROXY: "http://127.0.0.1:1" } })
      assert.strictEqual(own.structured.stdout, "http://127.0.0.1:1\n")
      const bundle = await exec("grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt; grep -c PRIVATE /etc/ssl/certs/ca-certificates.crt || true")
      const [certificates, keys] = bundle.stdout.trim().split("\n").map(Number)
      assert.isAbove(certificates!, 50, "the system's roots, the --egress-ca-file CA and the interception CA")
      assert.strictEqual(keys, 0)
      const ca = upstreams.caPem.split("\n").filter((line) => line !== "" && !line.startsWith("-----"))[0]!
      assert.strictEqual((await exec(`grep -cF '${ca}' /etc/ssl/certs/ca-certificates.crt`)).stdout.trim(), "1")
      if (backend.name === "docker") {
        assert.strictEqual((await exec("grep -c 'BEGIN CERTIFICATE' /usr/local/share/ca-certificates/kilntainers-egress.crt")).stdout.trim(), "1")
      }
    }, 60_000)

    it("an allowed host is reached with curl, python3 and node, over HTTPS and plain HTTP", async () => {
      const curl = await exec(`curl -sS ${https("allowed.test")}/curl && curl -sS ${http("allowed.test")}/plain`)
      assert.strictEqual(curl.exit_code, 0, curl.stderr)
      assert.strictEqual(curl.stdout, `hello allowed.test:${upstreams.httpsPort} /curl\nhello allowed.test:${upstreams.httpPort} /plain\n`)
      const python = await exec(
        `python3 -c "import urllib.request as u; print(u.urlopen('${https("allowed.test")}/python').read().decode(), end='')"`
      )
      assert.strictEqual(python.exit_code, 0, python.stderr)
      assert.strictEqual(python.stdout, `hello allowed.test:${upstreams.httpsPort} /python\n`)
      const written = await server.call("file_write", { path: "client.js", content: NODE_CLIENT })
      assert.isFalse(written.isError, written.text)
      const node = await exec(`node client.js allowed.test ${upstreams.httpsPort}`)
      assert.strictEqual(node.exit_code, 0, node.stdout + node.stderr)
      assert.strictEqual(node.stdout, "hello allowed.test /node\n\n")
    }, 60_000)

    it("a denied host gets the 403 that names the rule, and no upstream connection", async () => {
      const before = upstreams.connections()
      const tunnel = await exec(`curl -sS ${https("denied.test")}/ 2>&1; echo " exit=$?"`)
      assert.match(tunnel.stdout, /403/)
      assert.notStrictEqual(tunnel.stdout.trim().split("exit=")[1], "0")
      const plain = await exec(`curl -s -i ${http("denied.test")}/`)
      assert.match(plain.stdout, /^HTTP\/1\.1 403 Forbidden by the kilntainers egress allowlist \(--allow-host denied\.test\)/)
      assert.include(plain.stdout, "--allow-host denied.test")
      const python = await exec(`python3 -c "import urllib.request as u; u.urlopen('${https("denied.test")}/')" 2>&1 | tail -1`)
      assert.match(python.stdout, /403/)
      assert.strictEqual(upstreams.connections(), before, "nothing reached an upstream")
    }, 60_000)

    it("a raw IP, a name lookup, UDP and a direct TCP connection all fail", async () => {
      assert.isDefined(address, "this machine has a non-loopback address")
      const before = upstreams.connections()
      // Through the proxy (NO_PROXY would keep 127.0.0.1 inside the computer): an address is never
      // reachable unless named exactly.
      const raw = await exec(`curl -s --noproxy '' -o /dev/null -w '%{http_code}' http://127.0.0.1:${upstreams.httpPort}/`)
      assert.strictEqual(raw.stdout, "403")
      const rawIp = await exec(`curl -s -o /dev/null -w '%{http_code}' http://${address}:${tcpPort}/`)
      assert.strictEqual(rawIp.stdout, "403")
      const rawTls = await exec(`curl -sS https://${address}:${tcpPort}/ 2>&1`)
      assert.match(rawTls.stdout, /403/)
      // Around the proxy: the computer has no network of its own.
      const direct = await exec(`curl -sS --noproxy '*' --max-time 5 http://${address}:${tcpPort}/ 2>&1; echo "exit=$?"`)
      assert.notMatch(direct.stdout, /exit=0$/m)
      const loopback = await exec(`curl -sS --noproxy '*' --max-time 5 ${http("allowed.test")}/ 2>&1; echo "exit=$?"`)
      assert.notMatch(loopback.stdout, /exit=0$/m)
      const lookup = await exec(`python3 -c "import socket; print(socket.getaddrinfo('allowed.test', 80))" 2>&1 | tail -1`)
      assert.match(lookup.stdout, /gaierror|Temporary failure|Name or service not known|No address/)
      const dns = await exec(
        `python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'query', ('${address}', ${udpPort}))" 2>&1 | tail -1`
      )
      assert.match(dns.stdout, /unreachable|not permitted|Errno/i)
      const socketTcp = await exec(
        `python3 -c "import socket; socket.create_connection(('${address}', ${tcpPort}), timeout=5)" 2>&1 | tail -1`
      )
      assert.match(socketTcp.stdout, /unreachable|refused|timed out|Errno/i)
      await new Promise((resolve) => setTimeout(resolve, 200))
      assert.strictEqual(tcpConnections, 0, "no TCP connection arrived on this machine's address")
      assert.strictEqual(udpMessages, 0, "no datagram arrived")
      assert.strictEqual(upstreams.connections(), before)
    }, 60_000)

    it("the injected header arrives upstream, and the secret is nowhere in the computer", async () => {
      const seen = upstreams.seen.length
      const echo = await exec(`curl -sS ${https("echo.test")}/echo`)
      assert.strictEqual(echo.exit_code, 0, echo.stderr)
      const upstream = upstreams.seen.slice(seen).find((request) => request.url === "/echo")
      assert.isDefined(upstream, "the request reached the upstream")
      assert.strictEqual(upstream!.headers.authorization, SECRET)
      // The upstream echoed it back; the computer sees it masked.
      assert.include(echo.stdout, "*".repeat(SECRET.length))
      const environ = await exec(
        `S=$(echo ${SECRET_B64} | base64 -d); for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null; done | tr '\\0' '\\n' | grep -cF "$S"; ` +
          `env | grep -cF "$S"; true`
      )
      assert.deepStrictEqual(environ.stdout.trim().split("\n"), ["0", "0"])
      // Everything a computer may write or was given. A host computer's /usr, /usr/local and /opt
      // are the host's own, read-only, and nothing of the server's goes there (this machine's /opt
      // alone is 8 GiB: reading it took over a minute); a container's are its own.
      const dirs = ["/home", "/root", "/tmp", "/var", "/etc", "/run", "/.kilntainers", ...(backend.name === "host" ? [] : ["/opt", "/usr/local"])]
      const files = await exec(
        `S=$(echo ${SECRET_B64} | base64 -d); for d in ${dirs.join(" ")}; do ` +
          `[ -d $d ] && grep -rlsF "$S" $d 2>/dev/null | head -5; done; echo done`
      )
      assert.strictEqual(files.stdout, "done\n", `files holding the secret: ${files.stdout}`)
    }, 180_000)

    it("the audit log records processes, files, the computer and every egress decision, without the secret", async () => {
      const list = await server.call("computer_list", { audit: true })
      const activity = list.structured.audit as Array<{ kind: string; summary: string; computer_id: string }>
      assert.isArray(activity, list.text)
      assert.includeMembers([...new Set(activity.map((entry) => entry.kind))], ["process.started", "process.ended"])
      await new Promise((resolve) => setTimeout(resolve, 500))
      const text = readFileSync(auditPath, "utf8")
      assert.notInclude(text, SECRET)
      assert.notInclude(text, SECRET.split(" ")[1]!)
      const entries = text.trim().split("\n").map((line) => JSON.parse(line) as Record<string, any>)
      const types = new Set(entries.map((entry) => entry.type))
      for (const type of ["process.started", "process.ended", "file.written", "computer", "egress"]) assert.isTrue(types.has(type), `${type} in ${[...types]}`)
      assert.isTrue(entries.some((entry) => entry.type === "computer" && entry.event === "created"))
      assert.isTrue(entries.some((entry) => entry.type === "file.written" && entry.path === "client.js"))
      assert.isTrue(entries.some((entry) => entry.type === "process.started" && /curl -sS https:\/\/allowed\.test/.test(entry.command ?? "")))
      assert.isTrue(entries.some((entry) => entry.type === "process.ended" && entry.exitCode === 0 && entry.stdoutBytes > 0))
      const egress = entries.filter((entry) => entry.type === "egress")
      assert.isTrue(egress.some((entry) => entry.host === "allowed.test" && entry.decision === "allowed" && entry.method === "CONNECT"))
      assert.isTrue(egress.some((entry) => entry.host === "denied.test" && entry.decision === "denied"))
      const injected = egress.find((entry) => entry.host === "echo.test" && entry.intercepted === true && entry.path === "/echo")
      assert.isDefined(injected, JSON.stringify(egress))
      assert.deepStrictEqual(injected!.injected, ["Authorization"])
    }, 60_000)
  })
}
