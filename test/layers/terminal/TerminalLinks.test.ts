/**
 * The terminal page's links: signed with the server's key, for one process and session, watch or
 * control, and refused once expired or changed in any byte. On the TestClock.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as TestClock from "effect/TestClock"
import * as Links from "../../../src/layers/terminal/TerminalLinks.js"

const pageUrl = "http://127.0.0.1:7777/terminal"
const grant = { session: "s1", pid: "p3", computerId: "dev", control: false }
const tokenOf = (url: string) => url.slice(url.indexOf("#") + 1)

describe("terminal links", () => {
  it.effect("a link names the page and carries its grant in the fragment, until it expires", () =>
    Effect.gen(function*() {
      const links = Links.make(pageUrl)
      const { url, expires_at } = yield* links.issue(grant, 60_000)
      assert.isTrue(url.startsWith(`${pageUrl}#`))
      assert.strictEqual(expires_at, new Date(60_000).toISOString())
      const checked = yield* links.verify(tokenOf(url))
      assert.deepStrictEqual(checked, { ...grant, expiresAt: 60_000 })

      yield* TestClock.adjust("59 seconds")
      assert.strictEqual((yield* links.verify(tokenOf(url))).pid, "p3")
      yield* TestClock.adjust("1 second")
      const expired = yield* Effect.flip(links.verify(tokenOf(url)))
      assert.strictEqual(expired.message, "the link has expired")
    }))

  it.effect("a control link says so; a lifetime is capped at a day", () =>
    Effect.gen(function*() {
      const links = Links.make(pageUrl)
      const { url } = yield* links.issue({ ...grant, control: true }, 10 * Links.maxLifetimeMs)
      const checked = yield* links.verify(tokenOf(url))
      assert.isTrue(checked.control)
      assert.strictEqual(checked.expiresAt, Links.maxLifetimeMs)
    }))

  it.effect("a changed payload, a changed signature, another server's key and garbage are refused", () =>
    Effect.gen(function*() {
      const links = Links.make(pageUrl)
      const token = tokenOf((yield* links.issue(grant, 60_000)).url)
      const [payload, mac] = token.split(".") as [string, string]
      // watch → control, same signature
      const forged = Buffer.from(Buffer.from(payload, "base64url").toString("utf8").replace("\"watch\"", "\"control\"")).toString("base64url")
      const flipped = `${mac.slice(0, -2)}${mac.endsWith("A") ? "B" : "A"}${mac.slice(-1)}`
      const other = Links.make(pageUrl)
      const refusals = [
        yield* Effect.flip(links.verify(`${forged}.${mac}`)),
        yield* Effect.flip(links.verify(`${payload}.${flipped}`)),
        yield* Effect.flip(other.verify(token)),
        yield* Effect.flip(links.verify("")),
        yield* Effect.flip(links.verify(`${payload}.${mac}.x`)),
        yield* Effect.flip(links.verify("x".repeat(10_000)))
      ]
      assert.deepStrictEqual(refusals.map((r) => r.message), [
        "the link's signature does not match",
        "the link's signature does not match",
        "the link's signature does not match",
        "not a terminal link",
        "not a terminal link",
        "not a terminal link"
      ])
    }))
})
