/**
 * The proxy over a Duplex pair — the shape the relay hands it — with time on the TestClock: a
 * connection that never sends a request head, and one that goes idle after a request, are closed
 * when the Clock says so, not before.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Fiber, TestClock } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Duplex } from "node:stream"
import { afterAll } from "vitest"
import type { EgressEvent } from "../../../src/services/AuditLog.js"
import * as EgressPolicy from "../../../src/layers/egress/EgressPolicy.js"
import * as EgressProxy from "../../../src/layers/egress/EgressProxy.js"
import * as Upstreams from "./Upstreams.js"

const dir = mkdtempSync(join(tmpdir(), "kt-egress-clock-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** Two connected Duplex ends (Node 20 has no stream.duplexPair). */
const duplexPair = (): readonly [Duplex, Duplex] => {
  const ends: Array<Duplex> = []
  const make = (other: () => Duplex) =>
    new Duplex({
      read() {},
      write(chunk, _encoding, done) {
        other().push(chunk)
        done()
      },
      final(done) {
        other().push(null)
        done()
      }
    })
  ends.push(make(() => ends[1]!), make(() => ends[0]!))
  return [ends[0]!, ends[1]!]
}

const limits = { ...EgressProxy.defaultLimits, headTimeoutMs: 10_000, idleTimeoutMs: 60_000 }

const proxy = (events: Array<EgressEvent>) =>
  EgressProxy.make({
    policy: Either.getOrThrow(EgressPolicy.make({ allow: ["good.test"], pins: ["good.test=127.0.0.1"], headers: [] })),
    ca: undefined,
    upstreamCa: [],
    audit: (event) => Effect.sync(() => void events.push(event)),
    limits
  })

const readUntil = (socket: Duplex, marker: string) =>
  Effect.async<string>((resume) => {
    let text = ""
    const onData = (data: Buffer) => {
      text += data.toString("latin1")
      if (text.includes(marker)) {
        socket.off("data", onData)
        resume(Effect.succeed(text))
      }
    }
    socket.on("data", onData)
  })

describe("the egress proxy's clock", () => {
  it.scoped("a connection that sends no request head is closed at the head timeout, not before", () =>
    Effect.gen(function*() {
      const [client, server] = duplexPair()
      const served = yield* Effect.fork((yield* proxy([])).serve("c", server))
      yield* TestClock.adjust(limits.headTimeoutMs - 1)
      assert.isNull(served.unsafePoll())
      yield* TestClock.adjust(1)
      yield* Fiber.join(served)
      assert.isTrue(server.destroyed)
      client.destroy()
    }))

  it.scoped("a kept-alive connection is served through the Duplex, then closed after one to two idle periods", () =>
    Effect.gen(function*() {
      const upstreams = yield* Upstreams.start(join(dir, "idle"))
      const events: Array<EgressEvent> = []
      const [client, server] = duplexPair()
      const served = yield* Effect.fork((yield* proxy(events)).serve("c", server))
      client.write(`GET http://good.test:${upstreams.httpPort}/duplex HTTP/1.1\r\nHost: good.test:${upstreams.httpPort}\r\n\r\n`)
      const response = yield* readUntil(client, "/duplex\n")
      assert.match(response, /^HTTP\/1.1 200 OK/)
      assert.include(response, `hello good.test:${upstreams.httpPort} /duplex`)
      yield* TestClock.adjust(limits.headTimeoutMs + limits.idleTimeoutMs - 1)
      assert.isNull(served.unsafePoll(), "still open within the first idle period")
      yield* TestClock.adjust(limits.idleTimeoutMs + 1)
      yield* Fiber.join(served)
      assert.isTrue(server.destroyed)
      assert.deepStrictEqual(events.map((event) => [event.method, event.decision, event.status]), [["GET", "allowed", 200]])
    }))
})
