// Kubernetes at scale, on the fake cluster: N computers created (claim → Ready → agent → `true`),
// listed and removed through one kilntainers server (the built CLI over stdio MCP), beside the
// fake's own pace for the same work (claims made and waited for Ready by this process, then the two
// execs a create needs: the agent copied in and started, the connector attached; no server),
// and the server's heap per idle computer after a full GC (target ≤ 0.5 MiB).
//   npx vite-node bench/kubernetes-scale.ts [N] [concurrency]      (default 1000 16; after npm run build)
// The fake's pods are bubblewrap sandboxes here (BwrapRuntime.ts: ~2 MB each, where a container's
// shim costs ~10 MB), each running the real kt-agent the backend copies in.
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as Effect from "effect/Effect"
import * as NativeBinaries from "../src/layers/backends/agent/NativeBinaries.js"
import * as KubeAgent from "../src/layers/backends/kubernetes/KubeAgent.js"
import * as KubeApi from "../src/layers/backends/kubernetes/KubeApi.js"
import { bwrapRuntime } from "../test/support/kube/BwrapRuntime.js"
import { startKubeFake } from "../test/support/kube/KubeFake.js"
import { EXTENSIONS, resourceOf, VERSION } from "../test/support/kube/SandboxCrds.js"
import { startServer } from "../test/support/McpHarness.js"

const here = dirname(fileURLToPath(import.meta.url))
const count = Number(process.argv[2] ?? 1000)
const concurrency = Number(process.argv[3] ?? 16)
const scratch = mkdtempSync(join(tmpdir(), "kt-kube-scale-"))
const report = join(scratch, "heap.json")
const MiB = 1024 ** 2

const fake = await startKubeFake({ runtime: bwrapRuntime(join(scratch, "pods")) })
const CLAIMS = resourceOf(EXTENSIONS, VERSION, "sandboxclaims")!
const TEMPLATES = resourceOf(EXTENSIONS, VERSION, "sandboxtemplates")!

/** Runs `task` for 0..n-1, `concurrency` at a time. */
const pool = async (n: number, task: (i: number) => Promise<void>) => {
  let next = 0
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, async () => {
    while (next < n) await task(next++)
  }))
}
const ready = (name: string) =>
  new Promise<void>((resolve) => {
    const check = () => {
      const claim = fake.api.store.find(CLAIMS, fake.namespace, name)
      if (claim?.status?.conditions?.some((c: { type: string; status: string }) => c.type === "Ready" && c.status === "True")) resolve()
      else setTimeout(check, 20)
    }
    check()
  })

// The fake's own pace: claims made in process and waited for Ready (a pod started), then deleted.
fake.api.store.create(TEMPLATES, fake.namespace, {
  metadata: { name: "baseline" },
  spec: { podTemplate: { spec: { containers: [{ name: "c", image: "none", command: ["sleep", "infinity"] }] } } }
})
const baselineCount = Math.min(count, 100)
const baselineStart = performance.now()
const binaries = await Effect.runPromise(NativeBinaries.locate("kubernetes"))
const api = await Effect.runPromise(Effect.scoped(KubeApi.make({ kubeconfig: fake.kubeconfig, requestTimeoutMs: 60_000 })))
await pool(baselineCount, async (i) => {
  fake.api.store.create(CLAIMS, fake.namespace, { metadata: { name: `base-${i}` }, spec: { sandboxTemplateRef: { name: "baseline" } } })
  await ready(`base-${i}`)
  const pod = fake.api.store.find(CLAIMS, fake.namespace, `base-${i}`)!.status.sandbox.name as string
  // The execs of a temporary computer's connection: the agent copied in, started bound, attached.
  await Effect.runPromise(Effect.scoped(KubeAgent.open({ api, namespace: fake.namespace, pod, binaries }, undefined, {})))
})
const baselineRate = baselineCount / ((performance.now() - baselineStart) / 1000)
for (let i = 0; i < baselineCount; i++) fake.api.store.delete(CLAIMS, fake.namespace, `base-${i}`)
await new Promise((resolve) => setTimeout(resolve, 2000))

