/** The interception CA: made once per state directory and kept private; leaves that verify, cached and bounded. */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, TestClock } from "effect"
import { X509Certificate } from "node:crypto"
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs"
import { type AddressInfo, createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { checkServerIdentity, connect as tlsConnect, type SecureContext, TLSSocket } from "node:tls"
import { afterAll } from "vitest"
import * as CertificateAuthority from "../../../src/layers/egress/CertificateAuthority.js"

const dir = mkdtempSync(join(tmpdir(), "kt-ca-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** What a TLS client trusting only `ca` sees of a server presenting `context` for `servername`. */
const handshake = (context: SecureContext, ca: string, servername: string, host = servername) =>
  Effect.async<{ readonly ok: boolean; readonly error?: string; readonly subject?: string }>((resume) => {
    // Served the way the proxy serves an intercepted tunnel: a TLSSocket with the leaf's context.
    const server = createServer((raw) => {
      const secure = new TLSSocket(raw, { isServer: true, secureContext: context })
      secure.on("error", () => raw.destroy())
    })
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as AddressInfo).port
      const socket = tlsConnect({
        host: "127.0.0.1",
        port,
        ...(/^[\d.]+$/.test(servername) ? {} : { servername }),
        ca,
        checkServerIdentity: (_name, certificate) => checkServerIdentity(host, certificate)
      })
      const done = (result: { readonly ok: boolean; readonly error?: string; readonly subject?: string }) => {
        socket.destroy()
        server.close()
        resume(Effect.succeed(result))
      }
      socket.once("secureConnect", () => done({ ok: true, subject: String(socket.getPeerCertificate().subject.CN) }))
      socket.once("error", (error) => done({ ok: false, error: error.message }))
    })
  })

describe("CertificateAuthority", () => {
  it.effect("is made once per directory, kept 0600 in a 0700 directory, and loaded again", () =>
    Effect.gen(function*() {
      const where = join(dir, "once")
      const first = yield* CertificateAuthority.make({ dir: where })
      const again = yield* CertificateAuthority.make({ dir: where })
      assert.strictEqual(again.certificate, first.certificate)
      assert.strictEqual(statSync(join(where, "ca.pem")).mode & 0o777, 0o600)
      assert.strictEqual(statSync(where).mode & 0o777, 0o700)
      const file = readFileSync(join(where, "ca.pem"), "utf8")
      assert.include(file, "-----BEGIN PRIVATE KEY-----")
      assert.notInclude(first.certificate, "PRIVATE KEY", "the certificate handed out holds no key")
      const ca = new X509Certificate(first.certificate)
      assert.isTrue(ca.ca)
      assert.match(ca.subject, /^CN=kilntainers egress CA [0-9a-f]{8}\nO=kilntainers$/)
    }))

  it.effect("two servers starting together on one directory end up with one CA", () =>
    Effect.gen(function*() {
      const where = join(dir, "race")
      const all = yield* Effect.all(Array.from({ length: 4 }, () => CertificateAuthority.make({ dir: where })), { concurrency: "unbounded" })
      assert.strictEqual(new Set(all.map((ca) => ca.certificate)).size, 1)
    }))

  it.effect("refuses a CA file that others may read", () =>
    Effect.gen(function*() {
      const where = join(dir, "loose")
      yield* CertificateAuthority.make({ dir: where })
      chmodSync(join(where, "ca.pem"), 0o644)
      const refused = yield* Effect.either(CertificateAuthority.make({ dir: where }))
      assert.isTrue(Either.isLeft(refused))
      if (Either.isLeft(refused)) assert.include(refused.left.reason, "others may read it (mode 644); chmod 600 it")
    }))

  it.live("issues leaves that a client trusting the CA accepts for that name only; addresses get IP names", () =>
    Effect.gen(function*() {
      const ca = yield* CertificateAuthority.make({ dir: join(dir, "leaves") })
      const good = yield* handshake(yield* ca.leaf("api.github.com"), ca.certificate, "api.github.com")
      assert.deepStrictEqual(good, { ok: true, subject: "api.github.com" }, good.error)
      const wrongName = yield* handshake(yield* ca.leaf("api.github.com"), ca.certificate, "api.github.com", "evil.com")
      assert.isFalse(wrongName.ok)
      const other = yield* CertificateAuthority.make({ dir: join(dir, "other") })
      const untrusted = yield* handshake(yield* ca.leaf("api.github.com"), other.certificate, "api.github.com")
      assert.isFalse(untrusted.ok)
      assert.match(untrusted.error ?? "", /self[- ]signed|unable to get|unable to verify/i)
      const ip = yield* handshake(yield* ca.leaf("10.1.2.3"), ca.certificate, "10.1.2.3")
      assert.isTrue(ip.ok, ip.error)
    }))

  it.effect("leaves are cached (one signature for a burst), bounded, and made again at half their life", () =>
    Effect.gen(function*() {
      const ca = yield* CertificateAuthority.make({ dir: join(dir, "cache"), cacheSize: 2 })
      const burst = yield* Effect.all(Array.from({ length: 20 }, () => ca.leaf("a.test")), { concurrency: "unbounded" })
      assert.strictEqual(new Set(burst).size, 1, "concurrent requests share one certificate")
      const a = burst[0]!
      assert.strictEqual(yield* ca.leaf("a.test"), a)
      yield* ca.leaf("b.test")
      yield* ca.leaf("c.test")
      assert.notStrictEqual(yield* ca.leaf("a.test"), a, "evicted by the bound, made again")
      const fresh = yield* ca.leaf("a.test")
      yield* TestClock.adjust("3 days")
      assert.strictEqual(yield* ca.leaf("a.test"), fresh)
      yield* TestClock.adjust("12 hours")
      assert.notStrictEqual(yield* ca.leaf("a.test"), fresh, "renewed at half its 7-day life")
    }))
})
