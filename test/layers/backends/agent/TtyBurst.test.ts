/**
 * Terminal output through the agent never loses a byte: `seq 1 100000` on a TTY, repeatedly, must
 * deliver exactly 688,895 bytes ending in "100000\r\n", all before Exit. (bench/tty-burst.mjs runs
 * the same 1,000 times; here 30 runs on the host and 10 on Docker.)
 */
import { assert, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as DockerBackend from "../../../../src/layers/backends/docker/DockerBackend.js"
import * as HostBackend from "../../../../src/layers/backends/host/HostBackend.js"
import { type Connection, ownedEvents } from "../../../../src/services/Backend.js"
import { Backend } from "../../../../src/services/Backend.js"
import { dockerWorks, requirement, TEST_IMAGE } from "../../../support/Docker.js"
import * as ProviderComputer from "../../../support/ProviderComputer.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"

const dir = mkdtempSync(join(tmpdir(), "kt-tty-burst-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

let expectedBytes = 0
for (let i = 1; i <= 100000; i++) expectedBytes += String(i).length + 2
const MARKER = Buffer.from("99999\r\n100000\r\n")
const env = { PATH: "/usr/local/bin:/usr/bin:/bin", TERM: "xterm-256color" }

const bursts = (computer: Connection, cwd: string, runs: number) =>
  Effect.gen(function*() {
    const lost: Array<string> = []
    for (let run = 0; run < runs; run++) {
      const outcome = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn({ argv: ["seq", "1", "100000"], cwd, env, tty: { cols: 80, rows: 24 } })
        let bytes = 0
        let afterExit = 0
        let exited = false
        let tail = Buffer.alloc(0)
        yield* Stream.runForEach(ownedEvents(process), (event) =>
          Effect.sync(() => {
            if (event._tag === "Exit") {
              exited = event.exit.exitCode === 0
              return
            }
            bytes += event.data.byteLength
            if (exited) afterExit += event.data.byteLength
            tail = Buffer.concat([tail, event.data]).subarray(-MARKER.length)
          }))
        return { bytes, afterExit, exited, marker: tail.equals(MARKER) }
      }))
      if (outcome.bytes !== expectedBytes || !outcome.marker || !outcome.exited || outcome.afterExit > 0) {
        lost.push(`run ${run}: ${JSON.stringify(outcome)}`)
      }
    }
    return lost
  })

describeIf(bwrapWorks, "bubblewrap")("TTY bursts on the host", () => {
  it.scopedLive("30 runs of seq 1 100000 lose no byte", () =>
    Effect.gen(function*() {
      const backend = yield* HostBackend.make({ stateDir: dir, network: false, sandbox: "bwrap" })
      const computer = (yield* ProviderComputer.open(backend, `burst-${process.pid}`)).connection
      assert.deepStrictEqual(yield* bursts(computer, "/home/agent", 30), [])
    }), 120_000)
})

describeIf(dockerWorks, requirement())("TTY bursts on Docker", () => {
  it.scopedLive("10 runs of seq 1 100000 lose no byte", () =>
    Effect.gen(function*() {
      const backend = yield* Effect.provide(Backend, Layer.fresh(DockerBackend.layer({
        engine: "docker",
        dockerHost: undefined,
        image: TEST_IMAGE,
        cpu: undefined,
        memory: undefined,
        pidsLimit: 512,
        network: false,
        runFlags: []
      })))
      const computer = (yield* ProviderComputer.open(backend, `burst-${process.pid}`)).connection
      assert.deepStrictEqual(yield* bursts(computer, DockerBackend.HOME, 10), [])
    }), 120_000)
})
