/**
 * The egress proxy's throughput beside a direct download, in one run (ratios matter; this machine
 * is noisy): 256 MiB from a local HTTP server, direct, forwarded as plain HTTP by the proxy, and
 * through a CONNECT tunnel; then the cost of a denied request. The upstream and the proxy share
 * this process (as they would not in production), so the proxied figures are pessimistic.
 *   npx esbuild bench/egress-throughput.ts --bundle --platform=node --format=esm --packages=external \
 *     --outfile=bench/.egress-throughput.mjs && node bench/.egress-throughput.mjs
 */
import { Effect, FiberSet } from "effect"
import { execFile } from "node:child_process"
import { promisify } from "node:util"
const exec = promisify(execFile)
import { createServer as httpServer } from "node:http"
import { createServer, type AddressInfo } from "node:net"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as AuditLog from "../src/layers/AuditLog.js"
import * as Egress from "../src/layers/egress/Egress.js"
import { defaultSettings } from "../src/services/Settings.js"

const SIZE = 256 * 1024 * 1024
const chunk = Buffer.alloc(1 << 20, 97)
const program = Effect.scoped(Effect.gen(function*() {
  const upstream = httpServer((_req, res) => {
    res.writeHead(200, { "content-length": SIZE })
    let sent = 0
    const pump = () => { while (sent < SIZE) { sent += chunk.length; if (!res.write(chunk)) return void res.once("drain", pump) } res.end() }
    pump()
  })
  yield* Effect.promise(() => new Promise<void>((r) => upstream.listen(0, "127.0.0.1", r)))
  const upPort = (upstream.address() as AddressInfo).port
  const audit = yield* AuditLog.make({ path: undefined, maxBytes: 0, keep: 0, secrets: [] })
  const egress = yield* Egress.make({ settings: { ...defaultSettings.egress, allowHosts: ["bulk.test"], resolve: ["bulk.test=127.0.0.1"] }, stateDir: mkdtempSync(join(tmpdir(), "egb-")), audit })
  const run = yield* FiberSet.makeRuntime<never>()
  const proxy = createServer((s) => void run(egress.serve("bench", s)))
  yield* Effect.promise(() => new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r)))
  const pPort = (proxy.address() as AddressInfo).port
  const time = (args: Array<string>) => Effect.promise(async () => { const t = performance.now(); await exec("curl", ["-sS", "-o", "/dev/null", ...args]); return (performance.now() - t) / 1000 })
  const rows: Array<string> = []
  for (let i = 0; i < 3; i++) {
    const direct = yield* time([`http://127.0.0.1:${upPort}/`])
    const plain = yield* time(["--proxy", `http://127.0.0.1:${pPort}`, `http://bulk.test:${upPort}/`])
    const tunnel = yield* time(["--proxy", `http://127.0.0.1:${pPort}`, "--proxytunnel", `http://bulk.test:${upPort}/`])
    rows.push(`run ${i}: 256 MiB direct ${(256 / direct).toFixed(0)} MiB/s, forwarded ${(256 / plain).toFixed(0)} MiB/s, CONNECT tunnel ${(256 / tunnel).toFixed(0)} MiB/s`)
  }
  const t0 = performance.now()
  for (let i = 0; i < 50; i++) yield* Effect.promise(() => exec("curl", ["-sS", "-o", "/dev/null", "--proxy", `http://127.0.0.1:${pPort}`, "http://evil.test/"]))
  rows.push(`50 denied requests (curl process each): ${((performance.now() - t0) / 50).toFixed(1)} ms per request`)
  console.log(rows.join("\n"))
  proxy.close(); upstream.close()
}))
Effect.runPromise(program).then(() => process.exit(0))
