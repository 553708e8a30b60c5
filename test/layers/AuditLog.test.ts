/** The audit log: JSON lines with Clock time, secrets redacted everywhere, bounded lines, rotation at the cap. */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Redacted, TestClock } from "effect"
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as AuditLog from "../../src/layers/AuditLog.js"

const dir = mkdtempSync(join(tmpdir(), "kt-audit-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const SECRET = "ghp_VerySecretTokenValue123"
const lines = (path: string) => readFileSync(path, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line))

describe("AuditLog", () => {
  it.effect("writes one JSON object per line, timed by the Clock, with the server's secrets redacted", () =>
    Effect.gen(function*() {
      const path = join(dir, "one.log")
      yield* Effect.scoped(Effect.gen(function*() {
        yield* TestClock.setTime(Date.UTC(2026, 0, 2, 3, 4, 5))
        const audit = yield* AuditLog.make({ path, maxBytes: 1 << 20, keep: 2, secrets: [Redacted.make(SECRET)] })
        yield* audit.record({
          type: "process.started",
          session: "s1",
          computer: "c1",
          pid: "p1",
          argv: ["curl", "-H", `Authorization: Bearer ${SECRET}`, "https://api.github.com/"],
          cwd: "/home/agent"
        })
        yield* audit.record({ type: "file.written", computer: "c1", path: `/tmp/${SECRET}.txt`, bytes: 12 })
        yield* audit.record({
          type: "egress",
          computer: "c2",
          host: "api.github.com",
          port: 443,
          method: "GET",
          decision: "allowed",
          rule: "api.github.com",
          injected: ["Authorization"],
          bytesUp: 10,
          bytesDown: 20
        })
        const recent = yield* audit.recent(new Set(["c1"]), 10)
        assert.deepStrictEqual(recent.map((entry) => entry.type), ["process.started", "file.written"])
      }))
      const text = readFileSync(path, "utf8")
      assert.notInclude(text, SECRET)
      const [started, written, egress] = lines(path)
      assert.strictEqual(started.time, "2026-01-02T03:04:05.000Z")
      assert.deepStrictEqual(started.argv, ["curl", "-H", "Authorization: Bearer <redacted>", "https://api.github.com/"])
      assert.strictEqual(written.path, "/tmp/<redacted>.txt")
      assert.strictEqual(egress.decision, "allowed")
      assert.strictEqual(statSync(path).mode & 0o777, 0o600)
    }))

  it.effect("a huge command is cut to a bounded line", () =>
    Effect.gen(function*() {
      const path = join(dir, "huge.log")
      yield* Effect.scoped(Effect.gen(function*() {
        const audit = yield* AuditLog.make({ path, maxBytes: 1 << 20, keep: 1, secrets: [] })
        yield* audit.record({ type: "process.started", computer: "c", pid: "p", command: "x".repeat(1_000_000), argv: Array.from({ length: 10_000 }, () => "a") })
      }))
      const [entry] = lines(path)
      assert.isBelow(readFileSync(path).length, 10_000)
      assert.include(entry.command, "characters omitted")
      assert.include(entry.argv[entry.argv.length - 1], "items omitted")
    }))

  it.effect("rotates before the file passes its cap, keeping the newest files", () =>
    Effect.gen(function*() {
      const path = join(dir, "rotate.log")
      const cap = 2000
      yield* Effect.scoped(Effect.gen(function*() {
        const audit = yield* AuditLog.make({ path, maxBytes: cap, keep: 2, secrets: [] })
        for (let n = 0; n < 200; n++) {
          yield* audit.record({ type: "file.written", computer: "c", path: `/f/${n}`, bytes: n })
          if (n % 10 === 9) yield* Effect.yieldNow()
        }
      }))
      for (const file of [path, `${path}.1`, `${path}.2`]) {
        assert.isTrue(existsSync(file), file)
        assert.isAtMost(statSync(file).size, cap, file)
      }
      assert.isFalse(existsSync(`${path}.3`))
      // The newest entries, in order, across the files: nothing lost between them.
      const kept = [...lines(`${path}.2`), ...lines(`${path}.1`), ...lines(path)].map((entry) => entry.bytes)
      assert.strictEqual(kept[kept.length - 1], 199)
      assert.deepStrictEqual(kept, Array.from({ length: kept.length }, (_, i) => 200 - kept.length + i))
    }))

  it.effect("without a file, recent entries are still kept, bounded", () =>
    Effect.gen(function*() {
      yield* Effect.scoped(Effect.gen(function*() {
        const audit = yield* AuditLog.make({ path: undefined, maxBytes: 0, keep: 0, secrets: [], recentCapacity: 5 })
        for (let n = 0; n < 12; n++) yield* audit.record({ type: "file.written", computer: n % 2 === 0 ? "even" : "odd", path: "/", bytes: n })
        assert.deepStrictEqual((yield* audit.recent(undefined, 100)).map((entry) => (entry as { bytes: number }).bytes), [7, 8, 9, 10, 11])
        assert.deepStrictEqual((yield* audit.recent(new Set(["even"]), 1)).map((entry) => (entry as { bytes: number }).bytes), [10])
      }))
    }))
})
