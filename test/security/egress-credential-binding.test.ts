/**
 * Issue 19, item 3: the credential of an `--egress-header` rule goes only to the host it was
 * configured for. A guest that names another host — in the Host header, the TLS server name, an
 * absolute request target, or a second request on a kept-alive connection — gets a 421 that says
 * what mismatched, and the upstream receives nothing (on a shared-IP or CDN upstream, that request
 * would have handed the secret to another tenant). Each refusal is in the audit log. Names that are
 * one host written differently (case, trailing dot, IDN) still get the credential. Every attack runs
 * against the proxy in a process of its own run as root and as an unprivileged user (EgressRig.ts).
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { describeIf } from "../support/Requirements.js"
import { auditEntries, curl, holdsToken, proxyProcessAvailable, proxyProcessNeeds, type Rig, SECRET, startRig, tunnel } from "./EgressRig.js"
import { modes } from "./HostServer.js"

describeIf(proxyProcessAvailable, proxyProcessNeeds)("a credential reaches only the host it was configured for", () => {
  for (const mode of modes) {
    describe(`the proxy run as ${mode === "root" ? "root" : "an unprivileged user"}`, () => {
      let rig: Rig
      let api: string
      const request = (host: string, path = "/echo", extra = "") => `GET ${path} HTTP/1.1\r\nHost: ${host}\r\n${extra}\r\n`
      /** The requests that reached an upstream carrying the secret. */
      const carried = () => rig.upstreams.seen.filter((seen) => seen.headers.authorization === SECRET)

      beforeAll(async () => {
        rig = await startRig({
          mode,
          allow: ["api.test", "evil.test", "plain.test", "xn--bcher-kva.test"],
          pins: ["api.test=127.0.0.1", "evil.test=127.0.0.1", "plain.test=127.0.0.1", "bücher.test=127.0.0.1"],
          headers: ["api.test:Authorization=KT_SECRET", "bücher.test:Authorization=KT_SECRET"]
        })
        api = `api.test:${rig.upstreams.httpsPort}`
      }, 60_000)
      afterAll(() => rig?.close(), 30_000)

      it("a Host header naming another host is refused with 421, and nothing reaches the upstream", async () => {
        const before = rig.upstreams.seen.length
        for (const host of ["evil.test", `evil.test:${rig.upstreams.httpsPort}`, "api.test", `api.test:1`]) {
          const answer = await curl(rig, "-i", "-H", `Host: ${host}`, `https://${api}/echo`)
          assert.strictEqual(answer.code, 0, answer.err)
          assert.match(answer.out, /^HTTP\/1\.1 421 Misdirected Request/m, host)
          assert.include(answer.out, "the Host header names ", host)
          assert.include(answer.out, `this connection is to ${api} (CONNECT)`, host)
          assert.isFalse(holdsToken(answer.out))
        }
        assert.strictEqual(rig.upstreams.seen.length, before, "no request went upstream, with or without the secret")
      }, 60_000)

      it("a TLS server name (SNI) naming another host, or none, is refused with 421", async () => {
        const before = rig.upstreams.seen.length
        const other = await tunnel(rig, { connect: api, servername: "evil.test", requests: [request(api)] })
        assert.match(other, /^HTTP\/1\.1 421 Misdirected Request/)
        assert.include(other, `the TLS server name (SNI) is "evil.test"`)
        const none = await tunnel(rig, { connect: api, requests: [request(api)] })
        assert.match(none, /^HTTP\/1\.1 421 Misdirected Request/)
        assert.include(none, "the TLS handshake named no server (SNI)")
        assert.strictEqual(rig.upstreams.seen.length, before)
      }, 60_000)

      it("an absolute request target naming another host is refused with 421", async () => {
        const before = rig.upstreams.seen.length
        const absolute = await tunnel(rig, {
          connect: api,
          servername: "api.test",
          requests: [`GET https://evil.test:${rig.upstreams.httpsPort}/echo HTTP/1.1\r\nHost: ${api}\r\n\r\n`]
        })
        assert.match(absolute, /^HTTP\/1\.1 421 Misdirected Request/)
        assert.include(absolute, `the request target names evil.test:${rig.upstreams.httpsPort}`)
        const cleartext = await tunnel(rig, {
          connect: api,
          servername: "api.test",
          requests: [`GET http://${api}/echo HTTP/1.1\r\nHost: ${api}\r\n\r\n`]
        })
        assert.match(cleartext, /^HTTP\/1\.1 421 Misdirected Request/)
        assert.strictEqual(rig.upstreams.seen.length, before)
      }, 60_000)

      it("every request on a kept-alive intercepted connection is checked again", async () => {
        const before = carried().length
        const exchange = await tunnel(rig, {
          connect: api,
          servername: "api.test",
          requests: [request(api, "/first"), request("evil.test", "/second"), request(api, "/third")]
        })
        const statuses = [...exchange.matchAll(/^HTTP\/1\.1 (\d+)/gm)].map((match) => match[1])
        assert.deepStrictEqual(statuses, ["200", "421", "200"], exchange)
        const got = carried().slice(before)
        assert.deepStrictEqual(got.map((seen) => [seen.url, seen.headers.host, seen.servername]), [
          ["/first", api, "api.test"],
          ["/third", api, "api.test"]
        ])
      }, 60_000)

      it("one host written differently — case, trailing dot, IDN — still gets the credential, with the checked Host", async () => {
        const before = carried().length
        const spelled = await curl(rig, "-H", `Host: API.Test.:${rig.upstreams.httpsPort}`, `https://${api}/echo`)
        assert.strictEqual(spelled.code, 0, spelled.err)
        assert.strictEqual(JSON.parse(spelled.out).headers.host, api)
        const idn = await curl(rig, `https://bücher.test:${rig.upstreams.httpsPort}/echo`)
        assert.strictEqual(idn.code, 0, idn.err)
        const got = carried().slice(before)
        assert.deepStrictEqual(got.map((seen) => [seen.headers.host, seen.servername]), [
          [api, "api.test"],
          [`xn--bcher-kva.test:${rig.upstreams.httpsPort}`, "xn--bcher-kva.test"]
        ])
      }, 60_000)

      it("HTTP/2 is never negotiated on an intercepted connection, so there is no :authority to trust", async () => {
        const onlyH2 = await tunnel(rig, { connect: api, servername: "api.test", alpn: ["h2"], requests: [request(api)] })
        assert.match(onlyH2, /tls error .*no application protocol/)
        const before = carried().length
        const offered = await curl(rig, "--http2", "-sS", "-o", "/dev/null", "-w", "%{http_version} %{http_code}", `https://${api}/echo`)
        assert.strictEqual(offered.out, "1.1 200", offered.err)
        assert.strictEqual(carried().length, before + 1)
      }, 60_000)

      it("a plain-HTTP absolute URI is sent with its own Host, never the client's", async () => {
        const answer = await curl(rig, "-H", "Host: evil.test", `http://plain.test:${rig.upstreams.httpPort}/echo`)
        assert.strictEqual(answer.code, 0, answer.err)
        assert.strictEqual(JSON.parse(answer.out).headers.host, `plain.test:${rig.upstreams.httpPort}`)
        assert.isUndefined(JSON.parse(answer.out).headers.authorization)
      }, 60_000)

      it("every refusal is in the audit log, denied with status 421 and the reason, and without the secret", async () => {
        const entries = await auditEntries(rig, 9)
        const misdirected = entries.filter((entry) => entry.status === 421)
        assert.isAtLeast(misdirected.length, 9)
        for (const entry of misdirected) {
          assert.strictEqual(entry.decision, "denied")
          assert.strictEqual(entry.host, "api.test")
          assert.strictEqual(entry.intercepted, true)
          assert.include(entry.rule, "has an --egress-header rule")
          assert.isUndefined(entry.injected)
        }
        assert.isTrue(misdirected.some((entry) => /SNI\) is "evil\.test"/.test(entry.rule)))
        assert.isTrue(misdirected.some((entry) => /the Host header names evil\.test/.test(entry.rule)))
        assert.isFalse(holdsToken(JSON.stringify(entries)))
      }, 60_000)
    })
  }
})
