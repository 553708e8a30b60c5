// The parts of the E2B backend that need no service: the runtime cap, renewals and the
// connection's watch on the kernel's clock (TestClock), error classification, envd versions, the
// choice of the output path, and the stdin relay for old envd (run in a real bash).
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, Fiber, Option, TestClock } from "effect"
import { AuthenticationError, type Sandbox, SandboxError } from "e2b"
import { spawn } from "node:child_process"
import { mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { providerError } from "../../../../src/domain/Errors.js"
import * as E2BConnection from "../../../../src/layers/backends/e2b/E2BConnection.js"
import * as E2BError from "../../../../src/layers/backends/e2b/E2BError.js"
import * as E2BProvider from "../../../../src/layers/backends/e2b/E2BProvider.js"
import * as EnvdProcess from "../../../../src/layers/backends/e2b/EnvdProcess.js"
import * as EnvdVersion from "../../../../src/layers/backends/e2b/EnvdVersion.js"
import { processScript, RELAY_EOF, relayLine } from "../../../../src/layers/backends/e2b/ProcessScript.js"
import * as RuntimeCap from "../../../../src/layers/backends/e2b/RuntimeCap.js"
import type { Instance } from "../../../../src/services/Backend.js"

const HOUR = 3600_000

const instance = (endsAt: number): Instance => ({
  providerId: "isbx",
  metadata: { id: "calm-heron", temporary: true, image: "base", created: "1970-01-01T00:00:00.000Z", instance: "srv" },
  state: "running",
  endsAt
})

/** A connection over a provider stub whose sandbox the test sets; every look at it is recorded (time). */
const watched = (endsAt: number) =>
  Effect.gen(function*() {
    const asked: Array<number> = []
    const seen: { state: "running" | "paused" | "gone" | "error" } = { state: "running" }
    const target = instance(endsAt)
    const stub = {
      attach: () => Effect.succeed({ sandbox: {} as Sandbox, instance: target, envdVersion: "0.5.8", templateId: "base", agentKey: undefined }),
      inspect: () =>
        Effect.gen(function*() {
          asked.push(yield* Clock.currentTimeMillis)
          if (seen.state === "error") return yield* providerError("e2b", "read the sandbox", "Unavailable", "down")
          return seen.state === "gone" ? Option.none() : Option.some<Instance>({ ...target, state: seen.state })
        })
    } as unknown as E2BProvider.E2BProvider
    const connection = yield* E2BConnection.connect({
      provider: stub,
      home: "/home/user",
      maxRuntimeSec: 60,
      watchEveryMs: 25_000,
      requestTimeoutMs: 1000,
      outputApi: "auto",
      scrub: (text) => text,
      envs: {},
      agentBinary: undefined,
      agentArgs: [],
      busy: new Set()
    })(target)
    return { asked, seen, connection }
  })

describe("E2B runtime cap", () => {
  it("ends a period at its start plus the plan's maximum, and never renews past it", () => {
    assert.strictEqual(RuntimeCap.endsAt(1_000, 3600), 1_000 + HOUR)
    assert.strictEqual(RuntimeCap.renewalMs(0, HOUR, 10 * 60_000), 10 * 60_000, "far from the end: the configured timeout")
    assert.strictEqual(RuntimeCap.renewalMs(HOUR - 60_000, HOUR, 10 * 60_000), 60_000, "near the end: only what is left")
    assert.isAtMost(RuntimeCap.renewalMs(HOUR + 1, HOUR, 10 * 60_000), 0, "past the end: nothing")
    assert.strictEqual(RuntimeCap.formatDuration(3600), "1 h")
    assert.strictEqual(RuntimeCap.formatDuration(86400), "24 h")
    assert.strictEqual(RuntimeCap.formatDuration(5400), "90 min")
    assert.strictEqual(RuntimeCap.formatDuration(4), "4 s")
  })

  it("says why a computer was lost at the end, and what keeps the work", () => {
    assert.strictEqual(
      RuntimeCap.endReason("isbx", "gone", 3600),
      "its sandbox isbx reached the end of its runtime, 1 h of continuous running (--e2b-max-runtime; E2B's Base plan allows 1 h, " +
        "Pro 24 h), and E2B deleted it with its files"
    )
    assert.match(RuntimeCap.endReason("isbx", "paused", 86400), /24 h of continuous running .*; E2B paused it and kept its files: computer_restart resumes it/)
  })

  it.effect("a renewal at the end fails without asking E2B", () =>
    Effect.gen(function*() {
      const provider = E2BProvider.make({
        connection: { apiKey: "e2b_00", requestTimeoutMs: 1000, apiUrl: "http://127.0.0.1:9" },
        timeoutMs: 600_000,
        maxRuntimeSec: 3600,
        envs: {},
        extraMetadata: {},
        scrub: (text) => text
      })
      yield* TestClock.setTime(HOUR - 500)
      const error = yield* Effect.flip(provider.renew(instance(HOUR), HOUR + 600_000))
      assert.strictEqual(error.reason, "Quota")
      assert.strictEqual(
        error.message,
        "e2b backend: cannot extend the sandbox's timeout: the sandbox is at the end of the maximum runtime of the E2B plan (it ends at 1970-01-01T01:00:00.000Z)"
      )
    }))

  it.scoped("a connection's watch asks E2B every interval and once just after the end of the runtime", () =>
    Effect.gen(function*() {
      const { asked, connection, seen } = yield* watched(60_000)
      const lost = yield* Effect.fork(connection.lost)
      yield* TestClock.adjust(25_000)
      yield* TestClock.adjust(25_000)
      assert.deepStrictEqual(asked, [25_000, 50_000])
      seen.state = "gone"
      // The next look is at the end plus a grace, not a whole interval later.
      yield* TestClock.adjust(60_000 + E2BConnection.END_GRACE_MS - 50_000)
      assert.deepStrictEqual(asked, [25_000, 50_000, 62_000])
      assert.strictEqual(yield* Fiber.join(lost), RuntimeCap.endReason("isbx", "gone", 60))
      yield* TestClock.adjust(100_000)
      assert.strictEqual(asked.length, 3, "a lost connection stops asking")
    }))

  it.scoped("a sandbox paused from outside before its end is lost with a way back; a failed look is not a loss", () =>
    Effect.gen(function*() {
      const { asked, connection, seen } = yield* watched(HOUR)
      const lost = yield* Effect.fork(connection.lost)
      seen.state = "error"
      yield* TestClock.adjust(25_000)
      assert.isTrue(Option.isNone(yield* Fiber.poll(lost)), "a failed look is not a loss")
      seen.state = "paused"
      yield* TestClock.adjust(25_000)
      assert.strictEqual(asked.length, 2)
      assert.strictEqual(yield* Fiber.join(lost), "its sandbox isbx was paused outside kilntainers; computer_restart resumes it")
    }))
})

describe("E2B errors", () => {
  const classify = (error: unknown, plane: "api" | "envd" = "api") =>
    E2BError.fromSdk({ operation: "do it", plane, requestTimeoutMs: 1234, scrub: (t) => t.split("e2b_secret").join("<redacted>") }, error)
  const sdkError = (status: number, message: string) => Object.assign(new SandboxError(`${status}: ${message}`), { statusCode: status })

  it("classifies E2B's answers by status and words", () => {
    const capped = classify(sdkError(400, "Max instance length exceeded"))
    assert.strictEqual(capped.reason, "Quota")
    assert.isTrue(E2BError.isRuntimeCap(capped))
    assert.strictEqual(classify(sdkError(400, "Timeout cannot be greater than 1 hours")).reason, "Quota")
    assert.strictEqual(classify(sdkError(400, "bad template")).reason, "Invalid")
    assert.strictEqual(classify(sdkError(501, "CloseStdin is not implemented")).reason, "Invalid")
    assert.strictEqual(classify(sdkError(409, "Sandbox 'i1' cannot be paused while in 'pausing' state")).reason, "Conflict")
    assert.strictEqual(classify(sdkError(410, "killed")).reason, "NotFound")
    assert.strictEqual(classify(sdkError(429, "slow down")).reason, "RateLimited")
    assert.strictEqual(classify(sdkError(502, "bad gateway")).reason, "Unavailable")
    assert.strictEqual(classify(new AuthenticationError("nope")).reason, "Denied")
    assert.strictEqual(classify(new TypeError("fetch failed")).reason, "Unavailable")
    assert.strictEqual(classify(new Error("something odd")).reason, "Failed")
    const timeout = classify(new DOMException("Request timed out", "TimeoutError"))
    assert.strictEqual(timeout.reason, "Timeout")
    assert.strictEqual(timeout.message, "e2b backend: cannot do it: E2B did not answer within 1234 ms (no answer in time)")
    assert.isTrue(E2BError.isTransient(timeout))
    assert.isFalse(E2BError.isTransient(capped))
  })

  it("words them once, without the key, and keeps the cause", () => {
    const cause = sdkError(500, "boom with e2b_secret inside")
    const error = classify(cause)
    assert.strictEqual(error.message, "e2b backend: cannot do it: the E2B service failed (500: boom with <redacted> inside)")
    assert.strictEqual(error.cause, cause)
    assert.strictEqual(
      classify(new AuthenticationError("x")).message,
      "e2b backend: cannot do it: E2B rejected the API key (--e2b-api-key / E2B_API_KEY) (check the credentials)"
    )
    const envd = classify(new AuthenticationError("no user specified"), "envd")
    assert.strictEqual(envd.reason, "Denied")
    assert.strictEqual(envd.detail, "the sandbox refused the request (no user specified)", "envd's own check is not the key")
  })
})

describe("E2B envd versions", () => {
  it("old envd needs the user named at a start, and cannot close stdin before 0.5.2", () => {
    assert.isBelow(EnvdVersion.compare("0.3.9", "0.4.0"), 0)
    assert.strictEqual(EnvdVersion.compare("0.5.2", "0.5.2"), 0)
    assert.isAbove(EnvdVersion.compare("0.10.0", "0.5.2"), 0)
    assert.deepStrictEqual(EnvdVersion.startHeaders("0.3.9"), { Authorization: "Basic dXNlcjo=" })
    assert.deepStrictEqual(EnvdVersion.startHeaders("0.4.0"), {})
    assert.isFalse(EnvdVersion.canCloseStdin("0.5.1"))
    assert.isTrue(EnvdVersion.canCloseStdin("0.5.2"))
  })

  it("uses the SDK's process client only when it is there", () => {
    assert.isUndefined(EnvdProcess.processRpc({ commands: {} } as never))
    assert.isUndefined(EnvdProcess.processRpc({ commands: { rpc: { start: "no" } } } as never))
    const start = () => ({ async *[Symbol.asyncIterator]() {} })
    assert.strictEqual(EnvdProcess.processRpc({ commands: { rpc: { start } } } as never)?.start, start)
  })

  it.live("the stdin relay passes exact bytes and ends input at the EOF line", () =>
    Effect.promise(() =>
      new Promise<void>((resolve, reject) => {
        const dir = mkdtempSync(join(tmpdir(), "kt-relay-"))
        const script = processScript(["sh", "-c", "od -An -tx1 | tr -s ' \\n' ' '"], { PATH: process.env.PATH! }, { stdinRelay: true })
        const child = spawn("bash", ["-c", script], { stdio: ["pipe", "pipe", "ignore"], env: { TMPDIR: dir, PATH: process.env.PATH } })
        let out = ""
        child.stdout.on("data", (data) => (out += data))
        child.stdin.write(relayLine(new Uint8Array([0, 1, 255, 10, 46])))
        child.stdin.write(relayLine(Buffer.from(".\n")))
        child.stdin.write(RELAY_EOF)
        const timer = setTimeout(() => reject(new Error(`no exit after EOF; output so far ${JSON.stringify(out)}`)), 10_000)
        child.on("exit", (code) => {
          clearTimeout(timer)
          child.stdin.end()
          try {
            assert.strictEqual(code, 0)
            assert.strictEqual(out.trim(), "00 01 ff 0a 2e 2e 0a")
            assert.deepStrictEqual(readdirSync(dir), [], "the FIFO is gone")
            resolve()
          } catch (error) {
            reject(error)
          } finally {
            rmSync(dir, { recursive: true, force: true })
          }
        })
      })
    ))
})
