/**
 * A hostile agent: stand-in programs in the agent's place emit malformed frames. Each time the
 * computer they serve is lost with a clear reason, the server (this process) keeps running with its
 * memory bounded, and a second computer with a real agent keeps working — on the host and on Docker.
 */
import { assert, describe, it } from "@effect/vitest"
import type Docker from "dockerode"
import { Effect, Exit, Scope } from "effect"
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import type { AgentClient } from "../../src/layers/backends/agent/AgentClient.js"
import * as AgentLauncher from "../../src/layers/backends/agent/AgentLauncher.js"
import * as NativeBinaries from "../../src/layers/backends/agent/NativeBinaries.js"
import * as DockerAgent from "../../src/layers/backends/docker/DockerAgent.js"
import * as DockerEngine from "../../src/layers/backends/docker/DockerEngine.js"
import { docker, dockerWorks, requirement, TEST_ENGINE, TEST_IMAGE } from "../support/Docker.js"
import { describeIf } from "../support/Requirements.js"

const dir = mkdtempSync(join(tmpdir(), "kt-hostile-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** Shell `printf` escapes of a frame: u32 length (LE), u8 type, u32 id (LE), payload. */
const frame = (length: number, type: number, id: number, payload = "") => {
  const bytes = Buffer.alloc(9)
  bytes.writeUInt32LE(length >>> 0, 0)
  bytes.writeUInt8(type, 4)
  bytes.writeUInt32LE(id, 5)
  return [...bytes].map((b) => `\\${b.toString(8).padStart(3, "0")}`).join("") + payload
}
const READY = frame(8, 16, 0) + "\\002\\000\\000\\000\\000\\000\\000\\000"

/** Stand-in agents: `sh` scripts (they run on the host and in the test image alike). */
const hostile = {
  "a 4 GiB output frame followed by 64 MiB of zeros": {
    script: `printf '${READY}'; printf '${frame(0xffffffff, 19, 1)}'; head -c 67108864 /dev/zero; sleep 30`,
    reason: /agent protocol violation: STDOUT frame of 4294967295 bytes/
  },
  "an unknown frame type": {
    script: `printf '${READY}'; printf '${frame(3, 99, 1)}abc'; sleep 30`,
    reason: /agent protocol violation: unknown frame type 99/
  },
  "output for a process the server never started (a forged STDOUT)": {
    script: `printf '${READY}'; printf '${frame(6, 19, 77)}forged'; sleep 30`,
    reason: /agent protocol violation: STDOUT for process 77, which was never started/
  },
  "headers split over many writes, then a STARTED nobody asked for": {
    script: `printf '${READY.slice(0, 20)}'; sleep 0.1; printf '${READY.slice(20)}'; ` +
      `printf '${frame(4, 17, 5).slice(0, 12)}'; sleep 0.1; printf '${frame(4, 17, 5).slice(12)}\\001\\000\\000\\000'; sleep 30`,
    reason: /agent protocol violation: STARTED for process 5, which the server never started/
  }
} as const

const rssMiB = () => process.memoryUsage().rss / 1024 / 1024

/** Waits (bounded) for `lost` to be called. */
const awaitLost = (lost: { reason?: string }) =>
  Effect.gen(function*() {
    for (let i = 0; i < 500 && lost.reason === undefined; i++) yield* Effect.sleep("20 millis")
    return lost.reason
  })

/** A real agent still runs processes. */
const echoes = (client: AgentClient) =>
  Effect.gen(function*() {
    let out = ""
    let closed = false
    yield* client.spawn({ argv: ["echo", "still fine"], cwd: "/", env: { PATH: "/usr/bin:/bin" } }, {
      onStdout: (data) => (out += Buffer.from(data).toString()),
      onStderr: () => {},
      onExit: () => {},
      onClosed: () => (closed = true)
    })
    for (let i = 0; i < 300 && !closed; i++) yield* Effect.sleep("10 millis")
    return out
  })

describe("a hostile agent on the host", () => {
  const launch = (file: string, args: ReadonlyArray<string>, lost: { reason?: string }) =>
    AgentLauncher.make("host", {
      file,
      args,
      cwd: dir,
      env: { PATH: "/usr/bin:/bin" },
      channel: join(dir, `c-${Math.random().toString(36).slice(2)}.fifo`)
    }, { onLost: (reason) => (lost.reason = reason) })

  for (const [name, { script, reason }] of Object.entries(hostile)) {
    it.scopedLive(`${name}: only that computer is lost`, () =>
      Effect.gen(function*() {
        const binaries = yield* NativeBinaries.locate("host")
        const good = yield* launch(binaries.agent, [], {})
        const lost: { reason?: string } = {}
        const before = rssMiB()
        const scope = yield* Scope.make()
        // The stand-in may break the protocol before READY completes: its start fails, or it is lost.
        const started = yield* launch("/bin/sh", ["-c", script], lost).pipe(Scope.extend(scope), Effect.either)
        const said = yield* awaitLost(lost)
        const failure = started._tag === "Left" ? started.left.message : said
        assert.match(failure ?? "", reason)
        yield* Scope.close(scope, Exit.void)
        assert.isBelow(rssMiB() - before, 48, "the server's memory stays bounded")
        assert.strictEqual(yield* echoes(good), "still fine\n")
      }))
  }
})

describeIf(dockerWorks, requirement())("a hostile agent in a container", () => {
  const engine = docker()
  const containers: Array<Docker.Container> = []
  afterAll(async () => {
    await Promise.all(containers.map((c) => c.remove({ force: true }).catch(() => undefined)))
  })

  const container = Effect.promise(async () => {
    const created = await engine.createContainer({
      Image: TEST_IMAGE,
      Cmd: ["sleep", "infinity"],
      Labels: { "kilntainers.test": "agent-hostile" },
      HostConfig: { NetworkMode: "none", AutoRemove: true }
    })
    containers.push(created)
    await created.start()
    return created.id
  })

  it.scopedLive("every malformed stream loses only its own container's agent", () =>
    Effect.gen(function*() {
      const binaries = yield* NativeBinaries.locate("docker")
      // The agent is started through the engine's bounded calls, as DockerConnection starts it.
      const calls = yield* DockerEngine.make({ engine: TEST_ENGINE, dockerHost: undefined })
      const good = yield* DockerAgent.start(calls, yield* container, binaries)
      for (const [name, { script, reason }] of Object.entries(hostile)) {
        const file = join(dir, `hostile-${Math.random().toString(36).slice(2)}.sh`)
        writeFileSync(file, `#!/bin/sh\n${script}\n`)
        chmodSync(file, 0o755)
        const lost: { reason?: string } = {}
        const before = rssMiB()
        const scope = yield* Scope.make()
        const started = yield* DockerAgent.start(calls, yield* container, { agent: file, agentBytes: readFileSync(file) }, {
          onLost: (said) => (lost.reason = said)
        }).pipe(Scope.extend(scope), Effect.either)
        const said = yield* awaitLost(lost)
        assert.match((started._tag === "Left" ? started.left.message : said) ?? "", reason, name)
        yield* Scope.close(scope, Exit.void)
        assert.isBelow(rssMiB() - before, 48, `${name}: the server's memory stays bounded`)
        assert.strictEqual(yield* echoes(good), "still fine\n", name)
      }
    }), 120_000)
})
