/**
 * Issue 19, item 9: the audit log following a guest's symlink. An --audit-log inside a mount (which
 * a computer could read, or replace with a link) is refused at startup; and the log itself never
 * follows a link: not one put at its path (it is opened with O_NOFOLLOW), nor one put in place of
 * its directory before a rotation (its files are opened and renamed through the directory's
 * descriptor, held since startup).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as AuditLog from "../../src/layers/AuditLog.js"
import { TEST_IMAGE } from "../support/Docker.js"
import { describeIf } from "../support/Requirements.js"
import { requirements, requirementsMet } from "./HostServer.js"
import { makeProject, runCli, targets } from "./SharedDirectory.js"

const base = mkdtempSync(join(tmpdir(), "kt-audit-link-"))
afterAll(() => rmSync(base, { recursive: true, force: true }))

describeIf(requirementsMet, requirements)("an audit log a computer could reach", () => {
  for (const target of targets) {
    describe(target.name, () => {
      it("an --audit-log inside a mount is refused at startup", () => {
        const project = makeProject(target, { "logs/": "" })
        try {
          const run = runCli(target, [
            ...(target.backend === "docker" ? ["--image", TEST_IMAGE] : []),
            "--mount", `${project.project}:/home/agent/app`,
            "--audit-log", `${project.project}/logs/audit.log`
          ], join(project.base, "state"))
          assert.strictEqual(run.status, 1, `the server started with its audit log in a mount: ${run.stderr}`)
          assert.match(run.stderr, /--audit-log .* computers see/)
        } finally {
          project.remove()
        }
      }, 120_000)
    })
  }
})

/** An entry of about 500 bytes: eight of them take a 4 KiB log past its cap. */
const entry = (round: number) => ({ type: "file.written" as const, computer: "c", path: `/home/agent/${"x".repeat(440)}`, bytes: round })

describe("the audit log's file", () => {
  it.scopedLive("a symlink at its path is refused, never followed", () =>
    Effect.gen(function*() {
      const dir = join(base, "planted")
      mkdirSync(dir)
      const victim = join(base, "victim-planted.txt")
      writeFileSync(victim, "untouched\n", { mode: 0o600 })
      symlinkSync(victim, join(dir, "audit.log"))
      const made = yield* Effect.either(AuditLog.make({ path: join(dir, "audit.log"), maxBytes: 4096, keep: 1, secrets: [] }))
      if (made._tag === "Right") {
        yield* made.right.record(entry(0))
        yield* Effect.sleep("300 millis")
      }
      assert.strictEqual(readFileSync(victim, "utf8"), "untouched\n")
      assert.strictEqual(made._tag, "Left", "the audit log started on a symlink")
    }))

  it.scopedLive("a rotation after its directory was swapped for a symlink writes where the log was, never through the link", () =>
    Effect.gen(function*() {
      const logs = join(base, "logs")
      const elsewhere = join(base, "elsewhere")
      mkdirSync(logs)
      mkdirSync(elsewhere)
      const audit = yield* AuditLog.make({ path: join(logs, "audit.log"), maxBytes: 4096, keep: 1, secrets: [] })
      yield* audit.record(entry(0))
      yield* Effect.sleep("200 millis")
      renameSync(logs, `${logs}.moved`)
      symlinkSync(elsewhere, logs)
      for (let round = 1; round <= 20; round++) yield* audit.record(entry(round))
      yield* Effect.sleep("500 millis")
      assert.deepStrictEqual(readdirSync(elsewhere), [], "the log was written through the link")
      assert.includeMembers(readdirSync(`${logs}.moved`), ["audit.log", "audit.log.1"])
    }))
})
