/**
 * Issue 19, item 2: nested --deny-read/--deny-write undone by renaming a parent. The guest renames
 * the directories above a denied file, a denied directory and a read-only one, then restarts; the
 * restarted computer and a new one must still find them hidden and read-only where they now are:
 * the rules follow the objects, not their names. (The deny-read case runs first: on a server that
 * still followed names, the moved read-only directory would stop every later computer, item 5.)
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { join } from "node:path"
import { describeIf } from "../support/Requirements.js"
import type { HostServer } from "./HostServer.js"
import { requirements, requirementsMet } from "./HostServer.js"
import { computerId, makeProject, restartAfterSwap, type Project, readHost, sh, startServer, targets } from "./SharedDirectory.js"

describeIf(requirementsMet, requirements)("deny rules after their parents are renamed", () => {
  for (const target of targets) {
    describe(target.name, () => {
      let project: Project
      let server: HostServer
      beforeAll(async () => {
        project = makeProject(target, {
          "config/.env": "TOKEN={secret}\n",
          "config/app.toml": "port = 1\n",
          "vault/keys/id": "{secret}\n",
          "lib/fixed/f.txt": "fixed\n"
        })
        server = await startServer(target, [
          "--mount", `${project.project}:/home/agent/app`,
          "--deny-read", `${project.project}/config/.env`,
          "--deny-read", `${project.project}/vault/keys`,
          "--deny-write", `${project.project}/lib/fixed`
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

      it("a denied file and a denied directory stay hidden after their parents are renamed", async () => {
        const id = computerId("rename")
        const before = await sh(server, id, "cd ~/app && cat config/.env vault/keys/id; mv config config2 && mv vault v2 && echo moved")
        assert.notInclude(before.all, project.secretText)
        assert.include(before.stdout, "moved\n", before.all)
        for (const seen of await afterRestart(id, "cd ~/app && cat config2/app.toml config2/.env v2/keys/id; ls -A v2/keys; echo end")) {
          assert.notInclude(seen.all, project.secretText, "a computer read a denied file after its parent was renamed")
          assert.include(seen.stdout, "port = 1\n")
        }
        assert.include(readHost(join(project.project, "config2/.env")), project.secretText, "the host keeps its file")
      }, 240_000)

      it("a read-only directory stays read-only after its parent is renamed", async () => {
        const id = computerId("rename")
        const before = await sh(server, id, "cd ~/app && mv lib l2 && echo moved")
        assert.include(before.stdout, "moved\n", before.all)
        for (const seen of await afterRestart(id, "echo changed > ~/app/l2/fixed/f.txt; echo end")) {
          assert.match(seen.stderr, /l2\/fixed\/f\.txt.*Read-only file system/)
        }
        assert.strictEqual(readHost(join(project.project, "l2/fixed/f.txt")), "fixed\n")
      }, 240_000)
    })
  }
})
