import { assert, describe, it } from "@effect/vitest"
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js"
import { Duration, Effect, Exit, Option, Scope, TestClock } from "effect"
import * as HttpSessions from "../../../src/layers/mcp/HttpSessions.js"

/** A registry whose sessions run until interrupted, recording which ended. */
const registry = (maxSessions = 10, maxSessionsPerPrincipal = maxSessions) =>
  Effect.gen(function*() {
    const ended: Array<string> = []
    const transports = new Map<string, Transport>()
    const sessions = yield* HttpSessions.make({
      idleTimeout: Duration.seconds(60),
      maxSessions,
      maxSessionsPerPrincipal,
      serve: (transport, id, onConnected) =>
        Effect.promise(() => transport.start()).pipe(
          Effect.tap(() => transports.set(id, transport)),
          Effect.zipRight(onConnected),
          Effect.zipRight(Effect.never),
          Effect.ensuring(Effect.sync(() => ended.push(id)))
        )
    })
    return { sessions, ended, transports }
  })

describe("HttpSessions", () => {
  it.scoped("closes a session idle for the timeout, not before", () =>
    Effect.gen(function*() {
      const { ended, sessions } = yield* registry()
      const session = yield* sessions.open("alice")
      yield* TestClock.adjust("59 seconds")
      assert.isTrue(Option.isSome(sessions.get(session.id)))
      yield* sessions.touch(session)
      yield* TestClock.adjust("59 seconds")
      assert.deepStrictEqual(ended, [])
      yield* TestClock.adjust("16 seconds")
      assert.deepStrictEqual(ended, [session.id])
      assert.isTrue(Option.isNone(sessions.get(session.id)))
      assert.strictEqual(yield* sessions.size, 0)
    }))

  it.scoped("a request in progress keeps its session open; idleness counts from its answer or cancellation", () =>
    Effect.gen(function*() {
      const { ended, sessions, transports } = yield* registry()
      const session = yield* sessions.open("alice")
      // Requests arrive through the HTTP transport; answers leave through the one the server sees.
      const arrive = session.transport.onmessage!
      const server = transports.get(session.id)!
      arrive({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "wait" } })
      arrive({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "wait" } })
      yield* TestClock.adjust("10 minutes")
      assert.deepStrictEqual(ended, [])
      // One is answered (the HTTP stream is gone, so the transport cannot deliver it), one cancelled.
      yield* Effect.promise(() => server.send({ jsonrpc: "2.0", id: 1, result: {} }).catch(() => undefined))
      yield* TestClock.adjust("10 minutes")
      assert.deepStrictEqual(ended, [], "one request is still in progress")
      arrive({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 2 } })
      yield* TestClock.adjust("59 seconds")
      assert.deepStrictEqual(ended, [])
      yield* TestClock.adjust("16 seconds")
      assert.deepStrictEqual(ended, [session.id])
    }))

  it.scoped("refuses a session over the maximum", () =>
    Effect.gen(function*() {
      const { sessions } = yield* registry(2)
      yield* sessions.open("alice")
      yield* sessions.open("alice")
      const refused = yield* Effect.flip(sessions.open("alice"))
      assert.strictEqual(refused._tag, "TooManySessions")
      assert.match(refused.message, /too many MCP sessions \(2\)/)
    }))

  it.scoped("a principal at its cap is refused while another still gets sessions, and gets one again once hers end", () =>
    Effect.gen(function*() {
      const { ended, sessions } = yield* registry(4, 2)
      const first = yield* sessions.open("alice")
      const second = yield* sessions.open("alice")
      const refused = yield* Effect.flip(sessions.open("alice"))
      assert.strictEqual(refused.principal, "alice")
      assert.match(refused.message, /too many MCP sessions for alice \(2, its cap\)/)
      const bob = yield* sessions.open("bob")
      assert.strictEqual(bob.principal, "bob")
      yield* sessions.open("bob")
      assert.strictEqual(yield* sessions.size, 4)
      // Her sessions idle out: her slots are free again.
      yield* TestClock.adjust("75 seconds")
      assert.includeMembers(ended, [first.id, second.id])
      const again = yield* sessions.open("alice")
      assert.strictEqual(again.principal, "alice")
    }))

  it.effect("closing the registry ends every session", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const { ended, sessions } = yield* Scope.extend(registry(), scope)
      const one = yield* sessions.open("alice")
      const two = yield* sessions.open("alice")
      yield* Scope.close(scope, Exit.void)
      assert.sameMembers(ended, [one.id, two.id])
    }))
})
