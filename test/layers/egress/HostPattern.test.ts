/** Host patterns: what `--allow-host` accepts, how it matches, and what it refuses to read. */
import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import * as HostPattern from "../../../src/layers/egress/HostPattern.js"

const parsed = (text: string) => Either.getOrThrow(HostPattern.parse(text))
const target = (authority: string, port = 443) => Either.getOrThrow(HostPattern.parseAuthority(authority, port))
const allows = (pattern: string, authority: string) => HostPattern.matches(parsed(pattern), target(authority))

describe("HostPattern", () => {
  it("reads names, wildcards, '*', addresses and ports into a canonical text", () => {
    assert.strictEqual(parsed("Example.COM.").text, "example.com")
    assert.strictEqual(parsed("*.Example.com:8443").text, "*.example.com:8443")
    assert.strictEqual(parsed("*").text, "*")
    assert.strictEqual(parsed("*:443").text, "*:443")
    assert.strictEqual(parsed("bücher.de").text, "xn--bcher-kva.de")
    assert.strictEqual(parsed("[::1]:8080").text, "[::1]:8080")
    assert.strictEqual(parsed("::1").text, "[::1]")
    assert.strictEqual(parsed("10.0.0.1:80").text, "10.0.0.1:80")
  })

  it("refuses what is not a pattern, saying why", () => {
    for (const bad of ["", "https://example.com", "example.com/path", "a.*.com", "foo*.com", "*.", "example.com:0", "example.com:99999", "example.com:x", "*.10.0.0.1", "a b.com", "-a.com"]) {
      const result = HostPattern.parse(bad)
      assert.isTrue(Either.isLeft(result), `'${bad}' must be refused`)
    }
    assert.include(Either.getLeft(HostPattern.parse("https://pypi.org")).pipe((o) => o._tag === "Some" ? o.value : ""), "write only the host")
  })

  it("an exact name matches itself on any port, and only itself", () => {
    assert.isTrue(allows("pypi.org", "pypi.org:443"))
    assert.isTrue(allows("pypi.org", "PYPI.org.:8080"))
    assert.isFalse(allows("pypi.org", "files.pypi.org:443"))
    assert.isFalse(allows("pypi.org", "pypi.org.evil.com:443"))
    assert.isFalse(allows("pypi.org", "evilpypi.org:443"))
  })

  it("'*.example.com' matches every subdomain but not the parent", () => {
    assert.isTrue(allows("*.example.com", "a.example.com:443"))
    assert.isTrue(allows("*.example.com", "a.b.example.com:443"))
    assert.isFalse(allows("*.example.com", "example.com:443"))
    assert.isFalse(allows("*.example.com", "badexample.com:443"))
  })

  it("a port restricts the pattern to that port", () => {
    assert.isTrue(allows("example.com:443", "example.com:443"))
    assert.isFalse(allows("example.com:443", "example.com:80"))
    assert.isTrue(allows("*:443", "anything.net:443"))
    assert.isFalse(allows("*:443", "anything.net:22"))
  })

  it("'*' really means every host, names and addresses", () => {
    assert.isTrue(allows("*", "anything.example:443"))
    assert.isTrue(allows("*", "1.2.3.4:80"))
  })

  it("addresses are compared canonically and never match a name pattern", () => {
    assert.isTrue(allows("127.0.0.1", "2130706433:80"))
    assert.isTrue(allows("127.0.0.1", "0x7f.1:80"))
    assert.isFalse(allows("*.localdomain", "127.0.0.1:80"))
    assert.isFalse(allows("localhost", "127.0.0.1:80"))
    assert.isTrue(allows("[::1]", "[0:0::1]:80"))
  })

  it("reads a proxy request's authority with its default port", () => {
    assert.deepStrictEqual(target("Example.com", 80), { host: "example.com", port: 80 })
    assert.deepStrictEqual(target("[::1]:8443"), { host: "::1", port: 8443 })
    assert.isTrue(Either.isLeft(HostPattern.parseAuthority("example.com", undefined)))
    assert.isTrue(Either.isLeft(HostPattern.parseAuthority("*.example.com:443", undefined)))
  })
})
