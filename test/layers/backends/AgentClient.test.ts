import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import type { ExitInfo } from "../../../src/services/Backend.js"
import * as AgentClient from "../../../src/layers/backends/AgentClient.js"
import * as NativeBinaries from "../../../src/layers/backends/NativeBinaries.js"

const { encodeFrame, encodeSpawn, FrameDecoder, FrameType } = AgentClient

const decodeAll = (chunks: ReadonlyArray<Buffer>) => {
  const seen: Array<{ type: number; id: number; data: string }> = []
  const decoder = new FrameDecoder({
    output: (type, id, data) => seen.push({ type, id, data: Buffer.from(data).toString("latin1") }),
    control: (type, id, payload) => seen.push({ type, id, data: payload.toString("latin1") })
  })
  for (const chunk of chunks) decoder.push(chunk)
  return seen
}

/** Joins consecutive output pieces of the same frame kind, as a consumer would see them. */
const merged = (events: ReturnType<typeof decodeAll>) =>
  events.reduce<Array<{ type: number; id: number; data: string }>>((acc, event) => {
    const last = acc[acc.length - 1]
    if (last && last.type === event.type && last.id === event.id && (event.type === FrameType.Stdout || event.type === FrameType.Stderr)) {
      last.data += event.data
    } else {
      acc.push({ ...event })
    }
    return acc
  }, [])

describe("frame codec", () => {
  const stream = Buffer.concat([
    encodeFrame(FrameType.Ready, 0),
    encodeFrame(FrameType.Started, 7, Buffer.from([1, 2, 0, 0])),
    encodeFrame(FrameType.Stdout, 7, Buffer.from("hello world")),
    encodeFrame(FrameType.Stderr, 7, Buffer.from("oops")),
    encodeFrame(FrameType.Exit, 7, Buffer.from([0, 3, 0, 0, 0])),
    encodeFrame(FrameType.Closed, 7)
  ])
  const expected = [
    { type: FrameType.Ready, id: 0, data: "" },
    { type: FrameType.Started, id: 7, data: "\x01\x02\x00\x00" },
    { type: FrameType.Stdout, id: 7, data: "hello world" },
    { type: FrameType.Stderr, id: 7, data: "oops" },
    { type: FrameType.Exit, id: 7, data: "\x00\x03\x00\x00\x00" },
    { type: FrameType.Closed, id: 7, data: "" }
  ]

  it("decodes frames delivered in one chunk", () => {
    assert.deepStrictEqual(decodeAll([stream]), expected)
  })

  it("decodes frames split at every possible byte boundary", () => {
    for (let cut = 1; cut < stream.length; cut++) {
      assert.deepStrictEqual(merged(decodeAll([stream.subarray(0, cut), stream.subarray(cut)])), expected)
    }
    const bytes = Array.from(stream, (byte) => Buffer.from([byte]))
    assert.deepStrictEqual(merged(decodeAll(bytes)), expected)
  })

  it("hands output payloads over without copying them", () => {
    const frame = encodeFrame(FrameType.Stdout, 1, Buffer.alloc(1000, 120))
    let view: Uint8Array | undefined
    new FrameDecoder({ output: (_t, _i, data) => (view = data), control: () => {} }).push(frame)
    assert.strictEqual(view?.buffer, frame.buffer)
  })

  it("encodes a spawn request as counts and NUL-terminated strings", () => {
    const payload = encodeSpawn({ argv: ["sh", "-c", "x"], cwd: "/w", env: { A: "1" } })!
    assert.strictEqual(payload.readUInt32LE(0), 3)
    assert.strictEqual(payload.readUInt32LE(4), 1)
    assert.strictEqual(payload.subarray(8).toString(), "/w\0sh\0-c\0x\0A=1\0")
    assert.isUndefined(encodeSpawn({ argv: ["a\0b"], cwd: "/", env: {} }))
  })
})

