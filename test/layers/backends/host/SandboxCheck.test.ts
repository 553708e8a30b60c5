/** The startup check of the host sandbox (Sandbox.checkBwrap): what it says when a sandbox cannot start. */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { checkBwrap } from "../../../../src/layers/backends/host/Sandbox.js"

const dir = mkdtempSync(join(tmpdir(), "kt-sandbox-check-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe("Sandbox.checkBwrap", () => {
  it.live("a launcher the system will not run (its private copy on a noexec filesystem) is refused, saying so", () =>
    Effect.gen(function*() {
      // Not executable: exec fails with EACCES, as it does on a filesystem mounted noexec.
      const launcher = join(dir, "kt-sandbox-0123456789abcdef")
      writeFileSync(launcher, "#!/bin/sh\nexit 0\n", { mode: 0o644 })
      const error = yield* Effect.flip(checkBwrap(process.execPath, () => ({ file: launcher, args: [] }), undefined))
      assert.strictEqual(error.reason, "Unavailable")
      assert.include(error.detail, `the sandbox launcher ${launcher} cannot be run (EACCES)`)
      assert.include(error.detail, "noexec")
    }))
})
