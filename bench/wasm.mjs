// sandbox_exec of `echo hi | wc -c` on the WASM toolset backend vs the host backend (bubblewrap),
// interleaved in one run, through the library (Runtime.layer + the backends from dist), and the
// server memory each idle toolset computer costs.
//   npm run build && bash wasm/build.sh && node --expose-gc bench/wasm.mjs [rounds]
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { Effect, Layer } from "effect"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const { Computers, HostBackend, Processes, Runtime, Settings } = await import(join(root, "dist", "src", "index.js"))
const WasmBackend = await import(join(root, "dist", "src", "layers", "backends", "wasm", "WasmBackend.js"))
const rounds = Number(process.argv[2] ?? 200)
const command = "echo hi | wc -c"

const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}
const ms = (n) => `${n.toFixed(3)} ms`

const runtime = (backend, stateDir) => Runtime.layer(Settings.make({ stateDir }), backend)
const wasmDir = mkdtempSync(join(tmpdir(), "kt-bench-wasm-"))
const hostDir = mkdtempSync(join(tmpdir(), "kt-bench-host-"))
const wasmLayer = runtime(WasmBackend.layer({ mode: "toolset", modulePath: undefined, maxMemoryMb: 256, timeoutMs: 0, stateDir: wasmDir }), wasmDir)
const hostLayer = runtime(HostBackend.layer({ stateDir: hostDir, network: false, sandbox: "bwrap" }), hostDir)

const timed = (processes) =>
  Effect.gen(function*() {
    const start = process.hrtime.bigint()
    const result = yield* processes.exec("bench", { command })
    const elapsed = Number(process.hrtime.bigint() - start) / 1e6
    if (result.exit_code !== 0 || result.stdout.trim() !== "3") throw new Error(`unexpected result: ${JSON.stringify(result)}`)
    return elapsed
  })


// Two runtimes side by side: each Effect.runPromise keeps its own layer alive through a scope.
const withRuntime = async (layer, use) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(layer)
    return yield* Effect.promise(() => use(context))
  })))

await withRuntime(wasmLayer, async (wasmContext) =>
  withRuntime(hostLayer, async (hostContext) => {
    const run = (context, effect) => Effect.runPromise(Effect.provide(effect, context))
    const wasmProcesses = await run(wasmContext, Processes)
    const hostProcesses = await run(hostContext, Processes)
    for (let i = 0; i < 20; i++) {
      await run(wasmContext, timed(wasmProcesses))
      await run(hostContext, timed(hostProcesses))
    }
    const wasm = []
    const host = []
    for (let i = 0; i < rounds; i++) {
      wasm.push(await run(wasmContext, timed(wasmProcesses)))
      host.push(await run(hostContext, timed(hostProcesses)))
    }
    console.log(`sandbox_exec of \`${command}\`, ${rounds} rounds each (interleaved)`)
    console.log(`  wasm toolset: p50 ${ms(percentile(wasm, 50))}  p99 ${ms(percentile(wasm, 99))}`)
    console.log(`  host (bwrap): p50 ${ms(percentile(host, 50))}  p99 ${ms(percentile(host, 99))}`)
    console.log(`  ratio wasm/host p50 ${(percentile(wasm, 50) / percentile(host, 50)).toFixed(2)}  p99 ${(percentile(wasm, 99) / percentile(host, 99)).toFixed(2)}`)

    // Memory per idle computer: open N toolset computers (each ran one command), then measure.
    const computers = await run(wasmContext, Computers)
    const n = 50
    global.gc?.()
    const before = process.memoryUsage()
    for (let i = 0; i < n; i++) {
      const computer = await run(wasmContext, computers.create("bench-mem", { computer_id: `idle-${i}` }))
      await run(wasmContext, wasmProcesses.exec("bench-mem", { command: "echo hi > f.txt", computer_id: computer.id }))
    }
    await new Promise((resolve) => setTimeout(resolve, 500))
    global.gc?.()
    const after = process.memoryUsage()
    const perRss = (after.rss - before.rss) / n / 1024
    const perHeap = (after.heapUsed - before.heapUsed) / n / 1024
    console.log(`memory per idle toolset computer (${n} computers${global.gc ? "" : ", run with --expose-gc for steadier figures"}):`)
    console.log(`  RSS ${perRss.toFixed(1)} KiB  JS heap ${perHeap.toFixed(1)} KiB`)
  })
)
process.exit(0)
