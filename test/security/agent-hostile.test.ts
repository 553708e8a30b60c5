/**
 * A hostile agent: something in the agent's place speaks malformed frames, before or after a
 * handshake. Each time only that connection ends, with a clear reason, the server (this process)
 * keeps running with its memory bounded, and a second computer with a real agent keeps working — on
 * the host (a stand-in listening on the computer's socket, one that knows the key and one that does
 * not) and on Docker (a guest, root in its container, that replaced the connector the server runs).
 */
import { assert, describe, it } from "@effect/vitest"
import type Docker from "dockerode"
import { Effect, Exit, Scope } from "effect"
import { createHmac } from "node:crypto"
import { mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { createServer, type Server } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import type { AgentClient } from "../../src/layers/backends/agent/AgentClient.js"
import { newKey } from "../../src/layers/backends/agent/AgentHandshake.js"
import * as AgentLauncher from "../../src/layers/backends/agent/AgentLauncher.js"
import { encodeFrame, FrameType, HEADER_SIZE } from "../../src/layers/backends/agent/AgentProtocol.js"
import * as NativeBinaries from "../../src/layers/backends/agent/NativeBinaries.js"
import * as DockerAgent from "../../src/layers/backends/docker/DockerAgent.js"
import * as DockerEngine from "../../src/layers/backends/docker/DockerEngine.js"
import * as Frames from "../support/AgentFrames.js"
import { docker, dockerWorks, requirement, TEST_ENGINE, TEST_IMAGE } from "../support/Docker.js"
import { describeIf } from "../support/Requirements.js"

const dir = mkdtempSync(join(tmpdir(), "kt-hostile-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const header = (length: number, type: number, id: number) => {
  const bytes = Buffer.alloc(HEADER_SIZE)
  bytes.writeUInt32LE(length >>> 0, 0)
  bytes.writeUInt8(type, 4)
  bytes.writeUInt32LE(id, 5)
  return bytes
}

/** Malformed streams: what comes after the handshake, and why the connection must end. */
const hostile = {
  "a 4 GiB output frame followed by 64 MiB of zeros": {
    bytes: Buffer.concat([header(0xffffffff, FrameType.Stdout, 1), Buffer.alloc(64 << 20)]),
    reason: /agent protocol violation: STDOUT frame of 4294967295 bytes/
  },
  "an unknown frame type": {
    bytes: Buffer.concat([header(3, 99, 1), Buffer.from("abc")]),
    reason: /agent protocol violation: unknown frame type 99/
  },
  "output for a process the server does not watch (a forged STDOUT)": {
    bytes: Frames.output(77, 0, "forged"),
    reason: /agent protocol violation: STDOUT for p77, which this connection does not watch/
  },
  "a STARTED nobody asked for, split over many writes": {
    bytes: Frames.started(5, 5),
    reason: /agent protocol violation: STARTED for tag 5, which asked nothing/
  }
} as const

const rssMiB = () => process.memoryUsage().rss / 1024 / 1024

/** A real agent still runs processes. */
const echoes = (client: AgentClient) =>
  Effect.gen(function*() {
    let out = ""
    let closed = false
    yield* client.spawn({ argv: ["echo", "still fine"], cwd: "/", env: { PATH: "/usr/bin:/bin" } }, {
      onOutput: (_stream, _offset, data) => (out += Buffer.from(data).toString()),
      onExit: () => {},
      onClosed: () => (closed = true)
    })
    for (let i = 0; i < 300 && !closed; i++) yield* Effect.sleep("10 millis")
    return out
  })

/** The reason an attach failed, or the connection ended (bounded). */
const outcome = (attached: Effect.Effect<AgentClient, { readonly message: string }, Scope.Scope>) =>
  Effect.gen(function*() {
    let reason: string | undefined
    const scope = yield* Scope.make()
    const result = yield* Effect.either(Scope.extend(attached, scope))
    if (result._tag === "Right") {
      for (let i = 0; i < 500 && result.right.failure === undefined; i++) yield* Effect.sleep("20 millis")
      reason = result.right.failure
    }
    yield* Scope.close(scope, Exit.void)
    return result._tag === "Left" ? result.left.message : reason
  })

/** A stand-in on a computer's socket: a HELLO, with or without a WELCOME that proves `key`, then `bytes`. */
const standIn = (socket: string, key: string | undefined, bytes: Buffer) =>
  Effect.acquireRelease(
    Effect.async<Server>((resume) => {
      const server = createServer((connection) => {
        connection.on("error", () => {})
        const hello = Frames.hello()
        connection.write(hello)
        if (key === undefined) {
          // Split over many writes: the decoder gathers headers across reads.
          const head = bytes.subarray(0, 4096)
          for (let at = 0; at < head.length; at += 7) connection.write(head.subarray(at, Math.min(head.length, at + 7)))
          return
        }
        connection.once("data", (auth: Buffer) => {
          const serverNonce = auth.subarray(HEADER_SIZE, HEADER_SIZE + 32)
          const boot = hello.subarray(HEADER_SIZE + 4, HEADER_SIZE + 20)
          const agentNonce = hello.subarray(HEADER_SIZE + 20, HEADER_SIZE + 52)
          const proof = createHmac("sha256", Buffer.from(key, "hex")).update("kt-agent-v3 agent").update(boot).update(serverNonce).update(agentNonce).digest()
          connection.write(encodeFrame(FrameType.Welcome, 0, Buffer.concat([proof, Buffer.alloc(32)])))
          connection.write(bytes)
        })
      })
      server.listen(socket, () => resume(Effect.succeed(server)))
    }),
    (server) => Effect.sync(() => server.close())
  )

describe("a hostile agent on the host", () => {
  for (const [name, { bytes, reason }] of Object.entries(hostile)) {
    it.scopedLive(`${name}: only that connection ends`, () =>
      Effect.gen(function*() {
        const binaries = yield* NativeBinaries.locate("host")
        const good = join(dir, `good-${Math.random().toString(36).slice(2)}`)
        mkdirSync(good)
        const place = { socket: join(good, "agent.sock"), key: newKey() }
        yield* Effect.addFinalizer(() => AgentLauncher.stop("host", place))
        const client = yield* AgentLauncher.open("host", place, Effect.succeed({
          file: binaries.agent,
          args: ["--listen", place.socket, "--store", join(good, "store"), "--caps", "keep", "--no-seccomp"],
          cwd: good,
          env: {}
        }), false)
        const before = rssMiB()
        // A stand-in that knows the key (a compromised agent), and one that does not.
        const key = newKey()
        const knowing = join(dir, `h-${Math.random().toString(36).slice(2)}.sock`)
        yield* standIn(knowing, key, bytes)
        assert.match((yield* outcome(AgentLauncher.attach("host", { socket: knowing, key }))) ?? "", reason)
        const guessing = join(dir, `h-${Math.random().toString(36).slice(2)}.sock`)
        yield* standIn(guessing, undefined, bytes)
        // Before any proof, nothing a stand-in says is taken: the attach fails and says why.
        assert.match((yield* outcome(AgentLauncher.attach("host", { socket: guessing, key }))) ?? "", /agent protocol violation: /)
        assert.isBelow(rssMiB() - before, 48, "the server's memory stays bounded")
        assert.strictEqual(yield* echoes(client), "still fine\n")
      }))
  }
})

describeIf(dockerWorks, requirement())("a hostile connector in a container", () => {
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

  it.scopedLive("a guest that replaced the connector ends only that attach; the agent and other computers go on", () =>
    Effect.gen(function*() {
      const binaries = yield* NativeBinaries.locate("docker")
      const id = yield* container
      const key = newKey()
      // Through the engine's bounded calls, as DockerConnection reaches the agent.
      const calls = yield* DockerEngine.make({ engine: TEST_ENGINE, dockerHost: undefined })
      const good = yield* DockerAgent.open(calls, id, binaries, { key, bound: false, args: [] })
      for (const [name, { bytes, reason: _reason }] of Object.entries(hostile)) {
        // Root in the container can replace what the server execs to reach the agent.
        const escaped = [...Buffer.concat([Frames.hello(), bytes.subarray(0, 4096)])].map((b) => `\\${b.toString(8).padStart(3, "0")}`).join("")
        const archive = DockerAgent.agentArchive(Buffer.from(`#!/bin/sh\nprintf '${escaped}'\nsleep 30\n`))
        yield* Effect.promise(() => engine.getContainer(id).putArchive(archive, { path: "/" }))
        const before = rssMiB()
        const said = yield* outcome(DockerAgent.attachAgent(calls, id, key, {}))
        // Before any proof, nothing a stand-in says is taken: the attach fails and says why.
        assert.match(said ?? "", /agent protocol violation: /, name)
        assert.isBelow(rssMiB() - before, 48, `${name}: the server's memory stays bounded`)
        assert.strictEqual(good.failure, undefined, name)
        assert.strictEqual(yield* echoes(good), "still fine\n", name)
      }
    }), 120_000)
})
