/** The allowlist in E2B's and Modal's own words, and what they cannot carry refused with the reason. */
import { assert, describe, it } from "@effect/vitest"
import { Either, Redacted } from "effect"
import * as CloudEgress from "../../../src/layers/egress/CloudEgress.js"
import { createParams } from "../../../src/layers/backends/modal/ModalSdk.js"
import { defaultSettings, type EgressSettings } from "../../../src/services/Settings.js"

const settings = (overrides: Partial<EgressSettings>): EgressSettings => ({ ...defaultSettings.egress, ...overrides })
const left = <A>(result: Either.Either<A, string>) => (Either.isLeft(result) ? result.left : assert.fail(`accepted: ${JSON.stringify(result)}`))
const right = <A>(result: Either.Either<A, string>) => (Either.isRight(result) ? result.right : assert.fail(result.left))

describe("CloudEgress", () => {
  it("maps names, wildcards and addresses onto E2B's allowOut with everything else denied, and header rules onto transforms", () => {
    const network = right(CloudEgress.e2bNetwork(settings({
      allowHosts: ["pypi.org", "*.github.com", "10.0.0.5", "pypi.org"],
      headers: [
        { rule: "api.github.com:Authorization=GH", value: Redacted.make("Bearer t") },
        { rule: "api.github.com:443:X-Org=ORG", value: Redacted.make("kiln") }
      ]
    })))
    assert.deepStrictEqual(network, {
      allowOut: ["pypi.org", "*.github.com", "10.0.0.5"],
      denyOut: [CloudEgress.ALL_TRAFFIC],
      rules: { "api.github.com": [{ transform: { headers: { Authorization: "Bearer t", "X-Org": "kiln" } } }] }
    })
    assert.isUndefined(right(CloudEgress.e2bNetwork(settings({ allowHosts: [] }))))
    assert.isUndefined(right(CloudEgress.e2bNetwork(settings({ allowHosts: ["*"] }))), "* restricts nothing")
  })

  it("refuses on E2B what its rules cannot carry", () => {
    assert.include(left(CloudEgress.e2bNetwork(settings({ allowHosts: ["pypi.org:8443"] }))), "cannot restrict a port")
    assert.include(left(CloudEgress.e2bNetwork(settings({ allowHosts: ["a.test"], resolve: ["a.test=10.0.0.1"] }))), "--egress-resolve")
    assert.include(left(CloudEgress.e2bNetwork(settings({ allowHosts: ["a.test"], upstreamCaFiles: ["/ca.pem"] }))), "--egress-ca-file")
    assert.include(
      left(CloudEgress.e2bNetwork(settings({ allowHosts: ["a.test"], headers: [{ rule: "a.test:8080:X=V", value: Redacted.make("v") }] }))),
      "ports 80 and 443 only"
    )
  })

  it("refuses E2B header rules its API refuses: a *.x name, an address, more than 10 names, oversized headers", () => {
    const header = (rule: string, value = "v") => ({ rule, value: Redacted.make(value) })
    const withHeaders = (...headers: Array<ReturnType<typeof header>>) =>
      CloudEgress.e2bNetwork(settings({ allowHosts: ["*.github.com", "10.0.0.5", ...headers.map((h) => h.rule.split(":")[0]!)], headers }))
    assert.include(left(withHeaders(header("*.github.com:Authorization=GH"))), "--egress-header *.github.com: E2B's header rules take exact names")
    assert.include(left(withHeaders(header("10.0.0.5:Authorization=GH"))), "--egress-header 10.0.0.5: E2B's header rules take names, not addresses")
    const eleven = Array.from({ length: 11 }, (_, i) => header(`h${i}.example.com:X-Key=K`))
    assert.include(left(withHeaders(...eleven)), "E2B takes header rules for at most 10 names, got 11")
    assert.include(left(withHeaders(header(`a.test:X-${"n".repeat(63)}=K`))), "header names of at most 64 characters")
    assert.include(left(withHeaders(header("a.test:X-Key=K", "v".repeat(2049)))), "values of at most 2048 characters")
    const ten = right(withHeaders(...eleven.slice(0, 10)))
    assert.strictEqual(Object.keys(ten?.rules ?? {}).length, 10)
  })

  it("maps names onto Modal's domain allowlist and addresses onto its CIDR allowlist, and refuses header rules", () => {
    const outbound = right(CloudEgress.modalOutbound(settings({ allowHosts: ["pypi.org", "*.github.com", "10.0.0.5", "2001:db8::1"] })))
    assert.deepStrictEqual(outbound, { domains: ["pypi.org", "*.github.com"], cidrs: ["10.0.0.5/32", "2001:db8::1/128"] })
    assert.isUndefined(right(CloudEgress.modalOutbound(settings({ allowHosts: ["*"] }))))
    assert.include(
      left(CloudEgress.modalOutbound(settings({ allowHosts: ["a.test"], headers: [{ rule: "a.test:X=V", value: Redacted.make("v") }] }))),
      "--egress-header cannot be carried by Modal"
    )
    assert.include(left(CloudEgress.modalOutbound(settings({ allowHosts: ["a.test:443"] }))), "cannot restrict a port")
    // What Modal would answer "Invalid CIDR" to is refused where the pattern is read (HostPattern.ts).
    assert.include(left(CloudEgress.modalOutbound(settings({ allowHosts: ["*.10.0.0.1"] }))), "a wildcard applies to names, not addresses")
  })

  it("gives Modal's SDK an allowlist, never together with blockNetwork", () => {
    const request = {
      appName: "a", image: "debian:bookworm-slim", cpu: 1, memoryMiB: 512, gpu: undefined, region: undefined,
      timeoutMs: 60_000, name: "kilntainer-x", tags: {}
    }
    const params = createParams({ ...request, blockNetwork: false, outbound: { domains: ["pypi.org"], cidrs: [] } })
    assert.deepStrictEqual(params.outboundDomainAllowlist, ["pypi.org"])
    assert.deepStrictEqual(params.outboundCidrAllowlist, [], "an empty CIDR list still makes it an allowlist")
    assert.isFalse(params.blockNetwork)
    const blocked = createParams({ ...request, blockNetwork: true })
    assert.isUndefined(blocked.outboundDomainAllowlist)
  })
})
