// KubeApi's own transport: a keep-alive socket the server dropped while idle costs one resend,
// not a failed create (seen at 1000 computers: "read ECONNRESET" on the claim's POST), and so does
// a fresh connection a loaded server dropped before answering ("socket hang up"), a bounded number
// of times.
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll } from "vitest"
import * as KubeApi from "../../../../src/layers/backends/kubernetes/KubeApi.js"

let server: Server
let dir: string
let kubeconfig: string
const seen = new WeakMap<Socket, number>()
let requests = 0
let dropped = 0
/** Paths the server drops unanswered, on any socket, this many more times. */
const drops = new Map<string, number>()

beforeAll(async () => {
  // Answers the first request on each socket, keeping it alive; drops the socket unanswered at
  // its second, as a server closing an idle connection just as the client reuses it.
  server = createServer((request: IncomingMessage, response: ServerResponse) => {
    requests++
    const left = drops.get(request.url ?? "") ?? 0
    if (left > 0) {
      drops.set(request.url ?? "", left - 1)
      dropped++
      request.socket.destroy()
      return
    }
    const count = (seen.get(request.socket) ?? 0) + 1
    seen.set(request.socket, count)
    if (count > 1) {
      dropped++
      request.socket.destroy()
      return
    }
    request.resume()
    request.on("end", () => {
      response.setHeader("content-type", "application/json")
      response.end(JSON.stringify({ kind: "Status", path: request.url }))
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  dir = mkdtempSync(join(tmpdir(), "kt-kubeapi-"))
  kubeconfig = join(dir, "config")
  writeFileSync(kubeconfig, [
    "apiVersion: v1",
    "kind: Config",
    "clusters: [{name: c, cluster: {server: \"http://127.0.0.1:" + port + "\", insecure-skip-tls-verify: true}}]",
    "users: [{name: u, user: {token: t}}]",
    "contexts: [{name: x, context: {cluster: c, user: u, namespace: ns}}]",
    "current-context: x",
    ""
  ].join("\n"))
})
afterAll(async () => {
  await new Promise<void>((resolve) => server.close(() => resolve()))
  rmSync(dir, { recursive: true, force: true })
})

it.scopedLive("a request whose kept-alive socket was dropped unanswered is sent again on a fresh one", () =>
  Effect.gen(function*() {
    const api = yield* KubeApi.make({ kubeconfig, requestTimeoutMs: 10_000 })
    assert.strictEqual(api.namespace, "ns")
    const first = yield* api.call<{ path: string }>({ method: "GET", path: "/api/one", operation: "read one" })
    assert.strictEqual(first.path, "/api/one")
    // The agent reuses the first socket; the server drops it; the POST goes out again and is answered.
    const second = yield* api.call<{ path: string }>({ method: "POST", path: "/api/two", body: { a: 1 }, operation: "create two" })
    assert.strictEqual(second.path, "/api/two")
    assert.strictEqual(dropped, 1)
    assert.strictEqual(requests, 3)
  }), 30_000)

it.scopedLive("a request dropped unanswered on a fresh connection is sent again, a bounded number of times", () =>
  Effect.gen(function*() {
    const api = yield* KubeApi.make({ kubeconfig, requestTimeoutMs: 10_000 })
    const before = { requests, dropped }
    drops.set("/api/fresh", 2)
    const made = yield* api.call<{ path: string }>({ method: "POST", path: "/api/fresh", body: { a: 1 }, operation: "create fresh" })
    assert.strictEqual(made.path, "/api/fresh")
    assert.strictEqual(dropped - before.dropped, 2)
    // Dropped every time: after the first attempt and two resends, one clear error.
    drops.set("/api/never", 10)
    const failed = yield* Effect.flip(api.call({ method: "GET", path: "/api/never", operation: "read never" }))
    assert.match(failed.message, /cannot read never: cannot reach the cluster at http:\/\/127\.0\.0\.1:\d+: socket hang up/)
    assert.strictEqual(drops.get("/api/never"), 7, "three attempts in all")
    drops.delete("/api/never")
  }), 30_000)