describe("AgentClient (unsandboxed agent)", () => {
  const dir = mkdtempSync(join(tmpdir(), "kt-agent-test-"))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  const startWith = (channel: boolean) =>
    Effect.gen(function*() {
      const binaries = yield* NativeBinaries.locate("host")
      const name = `agent-${Math.random().toString(36).slice(2)}`
      return yield* AgentClient.make("host", {
        file: binaries.agent,
        args: ["--socket", join(dir, `${name}.sock`)],
        cwd: dir,
        env: {},
        channel: channel ? join(dir, `${name}.fifo`) : undefined
      })
    })
  const start = startWith(true)

  it.scopedLive("carries output over a plain pipe too (no channel)", () =>
    Effect.gen(function*() {
      const client = yield* startWith(false)
      let out = ""
      let done = false
      yield* client.spawn({ argv: ["echo", "piped"], cwd: dir, env: { PATH: "/usr/bin:/bin" } }, {
        onStdout: (data) => (out += Buffer.from(data).toString()),
        onStderr: () => {},
        onExit: () => {},
        onClosed: () => (done = true)
      })
      for (let i = 0; i < 200 && !done; i++) yield* Effect.sleep("10 millis")
      assert.strictEqual(out, "piped\n")
    }))

  it.scopedLive("delivers output written just before the agent dies, then reports the death", () =>
    Effect.gen(function*() {
      let lost: string | undefined
      const binaries = yield* NativeBinaries.locate("host")
      const name = `agent-${Math.random().toString(36).slice(2)}`
      const client = yield* AgentClient.make("host", {
        file: binaries.agent,
        args: ["--socket", join(dir, `${name}.sock`)],
        cwd: dir,
        env: {},
        channel: join(dir, `${name}.fifo`)
      }, (reason) => (lost = reason))
      let bytes = 0
      let exit: ExitInfo | undefined
      let closed = false
      // Less than a pipe's capacity: it all sits in the channel, unread, when the agent dies.
      const { id } = yield* client.spawn({ argv: ["sh", "-c", "head -c 10000 /dev/zero; sleep 0.3; kill -9 $PPID; sleep 5"], cwd: dir, env: { PATH: "/usr/bin:/bin" } }, {
        onStdout: (data) => (bytes += data.byteLength),
        onStderr: () => {},
        onExit: (e) => (exit = e),
        onClosed: () => (closed = true)
      })
      client.holdOutput(id, true)
      yield* Effect.sleep("700 millis")
      assert.isFalse(closed)
      client.holdOutput(id, false)
      for (let i = 0; i < 300 && !closed; i++) yield* Effect.sleep("10 millis")
      assert.isTrue(closed)
      assert.strictEqual(bytes, 10000)
      assert.deepStrictEqual(exit, { exitCode: null, signal: "SIGKILL" })
      assert.match(lost ?? "", /killed by SIGKILL/)
    }))

  it.scopedLive("when the agent dies, live processes exit with SIGKILL and later spawns fail", () =>
    Effect.gen(function*() {
      const client = yield* start
      const exits: Array<ExitInfo> = []
      let closed = false
      yield* client.spawn({ argv: ["sleep", "306"], cwd: dir, env: { PATH: "/usr/bin:/bin" } }, {
        onStdout: () => {},
        onStderr: () => {},
        onExit: (exit) => exits.push(exit),
        onClosed: () => (closed = true)
      })
      process.kill(client.pid!, "SIGKILL")
      for (let i = 0; i < 200 && !closed; i++) yield* Effect.sleep("10 millis")
      assert.deepStrictEqual(exits, [{ exitCode: null, signal: "SIGKILL" }])
      assert.isTrue(closed)
      // The agent's direct children die with it (PR_SET_PDEATHSIG), even without a sandbox.
      let left = ["x"]
      for (let i = 0; i < 100 && left.length > 0; i++) {
        left = readdirSync("/proc").filter((entry) => {
          try {
            return /^\d+$/.test(entry) && readFileSync(`/proc/${entry}/cmdline`, "utf8") === "sleep\0" + "306\0"
          } catch {
            return false
          }
        })
        if (left.length > 0) yield* Effect.sleep("10 millis")
      }
      assert.deepStrictEqual(left, [])
      const error = yield* Effect.flip(client.spawn({ argv: ["true"], cwd: dir, env: {} }, {
        onStdout: () => {},
        onStderr: () => {},
        onExit: () => {},
        onClosed: () => {}
      }))
      assert.strictEqual(error._tag, "BackendError")
    }))

  it.scopedLive("passes exactly the given environment and reports exec failures", () =>
    Effect.gen(function*() {
      const client = yield* start
      let out = ""
      let done = false
      yield* client.spawn({ argv: ["env"], cwd: dir, env: { PATH: "/usr/bin:/bin", ONLY: "this" } }, {
        onStdout: (data) => (out += Buffer.from(data).toString()),
        onStderr: () => {},
        onExit: () => {},
        onClosed: () => (done = true)
      })
      for (let i = 0; i < 200 && !done; i++) yield* Effect.sleep("10 millis")
      assert.strictEqual(out, "PATH=/usr/bin:/bin\nONLY=this\n")
      const failed = yield* Effect.flip(client.spawn({ argv: ["/nonexistent/x"], cwd: dir, env: {} }, {
        onStdout: () => {},
        onStderr: () => {},
        onExit: () => {},
        onClosed: () => {}
      }))
      assert.strictEqual(failed._tag, "SpawnFailed")
    }))
})
