/**
 * The dashboard's end of the postMessage channel (src/dashboard/HostTransport.ts), with a stand-in
 * `window`: which messages reach the app, and where its own go. The browser test
 * (test/e2e/dashboard.test.ts) covers the same with real frames; this one reaches the origin pin,
 * which a real page cannot exercise on its own (only the parent window can post as the parent).
 */
import type { JSONRPCMessage } from "@modelcontextprotocol/client"
import { afterEach, assert, beforeEach, describe, it } from "vitest"
import { HostTransport } from "../../src/dashboard/HostTransport.js"

interface Sent {
  readonly message: unknown
  readonly target: string
}

const hostOrigin = "https://host.example"
const ping = { jsonrpc: "2.0", id: 1, method: "ping" } as const

describe("HostTransport", () => {
  let sent: Array<Sent>
  let received: Array<JSONRPCMessage>
  let dropped: number
  let host: Window
  let transport: HostTransport

  const deliver = (data: unknown, source: unknown, origin: string) =>
    window.dispatchEvent(Object.assign(new Event("message"), { data, source, origin }))

  beforeEach(async () => {
    ;(globalThis as { window?: unknown }).window = new EventTarget()
    sent = []
    received = []
    dropped = 0
    host = { postMessage: (message: unknown, target: string) => sent.push({ message, target }) } as unknown as Window
    transport = new HostTransport(host, (n) => {
      dropped = n
    })
    transport.onmessage = (message) => received.push(message)
    await transport.start()
  })

  afterEach(() => {
    delete (globalThis as { window?: unknown }).window
  })

  it("hands the app JSON-RPC messages from its parent window only", () => {
    deliver(ping, host, hostOrigin)
    deliver(ping, { postMessage: () => undefined }, hostOrigin) // a sibling frame of the host's origin
    deliver(ping, window, "null") // the app's own window
    deliver(ping, null, hostOrigin)
    assert.deepStrictEqual(received, [ping])
    assert.strictEqual(dropped, 3)
  })

  it("drops what is not JSON-RPC, even from the parent", () => {
    deliver({ jsonrpc: "1.0", id: 1, method: "ping" }, host, hostOrigin)
    deliver("ping", host, hostOrigin)
    deliver({ foreignDone: true }, host, hostOrigin)
    assert.deepStrictEqual(received, [])
    assert.strictEqual(dropped, 3)
  })

  it("pins the host's origin at its first message and sends only there", async () => {
    await transport.send({ jsonrpc: "2.0", id: 1, method: "ui/initialize", params: {} })
    deliver({ jsonrpc: "2.0", id: 1, result: {} }, host, hostOrigin)
    await transport.send({ jsonrpc: "2.0", method: "ui/notifications/initialized" })
    // the parent window, now of another origin (it navigated): not the host any more
    deliver(ping, host, "https://elsewhere.example")
    assert.deepStrictEqual(sent.map((s) => s.target), ["*", hostOrigin])
    assert.strictEqual(received.length, 1)
    assert.strictEqual(dropped, 1)
  })

  it("pins an opaque host origin too, but sends to \"*\" (\"null\" cannot be a target)", async () => {
    deliver(ping, host, "null")
    deliver(ping, host, "https://elsewhere.example")
    await transport.send({ jsonrpc: "2.0", id: 1, result: {} })
    assert.strictEqual(received.length, 1)
    assert.strictEqual(dropped, 1)
    assert.deepStrictEqual(sent.map((s) => s.target), ["*"])
  })

  it("stops listening when closed", async () => {
    let closed = false
    transport.onclose = () => {
      closed = true
    }
    await transport.close()
    deliver(ping, host, hostOrigin)
    assert.isTrue(closed)
    assert.deepStrictEqual(received, [])
  })
})
