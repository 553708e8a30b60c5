// Spawn latency of `true` and throughput of `head -c 1G /dev/zero` through the host backend's
// agent (kt-agent over its framed stdio protocol), side by side with bare child_process.spawn.
// Run after `npm run build` (uses dist/), or without a build: `npx vite-node bench/agent-spawn.mjs`.
// Options: --sandbox (run the agent inside bwrap as the host backend does), --runs N, --bytes N.
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect, Exit, Scope } from "effect"

const load = (built, source) => built().catch(source)
const AgentLauncher = await load(() => import("../dist/src/layers/backends/agent/AgentLauncher.js"), () => import("../src/layers/backends/agent/AgentLauncher.ts"))
const HostBackend = await load(() => import("../dist/src/layers/backends/host/HostBackend.js"), () => import("../src/layers/backends/host/HostBackend.ts"))
const { locate } = await load(() => import("../dist/src/layers/backends/agent/NativeBinaries.js"), () => import("../src/layers/backends/agent/NativeBinaries.ts"))

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name)
  return i >= 0 ? Number(process.argv[i + 1]) : fallback
}
const runs = arg("--runs", 300)
const bytes = arg("--bytes", 1024 ** 3)
const sandbox = process.argv.includes("--sandbox")

const binaries = await Effect.runPromise(locate("host"))
const dir = mkdtempSync(join(tmpdir(), "kt-bench-"))
const env = { PATH: "/usr/local/bin:/usr/bin:/bin" }
const agentArgs = sandbox ? ["--caps", "drop"] : ["--caps", "keep", "--no-seccomp"]
const command = sandbox
  ? {
      file: "bwrap",
      args: ["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--bind", dir, dir,
        "--ro-bind", binaries.agent, "/run/kt-agent", "--unshare-pid", "--unshare-net", "--die-with-parent",
        "--new-session", "--cap-drop", "ALL", "--", "/run/kt-agent", ...agentArgs],
      cwd: dir,
      env,
      channel: join(dir, "agent.fifo")
    }
  : { file: binaries.agent, args: agentArgs, cwd: dir, env, channel: join(dir, "agent.fifo") }

const scope = Effect.runSync(Scope.make())
const client = await Effect.runPromise(Scope.extend(AgentLauncher.make("host", command), scope))

const viaAgent = (argv, onData) =>
  new Promise((resolve, reject) => {
    let exit
    Effect.runPromise(client.spawn({ argv, cwd: dir, env }, {
      onStdout: onData ?? (() => {}),
      onStderr: () => {},
      onExit: (e) => { exit = e },
      onClosed: () => resolve(exit)
    })).catch(reject)
  })
const bare = (argv, onData) =>
  new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { cwd: dir, env, stdio: ["pipe", "pipe", "pipe"] })
    if (onData) child.stdout.on("data", onData)
    child.on("error", reject)
    child.on("close", (code) => resolve(code))
  })

// The whole host backend (bwrap sandbox, Effect scopes, the output pull), as the runtime uses it.
const computer = await Effect.runPromise(Scope.extend(
  Effect.gen(function*() {
    const backend = yield* HostBackend.make({ stateDir: dir, network: false, sandbox: "bwrap" })
    const created = new Date().toISOString()
    const instance = yield* backend.create({ id: "bench", temporary: true, image: backend.image, created, instance: "bench" })
    return yield* backend.connect(instance)
  }),
  scope
))
/** Reads a process's output to its end, as the kernel does: a loop over its pull. */
const drain = (p) => Effect.matchEffect(p.pull, { onFailure: () => Effect.void, onSuccess: () => Effect.suspend(() => drain(p)) })

const viaBackend = (argv) =>
  Effect.runPromise(Effect.scoped(Effect.flatMap(
    computer.spawn({ argv, cwd: "/home/agent", env }),
    drain
  )))

const p50 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const time = async (f) => {
  const t = process.hrtime.bigint()
  await f()
  return Number(process.hrtime.bigint() - t) / 1e6
}

for (let i = 0; i < 20; i++) { await bare(["true"]); await viaAgent(["true"]); await viaBackend(["true"]) }
const agentTimes = []
const bareTimes = []
const backendTimes = []
for (let i = 0; i < runs; i++) {
  bareTimes.push(await time(() => bare(["true"])))
  agentTimes.push(await time(() => viaAgent(["true"])))
  backendTimes.push(await time(() => viaBackend(["true"])))
}
const a = p50(agentTimes)
const b = p50(bareTimes)
const h = p50(backendTimes)
console.log(`spawn true (p50 of ${runs}): bare child_process.spawn ${b.toFixed(3)} ms`)
console.log(`  AgentClient${sandbox ? " (agent in bwrap)" : ""}: ${a.toFixed(3)} ms, ratio ${(a / b).toFixed(2)}x`)
console.log(`  HostBackend connection.spawn + events (bwrap): ${h.toFixed(3)} ms, ratio ${(h / b).toFixed(2)}x`)

const throughput = async (run) => {
  let n = 0
  const ms = await time(() => run(["head", "-c", String(bytes), "/dev/zero"], (d) => { n += d.length }))
  if (n !== bytes) throw new Error(`expected ${bytes} bytes, got ${n}`)
  return (bytes / 1e6) / (ms / 1000)
}
const ta = await throughput(viaAgent)
const tb = await throughput(bare)
console.log(`head -c ${bytes} /dev/zero: agent ${ta.toFixed(0)} MB/s, bare child_process ${tb.toFixed(0)} MB/s, ratio ${(ta / tb).toFixed(2)}`)

await Effect.runPromise(Scope.close(scope, Exit.void))
rmSync(dir, { recursive: true, force: true })
