/**
 * Issue 19, items 3, 4 and 10 and the address blocklist, end to end: the built CLI with an
 * `--egress-header` rule, and curl run inside a real host (bubblewrap) and Docker computer by the
 * MCP SDK's Client over stdio. The proxy runs in the server, so this one pass per backend proves
 * the path from a guest; the variants are in the other egress-* files. Upstreams are local servers
 * on 127.0.0.1 (EgressRig.ts); names are pinned with --egress-resolve.
 */
import { Effect, Exit, Scope } from "effect"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, assert, beforeAll, it } from "vitest"
import { COMPUTER_IMAGE, engineWorks, removeOurContainers, TEST_ENGINE } from "../support/Docker.js"
import { binPath, type Harness, startServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"
import { holdsToken, SECRET, startUpstreams, type Upstreams } from "./EgressRig.js"

const built = existsSync(binPath)

interface Exec {
  readonly stdout: string
  readonly stderr: string
  readonly exit_code: number
}

const backends = [
  { name: "host", available: bwrapWorks && built, needs: "bubblewrap and a built CLI (npm run build)", args: ["--backend", "host"] },
  {
    name: "docker",
    available: engineWorks(TEST_ENGINE, COMPUTER_IMAGE) && built,
    needs: `a ${TEST_ENGINE} engine with the computer image ${COMPUTER_IMAGE} and a built CLI`,
    args: ["--backend", "docker", "--engine", TEST_ENGINE, "--image", COMPUTER_IMAGE],
    cleanup: removeOurContainers
  }
] as const

for (const backend of backends) {
  describeIf(backend.available, backend.needs)(`a credential from inside a ${backend.name} computer`, () => {
    const dir = mkdtempSync(join(tmpdir(), `kt-credential-${backend.name}-`))
    const auditPath = join(dir, "audit.jsonl")
    const scope = Effect.runSync(Scope.make())
    let upstreams: Upstreams
    let server: Harness

    const exec = async (command: string): Promise<Exec> => {
      const result = await server.call("sandbox_exec", { command, timeout: 60 })
      assert.isFalse(result.isError, result.text)
      assert.isFalse(holdsToken(result.text), `a tool result carries the credential: ${result.text}`)
      return result.structured as Exec
    }
    const carried = () => upstreams.seen.filter((seen) => seen.headers.authorization === SECRET)

    beforeAll(async () => {
      upstreams = await Effect.runPromise(Scope.extend(startUpstreams(dir), scope))
      server = await startServer([
        ...backend.args,
        "--allow-host", "*",
        "--egress-resolve", "api.test=127.0.0.1",
        "--egress-resolve", "evil.test=127.0.0.1",
        "--egress-ca-file", upstreams.caFile,
        "--egress-header", "api.test:Authorization=KT_TEST_CREDENTIAL",
        "--audit-log", auditPath
      ], { KT_TEST_CREDENTIAL: SECRET })
      assert.strictEqual((await exec("echo ready")).stdout, "ready\n")
    }, 180_000)

    afterAll(async () => {
      await server?.client.close()
      if ("cleanup" in backend) await backend.cleanup()
      await Effect.runPromise(Scope.close(scope, Exit.void))
      rmSync(dir, { recursive: true, force: true })
    }, 60_000)

    it("the credential is injected for its own host, and a Host naming another host gets a 421 and sends nothing", async () => {
      const own = await exec(`curl -sS https://api.test:${upstreams.httpsPort}/echo`)
      assert.strictEqual(own.exit_code, 0, own.stderr)
      assert.strictEqual(carried().length, 1)
      const before = upstreams.seen.length
      const other = await exec(`curl -sS -o /dev/null -w '%{http_code}' -H 'Host: evil.test' https://api.test:${upstreams.httpsPort}/echo`)
      assert.strictEqual(other.stdout, "421")
      assert.strictEqual(upstreams.seen.length, before, "the misdirected request went nowhere")
    }, 60_000)

    it("plain HTTP to the credential's host, and an https→http redirect to it, are refused", async () => {
      const before = upstreams.seen.filter((seen) => seen.scheme === "http").length
      const plain = await exec(`curl -sS -i http://api.test:${upstreams.httpPort}/echo`)
      assert.match(plain.stdout, /^HTTP\/1\.1 403 Forbidden/)
      assert.include(plain.stdout, "its credential is sent only over HTTPS")
      const redirect = await exec(`curl -sS -L -o /dev/null -w '%{http_code}' https://api.test:${upstreams.httpsPort}/redirect-http`)
      assert.strictEqual(redirect.stdout, "403")
      assert.strictEqual(upstreams.seen.filter((seen) => seen.scheme === "http").length, before)
    }, 60_000)

    it("an echo of the credential comes back masked, without its prefix and in any case", async () => {
      const reflected = await exec(`curl -sS -i https://api.test:${upstreams.httpsPort}/reflect; curl -sS https://api.test:${upstreams.httpsPort}/stream?size=3`)
      assert.strictEqual(reflected.exit_code, 0, reflected.stderr)
      assert.include(reflected.stdout, `bare=${"*".repeat(SECRET.length - "Bearer ".length)}`)
      assert.isFalse(holdsToken(reflected.stdout))
    }, 60_000)

    it("an IPv4-compatible or IPv4-translated spelling of loopback is refused under '*'", async () => {
      for (const address of ["::127.0.0.1", "::ffff:0:7f00:1"]) {
        const refused = await exec(`curl -sS -i 'http://[${address}]:${upstreams.httpPort}/'`)
        assert.match(refused.stdout, /^HTTP\/1\.1 403 /, address)
        assert.include(refused.stdout, "is not a public address", address)
      }
    }, 60_000)

    it("the audit log records each refusal, and never the credential", async () => {
      await new Promise((resolve) => setTimeout(resolve, 500))
      const text = readFileSync(auditPath, "utf8")
      assert.isFalse(holdsToken(text))
      const egress = text.trim().split("\n").map((line) => JSON.parse(line) as Record<string, any>).filter((entry) => entry.type === "egress")
      assert.isTrue(egress.some((entry) => entry.status === 421 && entry.decision === "denied" && /Host header names evil\.test/.test(entry.rule)))
      assert.isTrue(egress.some((entry) => entry.status === 403 && /only over HTTPS/.test(entry.rule)))
    }, 60_000)
  })
}
