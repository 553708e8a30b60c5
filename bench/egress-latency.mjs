// Egress latency from inside a computer: 50 sequential curl requests (a new connection each) through
// the egress proxy and the agent's relay — plain HTTP, HTTPS tunnelled, HTTPS intercepted with a
// header injected — against local upstreams, beside the same curl run directly on this machine with
// the same CA bundle (the baseline: curl parses the ~150-certificate bundle on every run).
// Run after `npm run build`:  node bench/egress-latency.mjs [host|docker]
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { createServer } from "node:http"
import { createServer as createHttps } from "node:https"
import { exec, execFileSync } from "node:child_process"
import { mkdtempSync, writeFileSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
const dir = mkdtempSync(join(tmpdir(), "kt-bench-"))
execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", join(dir, "k.pem"), "-out", join(dir, "c.pem"), "-days", "1", "-subj", "/CN=bench CA", "-addext", "subjectAltName=DNS:plain.test,DNS:inject.test", "-addext", "basicConstraints=critical,CA:TRUE"], { stdio: "ignore" })
const handler = (req, res) => { req.resume(); req.on("end", () => res.end("ok\n")) }
const http = createServer(handler).listen(0, "127.0.0.1")
const https = createHttps({ key: readFileSync(join(dir, "k.pem")), cert: readFileSync(join(dir, "c.pem")) }, handler).listen(0, "127.0.0.1")
await new Promise((r) => setTimeout(r, 200))
const hp = http.address().port, sp = https.address().port
const backend = process.argv[2] ?? "host"
const extra = backend === "docker" ? ["--image", "kilntainers-computer:bookworm"] : []
const transport = new StdioClientTransport({ command: process.execPath, args: [new URL("../dist/bin/kilntainers.mjs", import.meta.url).pathname, "--backend", backend, ...extra, "--state-dir", join(dir, "state"),
  "--allow-host", "plain.test,inject.test", "--egress-resolve", "plain.test=127.0.0.1", "--egress-resolve", "inject.test=127.0.0.1",
  "--egress-ca-file", join(dir, "c.pem"), "--egress-header", "inject.test:Authorization=BENCH_SECRET"], env: { PATH: process.env.PATH, HOME: "/root", BENCH_SECRET: "Bearer x" }, stderr: "ignore" })
const client = new Client({ name: "bench", version: "1" })
await client.connect(transport)
const call = async (command) => (await client.callTool({ name: "sandbox_exec", arguments: { command, timeout: 120 } })).structuredContent
await call("true")
const N = 50
const median = (text) => {
  const times = text.trim().split("\n").map(Number).sort((a, b) => a - b)
  return { median: times[N >> 1] * 1000, p90: times[Math.floor(N * 0.9)] * 1000 }
}
writeFileSync(join(dir, "bundle.pem"), readFileSync("/etc/ssl/certs/ca-certificates.crt", "utf8") + readFileSync(join(dir, "c.pem"), "utf8"))
// Asynchronously: the upstreams answer from this very process.
const shell = (command) => new Promise((resolve, reject) => exec(command, (error, stdout) => (error ? reject(error) : resolve(stdout))))
const base = median(await shell(`for i in $(seq ${N}); do curl -s -o /dev/null -w '%{time_total}\\n' --noproxy '*' --resolve plain.test:${sp}:127.0.0.1 --cacert ${join(dir, "bundle.pem")} https://plain.test:${sp}/; done`))
console.log(`baseline: curl on this machine, HTTPS direct, same bundle: median ${base.median.toFixed(1)} ms, p90 ${base.p90.toFixed(1)} ms`)
for (const [label, url] of [["plain HTTP", `http://plain.test:${hp}/`], ["HTTPS tunnelled", `https://plain.test:${sp}/`], ["HTTPS intercepted + header", `https://inject.test:${sp}/`]]) {
  const r = await call(`for i in $(seq ${N}); do curl -s -o /dev/null -w '%{time_total}\\n' ${url}; done`)
  const t = median(r.stdout)
  console.log(`${backend} ${label}: median ${t.median.toFixed(1)} ms (x${(t.median / base.median).toFixed(2)} of the baseline), p90 ${t.p90.toFixed(1)} ms`)
}
await client.close(); http.close(); https.close()