const server = await startServer(["--backend", "kubernetes", "--k8s-kubeconfig", fake.kubeconfig, "--log-level", "warning"], {
  NODE_OPTIONS: `--expose-gc --import ${pathToFileURL(join(here, "support", "heap-report.mjs")).href}`,
  KT_HEAP_REPORT: report
})
const memory = async (): Promise<{ heapUsed: number; rss: number }> => {
  rmSync(report, { force: true })
  process.kill(server.pid!, "SIGUSR2")
  for (let i = 0; i < 400; i++) {
    await new Promise((resolve) => setTimeout(resolve, 50))
    try {
      return JSON.parse(readFileSync(report, "utf8")).after // after a full collection
    } catch { /* not written yet */ }
  }
  throw new Error("the server wrote no heap report")
}
let failures = 0
const use = async (id: string) => {
  const created = await server.call("computer_create", { computer_id: id })
  const ran = created.isError ? created : await server.call("sandbox_exec", { computer_id: id, command: "true" })
  if (created.isError || ran.isError) {
    failures++
    if (failures <= 3) console.error(`${id}: ${created.isError ? created.text : ran.text}`)
  }
}

await use("warm")
await server.call("computer_delete", { computer_id: "warm" })
await new Promise((resolve) => setTimeout(resolve, 1000))
const before = await memory()
/** CPU seconds a process has used (utime + stime of /proc/PID/stat, in clock ticks of 1/100 s). */
const cpuOf = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return (Number(fields[11]) + Number(fields[12])) / 100
}
const serverCpuBefore = cpuOf(server.pid!)
const fakeCpuBefore = process.cpuUsage()
const started = performance.now()
await pool(count, async (i) => {
  await use(`scale-${i}`)
  if ((i + 1) % 100 === 0) process.stderr.write(`  ${i + 1} created, ${((performance.now() - started) / 1000).toFixed(0)} s\n`)
})
const createSeconds = (performance.now() - started) / 1000
const serverCpu = cpuOf(server.pid!) - serverCpuBefore
const fakeCpu = process.cpuUsage(fakeCpuBefore)
await new Promise((resolve) => setTimeout(resolve, 2000))
const after = await memory()
const listStart = performance.now()
const listed = await server.call("computer_list", {})
const listMs = performance.now() - listStart
const removeStart = performance.now()
await pool(count, async (i) => {
  const removed = await server.call("computer_delete", { computer_id: `scale-${i}` })
  if (removed.isError) failures++
})
const removeSeconds = (performance.now() - removeStart) / 1000
const left = fake.api.store.list(CLAIMS, fake.namespace, "kilntainers=true").length

console.log(`${count} computers on the Kubernetes fake (pods: bubblewrap sandboxes), ${concurrency} at a time, through one server`)
console.log(`  created and used once: ${createSeconds.toFixed(1)} s, ${(count / createSeconds).toFixed(1)}/s; the fake's own pace (claim → Ready → the agent's two execs, ${baselineCount}): ${baselineRate.toFixed(1)}/s; ratio ${((count / createSeconds) / baselineRate).toFixed(2)}`)
console.log(`  CPU per computer created: server ${(serverCpu * 1000 / count).toFixed(0)} ms, the fake (API, controller, pods/exec; this process) ${((fakeCpu.user + fakeCpu.system) / 1000 / count).toFixed(0)} ms`)
console.log(`  computer_list of ${listed.structured?.count ?? "?"}: ${listMs.toFixed(0)} ms`)
console.log(`  removed: ${removeSeconds.toFixed(1)} s, ${(count / removeSeconds).toFixed(1)}/s; claims left: ${left}; failed calls: ${failures}`)
console.log(`  heap: ${(before.heapUsed / MiB).toFixed(1)} MiB with none → ${(after.heapUsed / MiB).toFixed(1)} MiB with ${count} idle: ${((after.heapUsed - before.heapUsed) / count / MiB).toFixed(3)} MiB per computer (target ≤ 0.5); RSS ${(before.rss / MiB).toFixed(0)} → ${(after.rss / MiB).toFixed(0)} MiB, ${((after.rss - before.rss) / count / MiB).toFixed(3)} MiB per computer`)
await server.client.close()
await fake.close()
rmSync(scratch, { recursive: true, force: true })
process.exit(failures === 0 && left === 0 ? 0 : 1)
