/**
 * Issue 19, item 2: nested --deny-read/--deny-write undone by renaming a parent. The guest renames
 * the directories above a denied file, a denied directory and a read-only one, then restarts; the
 * restarted computer and a new one must still find them hidden and read-only where they now are:
 * the rules follow the objects, not their names. (The deny-read case runs first: on a server that
 * still followed names, the moved read-only directory would stop every later computer, item 5.)
 * The same when the server itself restarts on its state directory after the renames, with a decoy
 * put at the old paths: the rules still hold the objects they held, wherever they are now.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { rmSync } from "node:fs"
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

    describe(`${target.name}, across a restart of the server`, () => {
      let project: Project
      let stateDir: string | undefined
      const servers: Array<HostServer> = []
      const args = () => [
        "--mount", `${project.project}:/home/agent/app`,
        "--deny-read", `${project.project}/config/.env`,
        "--deny-read", `${project.project}/vault/keys`,
        "--deny-write", `${project.project}/lib/fixed`
      ]
      beforeAll(() => {
        project = makeProject(target, {
          "config/.env": "TOKEN={secret}\n",
          "config/app.toml": "port = 1\n",
          "vault/keys/id": "{secret}\n",
          "lib/fixed/f.txt": "fixed\n"
        })
      })
      afterAll(async () => {
        for (const server of servers) await server.close()
        if (stateDir !== undefined) rmSync(stateDir, { recursive: true, force: true })
        project?.remove()
      })

      it("a denied file, a denied directory and a read-only one renamed away before the restart stay denied", async () => {
        const first = await startServer(target, args(), { keep: true })
        servers.push(first)
        stateDir = first.stateDir
        const moved = await sh(first, computerId("rename"), [
          "cd ~/app && mv config config2 && mv vault v2 && mv lib l2",
          // Decoys where the denied objects were: the rules keep hiding whatever is at their paths, too.
          "mkdir -p config vault/keys lib/fixed && echo decoy > config/.env && echo decoy > vault/keys/id && echo moved"
        ].join(" && "))
        assert.include(moved.stdout, "moved\n", moved.all)
        await first.close()
        const second = await startServer(target, args(), { dir: stateDir, keep: true })
        servers.push(second)
        const seen = await sh(second, computerId("restarted"),
          "cd ~/app && cat config2/app.toml config2/.env v2/keys/id; ls -A v2/keys; echo changed > l2/fixed/f.txt; echo end")
        assert.include(seen.stdout, "port = 1\n", seen.all)
        assert.notInclude(seen.all, project.secretText, "a computer read a denied file renamed away before the server restarted")
        assert.match(seen.stderr, /l2\/fixed\/f\.txt.*Read-only file system/, seen.all)
        assert.strictEqual(readHost(join(project.project, "l2/fixed/f.txt")), "fixed\n")
        assert.include(readHost(join(project.project, "config2/.env")), project.secretText, "the host keeps its file")
      }, 300_000)
    })
  }
})
