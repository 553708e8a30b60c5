/** The egress policy: decisions by name, pins, header rules, and private destinations only when named. */
import { assert, describe, it } from "@effect/vitest"
import { Either, Redacted } from "effect"
import * as EgressPolicy from "../../../src/layers/egress/EgressPolicy.js"
import * as HostPattern from "../../../src/layers/egress/HostPattern.js"

const policy = (input: Partial<Parameters<typeof EgressPolicy.make>[0]>) =>
  Either.getOrThrow(EgressPolicy.make({ allow: [], pins: [], headers: [], ...input }))
const at = (authority: string) => Either.getOrThrow(HostPattern.parseAuthority(authority, 443))
const left = <A>(either: Either.Either<A, string>) => Either.isLeft(either) ? either.left : assert.fail("expected a refusal")

describe("EgressPolicy", () => {
  it("denies what no rule covers, naming the flag that would allow it", () => {
    const decision = EgressPolicy.decide(policy({ allow: ["pypi.org"] }), at("evil.example.com:443"))
    assert.strictEqual(decision._tag, "Denied")
    if (decision._tag === "Denied") {
      assert.include(decision.reason, "evil.example.com:443 is not on the egress allowlist")
      assert.include(decision.reason, "--allow-host evil.example.com")
      assert.include(decision.reason, "'*.example.com'")
    }
  })

  it("allows by the most precise rule and lists the header rules that apply", () => {
    const p = policy({
      allow: ["*.github.com", "api.github.com", "pypi.org"],
      headers: [{ spec: "api.github.com:Authorization=GH", value: Redacted.make("Bearer s3cret") }]
    })
    const api = EgressPolicy.decide(p, at("api.github.com:443"))
    assert.strictEqual(api._tag, "Allowed")
    if (api._tag === "Allowed") {
      assert.strictEqual(api.rule, "api.github.com")
      assert.isTrue(api.named)
      assert.deepStrictEqual(api.headers.map((rule) => [rule.header, rule.variable]), [["Authorization", "GH"]])
    }
    const raw = EgressPolicy.decide(p, at("raw.github.com:443"))
    assert.strictEqual(raw._tag === "Allowed" && raw.rule, "*.github.com")
    assert.strictEqual(raw._tag === "Allowed" && raw.headers.length, 0)
  })

  it("reads pins and refuses malformed ones", () => {
    const p = policy({ allow: ["*.corp.test"], pins: ["Git.Corp.Test=10.1.2.3", "v6.corp.test=[fd00::1]"] })
    assert.strictEqual(p.pins.get("git.corp.test"), "10.1.2.3")
    assert.strictEqual(p.pins.get("v6.corp.test"), "fd00::1")
    for (const bad of ["git.corp.test", "=1.2.3.4", "git.corp.test=not-an-ip", "1.2.3.4=5.6.7.8"]) {
      assert.isTrue(Either.isLeft(EgressPolicy.parsePin(bad)), bad)
    }
  })

  it("reads header rules, with a port in the pattern, and refuses framing headers and inline values", () => {
    const rule = Either.getOrThrow(EgressPolicy.parseHeaderRule("api.github.com:443:Authorization=GITHUB_AUTH"))
    assert.strictEqual(rule.pattern.text, "api.github.com:443")
    assert.strictEqual(rule.header, "Authorization")
    assert.strictEqual(rule.variable, "GITHUB_AUTH")
    assert.include(left(EgressPolicy.parseHeaderRule("api.github.com:Host=X")), "does not set 'Host'")
    assert.include(left(EgressPolicy.parseHeaderRule("api.github.com:Authorization=Bearer abc")), "not an environment variable name")
    assert.include(left(EgressPolicy.parseHeaderRule("Authorization=X")), "expected PATTERN:Header-Name=ENV_VAR")
    assert.include(
      left(EgressPolicy.make({ allow: ["x.test"], pins: [], headers: [{ spec: "x.test:X-Key=K", value: Redacted.make("a\r\nb") }] })),
      "the value of K contains a line break"
    )
  })

  it("a private address is reached only when the user named it", () => {
    const p = policy({ allow: ["*", "*.corp.test", "named.test", "10.9.9.9"], pins: ["pinned.corp.test=10.0.0.7"] })
    const check = (authority: string, address: string) => {
      const target = at(authority)
      const decision = EgressPolicy.decide(p, target)
      assert.strictEqual(decision._tag, "Allowed")
      return decision._tag === "Allowed" ? EgressPolicy.checkAddress(decision, target, address) : Either.left("denied")
    }
    assert.include(left(check("rebind.corp.test:443", "127.0.0.1")), "resolves to 127.0.0.1, which is not a public address")
    assert.include(left(check("169.254.169.254:80", "169.254.169.254")), "must be named exactly")
    assert.include(left(check("[::ffff:127.0.0.1]:80", "::ffff:7f00:1")), "not a public address")
    assert.isTrue(Either.isRight(check("pinned.corp.test:443", "10.0.0.7")))
    assert.isTrue(Either.isRight(check("named.test:443", "192.168.1.1")))
    assert.isTrue(Either.isRight(check("10.9.9.9:22", "10.9.9.9")))
    assert.isTrue(Either.isRight(check("public.example:443", "93.184.215.14")))
  })

  it("classifies addresses", () => {
    for (const address of ["127.0.0.1", "10.1.1.1", "172.20.0.1", "192.168.0.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fd00::1", "::ffff:10.0.0.1", "::7f00:1", "::ffff:0:7f00:1", "2002:7f00:1::", "fe80::1%eth0", "not-an-address"]) {
      assert.isFalse(EgressPolicy.isPublicAddress(address), address)
    }
    for (const address of ["1.1.1.1", "93.184.215.14", "2606:4700::1111", "::ffff:1.1.1.1", "2002:101:101::"]) assert.isTrue(EgressPolicy.isPublicAddress(address), address)
  })
})
