/**
 * Issue 19, item 1: host privilege through a symlink a guest leaves in a shared directory. A
 * directory is mounted with a second mount and a --deny-write path below it; the guest moves the
 * nested source and the denied directory's parent away, puts symlinks to the server's private
 * directory in their place, and restarts. Neither the restarted computer nor a new one may see or
 * write the link's target: they get the very directories the server resolved when it started.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { readdirSync } from "node:fs"
import { join } from "node:path"
import { describeIf } from "../support/Requirements.js"
import type { HostServer } from "./HostServer.js"
import { requirements, requirementsMet } from "./HostServer.js"
import { computerId, makeProject, restartAfterSwap, type Project, readHost, sh, startServer, targets } from "./SharedDirectory.js"

describeIf(requirementsMet, requirements)("a symlink swapped in for a mount source or a denied directory", () => {
  for (const target of targets) {
    describe(target.name, () => {
      let project: Project
      let server: HostServer
      beforeAll(async () => {
        project = makeProject(target, { "data/d.txt": "the data\n", "sub/locked/l.txt": "locked\n" })
        server = await startServer(target, [
          "--mount", `${project.project}:/home/agent/app`,
          "--mount", `${project.project}/data:/home/agent/data`,
          "--deny-write", `${project.project}/sub/locked`
        ])
      }, 120_000)
      afterAll(async () => {
        await server?.close()
        project?.remove()
      })

      /** The restarted computer `id` (or, where its restart was refused, it made afresh) and a new one: what `script` shows in each. */
      const afterRestart = async (id: string, script: string) => {
        await restartAfterSwap(server, target, id)
        return [await sh(server, id, script), await sh(server, computerId("fresh"), script)]
      }

      it("a nested mount source replaced by a link: later computers get the directory the server resolved", async () => {
        const id = computerId("swap")
        const swapped = await sh(server, id, `cd ~/app && mv data d0 && ln -s ${project.private} data && echo swapped`)
        assert.strictEqual(swapped.stdout, "swapped\n", swapped.all)
        for (const seen of await afterRestart(id, "cat ~/data/d.txt ~/data/secret.txt; ls ~/data; touch ~/data/planted; echo end")) {
          assert.notInclude(seen.all, project.secretText, "a computer read the server's private file")
          assert.include(seen.stdout, "the data\n", "the nested mount is the directory the server resolved, wherever it was moved")
        }
        assert.deepStrictEqual(readdirSync(project.private), ["secret.txt"], "nothing was written into the private directory")
      }, 240_000)

      it("a denied directory replaced by a link: later computers never see the link's target", async () => {
        const id = computerId("swap")
        const swapped = await sh(server, id, `cd ~/app && mv sub s0 && mkdir sub && ln -s ${project.private} sub/locked && echo swapped`)
        assert.strictEqual(swapped.stdout, "swapped\n", swapped.all)
        for (const seen of await afterRestart(id, "cat ~/app/sub/locked/secret.txt; touch ~/app/sub/locked/planted; echo changed > ~/app/s0/locked/l.txt; echo end")) {
          assert.notInclude(seen.all, project.secretText, "a computer read the server's private file")
          assert.match(seen.stderr, /s0\/locked\/l\.txt.*Read-only file system/, "the denied directory is still read-only where it was moved")
        }
        assert.deepStrictEqual(readdirSync(project.private), ["secret.txt"], "nothing was written into the private directory")
        assert.strictEqual(readHost(join(project.project, "s0/locked/l.txt")), "locked\n")
      }, 240_000)
    })
  }
})
