/**
 * "Also seen" in issue 19: `::127.0.0.1` and `::ffff:0:7f00:1` were not on the address blocklist.
 * A destination reached through a wildcard (`*`, `*.parent`) must never be a loopback, private,
 * link-local or unspecified address in any IPv6 spelling that carries one: IPv4-compatible,
 * IPv4-mapped, IPv4-translated, NAT64 and 6to4 — whether the request names the address itself
 * or DNS answers it for a name. Each is refused with the 403 that says so, and nothing is
 * connected to. (An address the operator names — an exact `--allow-host` or an `--egress-resolve`
 * pin — is reachable by design, private or not.)
 */
import { Effect } from "effect"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as EgressPolicy from "../../src/layers/egress/EgressPolicy.js"
import { auditEntries, curl, type Rig, startRig } from "./EgressRig.js"

/** Loopback, private, link-local and unspecified addresses written as IPv6 forms that embed them. */
const HIDDEN = [
  "::127.0.0.1",
  "::7f00:1",
  "::ffff:0:7f00:1",
  "::ffff:127.0.0.1",
  "0:0:0:0:0:ffff:7f00:1",
  "0000:0000:0000:0000:0000:FFFF:7F00:0001",
  "::ffff:0:127.0.0.1",
  "::ffff:10.1.2.3",
  "::ffff:a9fe:a9fe",
  "::a9fe:a9fe",
  "::ffff:0.0.0.0",
  "::0.0.0.0",
  "64:ff9b::127.0.0.1",
  "64:ff9b::a9fe:a9fe",
  "64:ff9b:1::7f00:1",
  "2002:7f00:1::",
  "2002:7f00:0001::1",
  "2002:a9fe:a9fe::",
  "2002:c0a8:0101::",
  "2002:0a00:0001:1::1",
  "2001:0:7f00:1::"
]

describe("the address blocklist holds in every IPv6 spelling of a blocked IPv4 address", () => {
  it("classifies every embedded form of a blocked address as not public, and public ones as public", () => {
    for (const address of HIDDEN) assert.isFalse(EgressPolicy.isPublicAddress(address), address)
    for (const address of ["1.1.1.1", "::ffff:1.1.1.1", "::ffff:101:101", "2002:101:101::1", "2606:4700::1111"]) {
      assert.isTrue(EgressPolicy.isPublicAddress(address), address)
    }
  })

  describe("through the proxy", () => {
    let rig: Rig
    const dnsAnswers = new Map<string, string>()

    beforeAll(async () => {
      HIDDEN.forEach((address, index) => dnsAnswers.set(`h${index}.corp.test`, address))
      rig = await startRig({
        allow: ["*"],
        lookup: (host) => {
          const address = dnsAnswers.get(host)
          return address === undefined ? Effect.fail("no such name") : Effect.succeed([address])
        }
      })
    }, 60_000)
    afterAll(() => rig?.close(), 30_000)

    it("a request that names such an address itself is refused, over plain HTTP and CONNECT", async () => {
      const before = rig.upstreams.connections()
      for (const address of HIDDEN) {
        const plain = await curl(rig, "-i", `http://[${address}]:${rig.upstreams.httpPort}/`)
        assert.match(plain.out, /^HTTP\/1\.1 403 /, `${address}: ${plain.out}${plain.err}`)
        assert.include(plain.out, "is not a public address", address)
        const secure = await curl(rig, `https://[${address}]:${rig.upstreams.httpsPort}/`)
        assert.notStrictEqual(secure.code, 0, address)
        assert.include(secure.err, "403", address)
      }
      assert.strictEqual(rig.upstreams.connections(), before, "nothing was connected to")
    }, 120_000)

    it("a name DNS answers with such an address is refused", async () => {
      const before = rig.upstreams.connections()
      for (const [name, address] of dnsAnswers) {
        const plain = await curl(rig, "-i", `http://${name}:${rig.upstreams.httpPort}/`)
        assert.match(plain.out, /^HTTP\/1\.1 403 /, `${name} → ${address}: ${plain.out}${plain.err}`)
        assert.include(plain.out, `resolves to ${address}, which is not a public address`)
      }
      assert.strictEqual(rig.upstreams.connections(), before)
      const entries = await auditEntries(rig, HIDDEN.length * 3)
      assert.isTrue(entries.every((entry) => entry.decision === "denied"), JSON.stringify(entries.filter((entry) => entry.decision !== "denied")))
    }, 120_000)
  })

  describe("an address the operator pins", () => {
    let rig: Rig

    beforeAll(async () => {
      rig = await startRig({
        allow: ["*.corp.test"],
        pins: ["pinned.corp.test=::ffff:127.0.0.1"],
        lookup: (host) => (host === "rebind.corp.test" ? Effect.succeed(["::ffff:0:7f00:1"]) : Effect.fail("no such name"))
      })
    }, 60_000)
    afterAll(() => rig?.close(), 30_000)

    it("is reached as named, while a wildcard name DNS points at loopback is not", async () => {
      const pinned = await curl(rig, `http://pinned.corp.test:${rig.upstreams.httpPort}/pinned`)
      assert.strictEqual(pinned.out, `hello pinned.corp.test:${rig.upstreams.httpPort} /pinned\n`, pinned.err)
      const rebound = await curl(rig, "-i", `http://rebind.corp.test:${rig.upstreams.httpPort}/`)
      assert.match(rebound.out, /^HTTP\/1\.1 403 /)
      assert.include(rebound.out, "resolves to ::ffff:0:7f00:1, which is not a public address")
    }, 60_000)
  })
})
