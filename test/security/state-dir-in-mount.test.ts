/**
 * Issue 19, item 8: a mount that covers the state directory, where the egress CA's private key
 * (`<state>/egress/ca.pem`) lives, made it readable inside Docker computers. Every backend refuses
 * such a mount at startup — a --mount of the state directory's parent, or of the state directory
 * itself, and on Docker a --docker-run-flag --volume of it — with one clear line and status 1.
 */
import { afterAll, assert, describe, it } from "vitest"
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { TEST_IMAGE } from "../support/Docker.js"
import { describeIf } from "../support/Requirements.js"
import { requirements, requirementsMet } from "./HostServer.js"
import { runCli, targets } from "./SharedDirectory.js"

const base = mkdtempSync(join(tmpdir(), "kt-state-mount-"))
chmodSync(base, 0o755)
afterAll(() => rmSync(base, { recursive: true, force: true }))

describeIf(requirementsMet, requirements)("a mount that shows computers the state directory", () => {
  for (const target of targets) {
    describe(target.name, () => {
      const image = target.backend === "docker" ? ["--image", TEST_IMAGE] : []

      it("a --mount of the state directory or of a directory above it is refused at startup", () => {
        const parent = join(base, `${target.backend}-${target.mode}`)
        const state = join(parent, "state")
        mkdirSync(state, { recursive: true })
        for (const source of [parent, state]) {
          const run = runCli(target, [...image, "--mount", `${source}:/home/agent/x`], state)
          assert.strictEqual(run.status, 1, `the server started with ${source} mounted: ${run.stderr}`)
          assert.match(run.stderr, /overlaps kilntainers' state directory/)
        }
      }, 120_000)

      if (target.backend === "docker") {
        it("a --docker-run-flag --volume of the state directory is refused at startup", () => {
          const state = join(base, "volume-state")
          const run = runCli(target, [...image, `--docker-run-flag=--volume=${state}:/x`], state)
          assert.strictEqual(run.status, 1, `the server started with the state directory as a volume: ${run.stderr}`)
          assert.match(run.stderr, /overlaps kilntainers' state directory/)
        }, 120_000)
      }
    })
  }
})
