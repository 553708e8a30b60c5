/**
 * Issue 19, item 4: an injected credential never travels in clear text. A plain-HTTP request to a
 * host that has an `--egress-header` rule — an `http://` URL, an origin-form request with only a
 * Host header, or the plain-HTTP leg of an https→http redirect on the same host — is refused with
 * a 403 that says why, recorded in the audit log as denied, and never forwarded: not with the
 * secret, and not without it either (the client sees the mistake instead of a silent 401). Every
 * attack runs against the proxy in a process of its own run as root and as an unprivileged user.
 */
import { connect } from "node:net"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { describeIf } from "../support/Requirements.js"
import { auditEntries, curl, holdsToken, proxyProcessAvailable, proxyProcessNeeds, type Rig, SECRET, startRig } from "./EgressRig.js"
import { modes } from "./HostServer.js"

describeIf(proxyProcessAvailable, proxyProcessNeeds)("a credential is never sent over plain HTTP", () => {
  for (const mode of modes) {
    describe(`the proxy run as ${mode === "root" ? "root" : "an unprivileged user"}`, () => {
      let rig: Rig
      const plainSeen = () => rig.upstreams.seen.filter((seen) => seen.scheme === "http")

      beforeAll(async () => {
        rig = await startRig({
          mode,
          allow: ["api.test", "other.test"],
          pins: ["api.test=127.0.0.1", "other.test=127.0.0.1"],
          headers: ["api.test:Authorization=KT_SECRET"]
        })
      }, 60_000)
      afterAll(() => rig?.close(), 30_000)

      it("an http:// URL to the credential's host is refused with a 403 that says to use HTTPS", async () => {
        const before = rig.upstreams.connections()
        for (const extra of [[], ["-H", "Host: evil.test"], ["-X", "POST", "--data", "x=1"]]) {
          const answer = await curl(rig, "-i", ...extra, `http://api.test:${rig.upstreams.httpPort}/echo`)
          assert.strictEqual(answer.code, 0, answer.err)
          assert.match(answer.out, /^HTTP\/1\.1 403 Forbidden/, extra.join(" "))
          assert.include(answer.out, "x-kilntainers-egress: denied")
          assert.include(answer.out, `api.test:${rig.upstreams.httpPort} has an --egress-header rule (Authorization): its credential is sent only over HTTPS`)
          assert.include(answer.out, "use https://api.test")
        }
        assert.strictEqual(rig.upstreams.connections(), before, "nothing was forwarded, with or without the secret")
      }, 60_000)

      it("an origin-form request naming the host only in Host is refused the same way", async () => {
        const before = rig.upstreams.connections()
        const answer = await new Promise<string>((resolve) => {
          const socket = connect(rig.port, "127.0.0.1", () =>
            socket.write(`GET /echo HTTP/1.1\r\nHost: API.test.:${rig.upstreams.httpPort}\r\nConnection: close\r\n\r\n`))
          let text = ""
          socket.on("data", (chunk: Buffer) => (text += chunk.toString("latin1")))
          socket.on("close", () => resolve(text))
          socket.on("error", () => resolve(text))
        })
        assert.match(answer, /^HTTP\/1\.1 403 Forbidden/)
        assert.include(answer, "its credential is sent only over HTTPS")
        assert.strictEqual(rig.upstreams.connections(), before)
      }, 60_000)

      it("an https→http redirect on the same host cannot carry it: the plain leg is refused", async () => {
        const before = plainSeen().length
        const followed = await curl(rig, "-i", "-L", `https://api.test:${rig.upstreams.httpsPort}/redirect-http`)
        assert.strictEqual(followed.code, 0, followed.err)
        assert.match(followed.out, /^HTTP\/1\.1 302 /m, "the redirect itself came back")
        assert.match(followed.out, /^HTTP\/1\.1 403 Forbidden/m, "its plain-HTTP target was refused")
        assert.include(followed.out, "its credential is sent only over HTTPS")
        assert.strictEqual(plainSeen().length, before, "the plain-HTTP upstream saw nothing")
        const https = rig.upstreams.seen.filter((seen) => seen.url === "/redirect-http")
        assert.deepStrictEqual(https.map((seen) => [seen.scheme, seen.headers.authorization]), [["https", SECRET]])
      }, 60_000)

      it("a host without a rule is still reached over plain HTTP, without any credential", async () => {
        const answer = await curl(rig, `http://other.test:${rig.upstreams.httpPort}/echo`)
        assert.strictEqual(answer.code, 0, answer.err)
        assert.isUndefined(JSON.parse(answer.out).headers.authorization)
        assert.isTrue(plainSeen().every((seen) => seen.headers.authorization === undefined), "no plain-HTTP request ever carried it")
      }, 60_000)

      it("each refusal is in the audit log as denied, saying the credential goes only over HTTPS", async () => {
        const entries = await auditEntries(rig, 5)
        const refused = entries.filter((entry) => entry.host === "api.test" && entry.port === rig.upstreams.httpPort)
        assert.strictEqual(refused.length, 5, JSON.stringify(entries))
        for (const entry of refused) {
          assert.strictEqual(entry.decision, "denied")
          assert.strictEqual(entry.status, 403)
          assert.include(entry.rule, "its credential is sent only over HTTPS")
          assert.isUndefined(entry.injected)
        }
        assert.isFalse(holdsToken(JSON.stringify(entries)))
      }, 60_000)
    })
  }
})
