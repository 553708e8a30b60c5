/**
 * Issue 19, item 5: a guest stopping every new computer from starting. After moving a denied
 * directory's parent away, the guest leaves symlinks (absolute, and dangling) where the denied
 * paths were. The restarted computer and new ones must still start, with the rules on the objects
 * where they are now. Where the engine binds checked paths the swapped computer itself may be
 * refused, naming the mount, until it is factory reset (then it starts like the rest); the computers
 * made after it start (a failed agent install of the swapped one must not be taken for its image's).
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { describeIf } from "../support/Requirements.js"
import type { HostServer } from "./HostServer.js"
import { requirements, requirementsMet } from "./HostServer.js"
import { computerId, makeProject, restartAfterSwap, runsAfterSwap, type Project, sh, startServer, targets } from "./SharedDirectory.js"

describeIf(requirementsMet, requirements)("symlinks left at deny paths", () => {
  for (const target of targets) {
    describe(target.name, () => {
      let project: Project
      let server: HostServer
      beforeAll(async () => {
        project = makeProject(target, { "sub/locked/l.txt": "locked\n", "sub/hidden.txt": "{secret}\n" })
        server = await startServer(target, [
          "--mount", `${project.project}:/home/agent/app`,
          "--deny-write", `${project.project}/sub/locked`,
          "--deny-read", `${project.project}/sub/hidden.txt`
        ])
      }, 120_000)
      afterAll(async () => {
        await server?.close()
        project?.remove()
      })

      it("the restarted computer and new ones start, with the rules on the moved objects", async () => {
        const id = computerId("dos")
        const left = await sh(server, id, `cd ~/app && mv sub s0 && mkdir sub && ln -s /nonexistent-kt-${process.pid} sub/locked && ln -s /etc sub/hidden.txt && echo left`)
        assert.strictEqual(left.stdout, "left\n", left.all)
        await restartAfterSwap(server, target, id)
        if (!(await runsAfterSwap(server, target, id))) {
          // Refused, naming the mount: a factory reset makes it afresh from the image, never reopening the refused container.
          const reset = await server.call("computer_factory_reset", { computer_id: id })
          assert.isFalse(reset.isError, `the factory reset of the refused computer failed: ${reset.text}`)
        }
        for (const computer of [id, computerId("fresh"), computerId("fresh")]) {
          const seen = await sh(server, computer, "echo started; cat ~/app/s0/hidden.txt; echo changed > ~/app/s0/locked/l.txt; echo end")
          assert.include(seen.stdout, "started\n", `${computer} did not start: ${seen.all}`)
          assert.notInclude(seen.all, project.secretText)
          assert.match(seen.stderr, /s0\/locked\/l\.txt.*Read-only file system/)
        }
      }, 240_000)
    })
  }
})
