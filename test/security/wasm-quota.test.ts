/**
 * Attack: fill a toolset computer's filesystem (it lives in the server's memory) with big files
 * or a flood of empty ones. The quota (`--wasm-max-disk`) stops every write past it with ENOSPC,
 * nothing is written beyond it, and the server's memory stays bounded.
 */
import { assert, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { existsSync, readFileSync, rmSync } from "node:fs"
import { join } from "node:path"
import { afterAll, it as plainIt } from "vitest"
import * as WasmBackend from "../../src/layers/backends/wasm/WasmBackend.js"
import { type Connection, ownedEvents } from "../../src/services/Backend.js"
import { binPath, root, startServer } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"
import { connection, stateDir } from "../support/WasmProvider.js"

afterAll(() => rmSync(stateDir, { recursive: true, force: true }))

const built = WasmBackend.findToolsetDir() !== undefined
const MiB = 1024 * 1024

const run = (computer: Connection, script: string) =>
  Effect.scoped(Effect.gen(function*() {
    const process = yield* computer.spawn({ argv: ["sh", "-c", script], cwd: "/home/agent", env: { PATH: "/bin" } })
    yield* process.closeStdin
    return yield* Stream.runFold(ownedEvents(process), { stdout: "", stderr: "", code: null as number | null }, (acc, event) =>
      event._tag === "Stdout"
        ? { ...acc, stdout: acc.stdout + Buffer.from(event.data).toString() }
        : event._tag === "Stderr"
        ? { ...acc, stderr: acc.stderr + Buffer.from(event.data).toString() }
        : { ...acc, code: event.exit.exitCode })
  }))

const computer = (maxDiskBytes: number) => connection({ maxDiskBytes })

/** Bytes of every file under a directory, from inside the computer. */
const total = (c: Connection) =>
  Effect.map(run(c, "wc -c $(find / -type f) | tail -n 1"), (r) => Number(r.stdout.trim().split(/\s+/)[0]))

describeIf(built, "the WASI toolset (bash wasm/build.sh)")("the toolset's disk quota", () => {
  it.scopedLive("stops a tool's write past it with ENOSPC, writing nothing beyond it", () =>
    Effect.gen(function*() {
      const c = yield* computer(1 * MiB)
      const flood = yield* run(c, "yes | head -c 3000000 > f; echo status $?")
      assert.match(flood.stderr, /head: .*No space left on device/)
      assert.strictEqual(flood.stdout, "status 1\n")
      const size = Number((yield* run(c, "wc -c < f")).stdout.trim())
      assert.isAbove(size, 900 * 1024, "it wrote up to the quota")
      assert.isAtMost(size, 1 * MiB, "and nothing beyond it")
      // The shell's own writes too.
      const echo = yield* run(c, "echo $(seq 2000) > g; echo status $?")
      assert.match(echo.stderr, /No space left on device/)
      assert.notStrictEqual(echo.stdout, "status 0\n")
      // Removing files gives the space back.
      const freed = yield* run(c, "rm f g; yes | head -c 500000 > h && wc -c < h")
      assert.strictEqual(freed.stdout, "500000\n", freed.stderr)
    }), 120_000)

  it.scopedLive("counts every name, so a flood of empty files reaches it too", () =>
    Effect.gen(function*() {
      const c = yield* computer(1 * MiB)
      const flood = yield* run(c, "names=''; for i in $(seq 3000); do names=\"$names e$i\"; done; touch $names; echo status $?; ls | wc -l")
      assert.match(flood.stderr, /touch: .*No space left on device/)
      const files = Number(flood.stdout.trim().split("\n").pop())
      assert.isAbove(files, 900)
      assert.isBelow(files, 1024, "1 KiB a name: at most 1024 names in 1 MiB")
      const dirs = yield* run(c, "mkdir more")
      assert.match(dirs.stderr, /No space left on device/)
    }), 120_000)

  it.scopedLive("gives back what a killed writer had reserved", () =>
    Effect.gen(function*() {
      const c = yield* computer(4 * MiB)
      // cat writes 3.5 MB into f (reserving it) and waits for more stdin when it is killed.
      yield* Effect.scoped(Effect.gen(function*() {
        const writer = yield* c.spawn({ argv: ["sh", "-c", "cat > f"], cwd: "/home/agent", env: {} })
        yield* writer.write(new Uint8Array(3_500_000).fill(120))
        yield* Effect.sleep("2 seconds")
        yield* writer.signal("SIGKILL")
        yield* Stream.runDrain(ownedEvents(writer))
      }))
      const after = yield* run(c, "yes | head -c 3500000 > g; echo status $?; wc -c < g")
      assert.strictEqual(after.stdout, "status 0\n3500000\n", after.stderr)
      assert.isAtMost(yield* total(c), 4 * MiB)
    }), 120_000)
})

const rss = (pid: number) => {
  const status = readFileSync(`/proc/${pid}/status`, "utf8")
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)![1]) * 1024
  return { now: field("VmRSS"), peak: field("VmHWM") }
}

describeIf(built && existsSync(join(root, "wasm", "build", "toolset.json")) && existsSync(binPath), "the WASI toolset and a built CLI (npm run build)")("the quota through the server", () => {
  plainIt("four 256 MiB files fail at the default quota and the server's memory stays bounded", async () => {
    const server = await startServer(["--backend", "toolset"])
    try {
      const before = rss(server.pid!)
      // A 64 MiB file by doubling, then four attempts at 256 MiB files.
      const script = "printf '0123456789abcdef' > seed; for i in $(seq 22); do cat seed seed > next; mv next seed; done; " +
        "wc -c < seed; for n in 1 2 3 4; do cat seed seed seed seed > f$n; echo \"f$n: $?\"; done"
      const filled = await server.call("sandbox_exec", { command: script, timeout: 110 })
      assert.isFalse(filled.isError, filled.text)
      assert.strictEqual(filled.structured.stdout.split("\n")[0], String(64 * MiB))
      assert.match(filled.structured.stdout, /f1: 1\nf2: 1\nf3: 1\nf4: 1\n/)
      assert.match(filled.structured.stderr, /No space left on device/)
      const sizes = await server.call("sandbox_exec", { command: "wc -c seed f1 f2 f3 f4 | tail -n 1" })
      const stored = Number(sizes.structured.stdout.trim().split(/\s+/)[0])
      assert.isAtMost(stored, 256 * MiB, "nothing beyond the quota")
      assert.isAbove(stored, 200 * MiB)
      const after = rss(server.pid!)
      console.log(`server RSS ${before.now / MiB | 0} MiB before, ${after.now / MiB | 0} MiB after, peak ${after.peak / MiB | 0} MiB`)
      // The files themselves are 256 MiB; writers' buffers come and go. Before the quota this was 2.8 GB.
      assert.isBelow(after.now - before.now, 700 * MiB, `RSS ${before.now / MiB | 0} → ${after.now / MiB | 0} MiB`)
      assert.isBelow(after.peak, 1024 * MiB, `peak RSS ${after.peak / MiB | 0} MiB`)
      const more = await server.call("sandbox_exec", { command: "echo more > small" })
      assert.match(more.structured.stderr, /No space left on device/)
    } finally {
      await server.client.close()
    }
  }, 120_000)
})
