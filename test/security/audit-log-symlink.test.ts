/**
 * Issue 19, item 9: the audit log following a guest's symlink. An --audit-log inside a mount (which
 * a computer could read, or replace with a link) is refused at startup; and the log itself never
 * follows a link put in its place: while the file is rotated again and again, a racing process
 * keeps swapping a symlink to another file in at its path, and that file stays untouched.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as AuditLog from "../../src/layers/egress/AuditLog.js"
import { TEST_IMAGE } from "../support/Docker.js"
import { describeIf } from "../support/Requirements.js"
import { requirements, requirementsMet } from "./HostServer.js"
import { makeProject, runCli, targets } from "./SharedDirectory.js"

const base = mkdtempSync(join(tmpdir(), "kt-audit-link-"))
afterAll(() => rmSync(base, { recursive: true, force: true }))

/** For at most `seconds`: a symlink to `victim` made beside `path`, then renamed over it, again and again. */
const RACER = `
import os, sys, time
path, victim, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
tmp = path + ".racer"
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        os.symlink(victim, tmp)
        os.rename(tmp, path)
    except OSError:
        pass
`

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

describe("the audit log's file", () => {
  it.scopedLive("rotation never follows a symlink swapped in at the log's path", () =>
    Effect.gen(function*() {
      const dir = join(base, "logs")
      mkdirSync(dir)
      const path = join(dir, "audit.log")
      const victim = join(base, "victim.txt")
      writeFileSync(victim, "untouched\n", { mode: 0o600 })
      const audit = yield* AuditLog.make({ path, maxBytes: 4096, keep: 1, secrets: [] })
      const racer = spawn("python3", ["-c", RACER, path, victim, "3"], { stdio: "ignore" })
      const raced = Effect.async<void>((resume) => void racer.on("exit", () => resume(Effect.void)))
      for (let round = 0; round < 200 && racer.exitCode === null; round++) {
        yield* audit.record({ type: "file.written", computer: "c", path: `/home/agent/${"x".repeat(400)}`, bytes: round })
        yield* Effect.sleep("10 millis")
      }
      yield* raced
      assert.strictEqual(readFileSync(victim, "utf8"), "untouched\n")
    }), 60_000)
})
