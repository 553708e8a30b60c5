/** Where a credential may go: every request on an intercepted connection, and plain HTTP. */
import { assert, describe, it } from "@effect/vitest"
import { Either, Redacted } from "effect"
import * as CredentialBinding from "../../../src/layers/egress/CredentialBinding.js"
import * as EgressPolicy from "../../../src/layers/egress/EgressPolicy.js"
import * as HostPattern from "../../../src/layers/egress/HostPattern.js"

const at = (authority: string) => Either.getOrThrow(HostPattern.parseAuthority(authority, 443))
const check = (target: string, request: Partial<Omit<CredentialBinding.InterceptedRequest, "target">>) =>
  CredentialBinding.checkIntercepted({ target: at(target), sni: at(target).host, url: "/", host: undefined, ...request })
const refusal = (result: Either.Either<string, CredentialBinding.Refusal>) =>
  Either.isLeft(result) ? result.left : assert.fail(`expected a refusal, got ${JSON.stringify(result)}`)

describe("CredentialBinding", () => {
  it("lets a request through when SNI, target and Host name the CONNECT host, however they are written", () => {
    for (const host of [undefined, "api.test", "API.Test.", "api.test:443", "api.test.:443"]) {
      assert.deepStrictEqual(check("api.test:443", { host, sni: "Api.Test", url: "/v1?x=1" }), Either.right("/v1?x=1"), String(host))
    }
    assert.deepStrictEqual(check("api.test:8443", { host: "api.test:8443", url: "https://API.test:8443" }), Either.right("/"))
    assert.deepStrictEqual(check("api.test:443", { url: "https://api.test?q=1" }), Either.right("/?q=1"))
    assert.deepStrictEqual(check("xn--bcher-kva.test:443", { host: "bücher.test", sni: "xn--bcher-kva.test" }), Either.right("/"))
    assert.deepStrictEqual(check("api.test:443", { url: "*" }), Either.right("*"))
  })

  it("an address needs no SNI; a name does", () => {
    assert.isTrue(Either.isRight(check("[fd00::1]:443", { sni: false, host: "[fd00::1]" })))
    assert.isTrue(Either.isRight(check("10.1.2.3:443", { sni: null, host: "10.1.2.3:443" })))
    assert.include(refusal(check("api.test:443", { sni: false })).message, "named no server (SNI)")
    assert.include(refusal(check("api.test:443", { sni: "evil.test" })).message, `the TLS server name (SNI) is "evil.test"`)
  })

  it("a mismatch is a 421 naming what mismatched; an unreadable request is a 400", () => {
    const host = refusal(check("api.test:443", { host: "evil.test" }))
    assert.strictEqual(host.status, 421)
    assert.include(host.message, "the Host header names evil.test:443, but this connection is to api.test:443 (CONNECT)")
    assert.include(refusal(check("api.test:8443", { host: "api.test" })).message, "the Host header names api.test:443")
    assert.include(refusal(check("api.test:443", { url: "https://evil.test/x" })).message, "the request target names evil.test:443")
    assert.strictEqual(refusal(check("api.test:443", { url: "http://api.test/x" })).status, 421)
    for (const url of ["https://user@api.test/", "evil.test/x", "https://[::1/"]) assert.strictEqual(refusal(check("api.test:443", { url })).status, 400, url)
    assert.strictEqual(refusal(check("api.test:443", { host: "" })).status, 400)
    assert.include(refusal(check("api.test:443", { host: "x".repeat(500) })).message, "…")
  })

  it("refuses plain HTTP to a host with header rules, naming the headers, and lets others through", () => {
    const policy = Either.getOrThrow(EgressPolicy.make({
      allow: ["api.test", "other.test"],
      pins: [],
      headers: [{ spec: "api.test:X-Key=K", value: Redacted.make("v") }]
    }))
    const decide = (authority: string) => {
      const decision = EgressPolicy.decide(policy, at(authority))
      return decision._tag === "Allowed" ? CredentialBinding.plainRefusal(at(authority), decision.headers) : assert.fail("denied")
    }
    assert.include(decide("api.test:80"), "api.test:80 has an --egress-header rule (X-Key): its credential is sent only over HTTPS")
    assert.isUndefined(decide("other.test:80"))
  })
})
