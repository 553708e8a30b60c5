/**
 * Attack: make the server keep memory it gave a computer — modules that fill 200 MiB, again and
 * again, ending by themselves or killed. Every run's memory goes with it: a killed worker is
 * terminated, a finished one is collected before it waits for the next run.
 */
import { assert, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { rmSync } from "node:fs"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as WasmBackend from "../../src/layers/backends/wasm/WasmBackend.js"
import { type Connection, ownedEvents } from "../../src/services/Backend.js"
import { describeIf } from "../support/Requirements.js"
import { connection, stateDir } from "../support/WasmProvider.js"

afterAll(() => rmSync(stateDir, { recursive: true, force: true }))

const toolsetDir = WasmBackend.findToolsetDir()
const MiB = 1024 * 1024

const runOnce = (computer: Connection, kill: boolean) =>
  Effect.scoped(Effect.gen(function*() {
    const process = yield* computer.spawn({ argv: ["bigmem"], cwd: "/", env: {} })
    if (kill) {
      yield* Effect.sleep("150 millis")
      yield* process.signal("SIGKILL")
    }
    return yield* Stream.runFold(ownedEvents(process), "", (out, event) => (event._tag === "Stdout" ? out + Buffer.from(event.data).toString() : out))
  }))

/** RSS after the thread pools settle (a terminated worker's memory is unmapped when its thread ends). */
const settledRss = Effect.promise(async () => {
  await new Promise((resolve) => setTimeout(resolve, 500))
  return process.memoryUsage().rss
})

describeIf(toolsetDir !== undefined, "the WASI toolset's test modules (bash wasm/build.sh)")("memory of finished and killed WASM processes", () => {
  it.scopedLive("is given back", () =>
    Effect.gen(function*() {
      const computer = yield* connection({ mode: "module", modulePath: join(toolsetDir!, "test", "bigmem.wasm"), maxMemoryMb: 512 })
      assert.strictEqual(yield* runOnce(computer, false), "allocated 200 MiB\n")
      const before = yield* settledRss
      // Two at a time (both pooled workers), one of each pair killed while it fills its memory.
      for (let i = 0; i < 3; i++) yield* Effect.all([runOnce(computer, false), runOnce(computer, true)], { concurrency: 2 })
      const after = yield* settledRss
      // Six runs of 200 MiB each: kept, that would be 1.2 GiB more.
      assert.isBelow(after - before, 300 * MiB, `RSS ${before / MiB | 0} → ${after / MiB | 0} MiB`)
    }), 120_000)
})
