/** What a computer gets from Egress: the proxy variables, the CA bundle and the relay; and refusals at setup. */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Redacted } from "effect"
import { X509Certificate } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as AuditLog from "../../../src/layers/AuditLog.js"
import * as Egress from "../../../src/layers/egress/Egress.js"
import { defaultSettings } from "../../../src/services/Settings.js"

const dir = mkdtempSync(join(tmpdir(), "kt-egress-setup-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const setup = (settings: Partial<typeof defaultSettings.egress>, stateDir = join(dir, "state")) =>
  Effect.gen(function*() {
    const audit = yield* AuditLog.make({ path: undefined, maxBytes: 0, keep: 0, secrets: [] })
    return yield* Egress.make({ settings: { ...defaultSettings.egress, ...settings }, stateDir, audit })
  })

describe("Egress", () => {
  it.scoped("gives a computer the proxy variables, the relay port and a bundle with our CA only when it intercepts", () =>
    Effect.gen(function*() {
      const plain = yield* setup({ allowHosts: ["pypi.org"], relayPort: 3128 })
      assert.deepStrictEqual(plain.computer.env, {
        HTTP_PROXY: "http://127.0.0.1:3128",
        http_proxy: "http://127.0.0.1:3128",
        HTTPS_PROXY: "http://127.0.0.1:3128",
        https_proxy: "http://127.0.0.1:3128",
        NO_PROXY: "localhost,127.0.0.1,::1",
        no_proxy: "localhost,127.0.0.1,::1",
        NODE_USE_ENV_PROXY: "1",
        SSL_CERT_FILE: "/etc/ssl/certs/ca-certificates.crt",
        NODE_EXTRA_CA_CERTS: "/etc/ssl/certs/ca-certificates.crt",
        REQUESTS_CA_BUNDLE: "/etc/ssl/certs/ca-certificates.crt",
        CURL_CA_BUNDLE: "/etc/ssl/certs/ca-certificates.crt",
        GIT_SSL_CAINFO: "/etc/ssl/certs/ca-certificates.crt",
        PIP_CERT: "/etc/ssl/certs/ca-certificates.crt"
      })
      assert.strictEqual(plain.computer.relayPort, 3128)
      assert.strictEqual(plain.computer.caBundlePath, "/etc/ssl/certs/ca-certificates.crt")
      assert.isUndefined(plain.caCertificate)
      assert.isAbove(plain.computer.caBundle.split("BEGIN CERTIFICATE").length, 50, "the system's roots")
      assert.notInclude(plain.computer.caBundle, "PRIVATE KEY")

      const intercepting = yield* setup({
        allowHosts: ["api.github.com"],
        headers: [{ rule: "api.github.com:Authorization=GH", value: Redacted.make("Bearer very-secret") }],
        relayPort: 8080
      })
      assert.strictEqual(intercepting.computer.env.HTTPS_PROXY, "http://127.0.0.1:8080")
      assert.include(intercepting.computer.caBundle, intercepting.caCertificate!.trim())
      assert.isTrue(new X509Certificate(intercepting.caCertificate!).ca)
      for (const text of [intercepting.computer.caBundle, JSON.stringify(intercepting.computer.env), intercepting.summary]) {
        assert.notInclude(text, "very-secret")
        assert.notInclude(text, "PRIVATE KEY")
      }
      assert.strictEqual(intercepting.summary, "egress allowlist api.github.com; headers api.github.com: Authorization from $GH")
    }))

  it.scoped("adds --egress-ca-file certificates to the bundle and refuses files without one", () =>
    Effect.gen(function*() {
      const ca = yield* setup({ allowHosts: ["x.test"], headers: [{ rule: "x.test:X-K=K", value: Redacted.make("v") }] }, join(dir, "other"))
      const file = join(dir, "internal-ca.pem")
      writeFileSync(file, ca.caCertificate!)
      const egress = yield* setup({ allowHosts: ["x.test"], upstreamCaFiles: [file] })
      assert.include(egress.computer.caBundle, `# --egress-ca-file\n${readFileSync(file, "utf8").trim()}`)
      writeFileSync(join(dir, "empty.pem"), "nothing here")
      const refused = yield* Effect.either(setup({ allowHosts: ["x.test"], upstreamCaFiles: [join(dir, "empty.pem")] }))
      assert.isTrue(Either.isLeft(refused) && refused.left.reason.includes("no PEM certificate"))
      const none = yield* Effect.either(setup({ allowHosts: [] }))
      assert.isTrue(Either.isLeft(none) && none.left.reason.includes("no --allow-host rule"))
    }))
})
