// Terminal output through the in-computer agent: runs `seq 1 100000` on a TTY N times and checks
// that every run delivers every byte (688,895 with the terminal's \r\n) ending with "100000\r\n",
// then prints the lost runs. Issue 12's target: 0 lost in 1,000 runs, on the host and on Docker.
//   node bench/tty-burst.mjs [--runs N] [--backend host|docker|both]
// Run after `npm run build` (uses dist/), or without a build: `npx vite-node bench/tty-burst.mjs`.
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect, Exit, Layer, Scope } from "effect"

const load = (built, source) => built().catch(source)
const arg = (name, fallback) => {
  const i = process.argv.indexOf(name)
  return i >= 0 ? process.argv[i + 1] : fallback
}
const runs = Number(arg("--runs", "1000"))
const which = arg("--backend", "both")
// Only the backends measured are loaded.
const HostBackend = which === "docker"
  ? undefined
  : await load(() => import("../dist/src/layers/backends/host/HostBackend.js"), () => import("../src/layers/backends/host/HostBackend.ts"))
const DockerBackend = which === "host"
  ? undefined
  : await load(() => import("../dist/src/layers/backends/docker/DockerBackend.js"), () => import("../src/layers/backends/docker/DockerBackend.ts"))
const { Backend, forEachEventChunk } = await load(() => import("../dist/src/services/Backend.js"), () => import("../src/services/Backend.ts"))
const env = { PATH: "/usr/local/bin:/usr/bin:/bin", TERM: "xterm-256color" }

/** `seq 1 100000` on a terminal: each line and its \r\n. */
let expectedBytes = 0
for (let i = 1; i <= 100000; i++) expectedBytes += String(i).length + 2
const MARKER = Buffer.from("99999\r\n100000\r\n")

const burst = (computer, cwd) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function* () {
    const process = yield* computer.spawn({ argv: ["seq", "1", "100000"], cwd, env, tty: { cols: 80, rows: 24 } })
    let bytes = 0
    let tail = Buffer.alloc(0)
    let exit
    let afterExit = 0
    // As the kernel reads output: a loop over the process's pull (its bytes are borrowed until the next pull).
    yield* forEachEventChunk(process, (events) => Effect.sync(() => {
      for (const event of events) {
        if (event._tag === "Exit") exit = event.exit
        else {
          bytes += event.data.byteLength
          if (exit !== undefined) afterExit += event.data.byteLength
          tail = Buffer.concat([tail, event.data]).subarray(-MARKER.length)
        }
      }
    }))
    return { bytes, marker: tail.equals(MARKER), exit, afterExit }
  })))

const measure = async (name, computer, cwd) => {
  const lost = []
  const started = process.hrtime.bigint()
  for (let i = 0; i < runs; i++) {
    const r = await burst(computer, cwd)
    if (r.bytes !== expectedBytes || !r.marker || r.exit?.exitCode !== 0 || r.afterExit > 0) lost.push({ run: i, ...r })
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9
  console.log(`${name}: ${runs} runs of seq 1 100000 on a TTY in ${seconds.toFixed(1)} s (${(1000 * seconds / runs).toFixed(1)} ms each): ` +
    `${lost.length} lost (expected ${expectedBytes} bytes ending in "100000\\r\\n", then Exit)`)
  for (const l of lost.slice(0, 20)) console.log(`  run ${l.run}: ${l.bytes} bytes, end marker ${l.marker ? "present" : "MISSING"}, exit ${JSON.stringify(l.exit)}, ${l.afterExit} bytes after Exit`)
  return lost.length
}

/** A new temporary computer of `backend`, connected (provider calls; removed when the scope closes). */
const connect = (backend, id) =>
  Effect.gen(function*() {
    const metadata = { id, temporary: true, image: backend.image, created: new Date().toISOString(), instance: "tty-burst" }
    const instance = yield* Effect.acquireRelease(backend.create(metadata), (made) => Effect.ignore(backend.remove(made)))
    return yield* backend.connect(instance)
  })

const scope = Effect.runSync(Scope.make())
const cleanup = []
let lost = 0
try {
  if (which === "host" || which === "both") {
    const dir = mkdtempSync(join(tmpdir(), "kt-tty-burst-"))
    const computer = await Effect.runPromise(Scope.extend(
      Effect.flatMap(HostBackend.make({ stateDir: dir, network: false, sandbox: "bwrap" }), (b) => connect(b, "tty-burst")),
      scope
    ))
    lost += await measure("host (bwrap)", computer, "/home/agent")
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }))
  }
  if (which === "docker" || which === "both") {
    const context = await Effect.runPromise(Layer.buildWithScope(DockerBackend.layer({
      engine: "docker", dockerHost: undefined, image: arg("--image", "debian:bookworm-slim"), cpu: undefined, memory: undefined,
      pidsLimit: 512, network: false, runFlags: []
    }), scope))
    const backend = context.unsafeMap.get(Backend.key)
    const computer = await Effect.runPromise(Scope.extend(connect(backend, `tty-burst-${process.pid}`), scope))
    lost += await measure("docker", computer, DockerBackend.HOME)
  }
} finally {
  await Effect.runPromise(Scope.close(scope, Exit.void))
  for (const f of cleanup) f()
}
process.exitCode = lost === 0 ? 0 : 1
