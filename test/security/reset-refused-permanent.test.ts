/**
 * Issue 19: a permanent computer whose start is refused because a guest moved a mount source can
 * still be factory reset by a server that has not attached it yet. Where the engine binds checked
 * paths (Docker with an unprivileged server in the engine's group), a container made with a mount
 * source at one path refuses to start once the object the server holds has moved; the reset
 * replaces it without starting it (before, the reset first attached the computer, which meant
 * starting the refused container, and so could never succeed). On host, and on Docker as root, a
 * computer always gets the objects the server holds, so no start is refused this way
 * (mount-symlink-swap.test.ts); there is nothing to test there.
 */
import { afterAll, assert, beforeAll, it } from "vitest"
import { docker } from "../support/Docker.js"
import { describeIf } from "../support/Requirements.js"
import type { HostServer } from "./HostServer.js"
import { requirements, requirementsMet } from "./HostServer.js"
import { computerId, makeProject, type Project, sh, startServer, targets } from "./SharedDirectory.js"

const checked = targets.find((target) => target.backend === "docker" && target.mode === "unprivileged")

describeIf(requirementsMet && checked !== undefined, `${requirements}, and Docker with a group on its socket`)(
  "a permanent computer refused its start by a moved mount source, not yet attached, is factory reset",
  () => {
    const target = checked!
    let project: Project
    let server: HostServer | undefined
    const id = computerId("kept")
    const args = () => ["--mount", `${project.project}:/home/agent/app`, "--mount", `${project.project}/data:/home/agent/data`]
    beforeAll(() => {
      project = makeProject(target, { "data/d.txt": "the data\n" })
    })
    afterAll(async () => {
      await server?.call("computer_delete", { computer_id: id }).catch(() => undefined)
      await server?.close()
      // A failed run leaves the refused container, which the server cannot delete without starting it.
      await docker().getContainer(`kilntainer-${id}`).remove({ force: true }).catch(() => undefined)
      project?.remove()
    }, 120_000)

    it("a later server replaces it from the image, with the directory it holds, without starting the old container", async () => {
      const first = await startServer(target, args())
      try {
        const made = await first.call("computer_create", { computer_id: id, temporary: false })
        assert.isFalse(made.isError, made.text)
        assert.strictEqual((await sh(first, id, "cat ~/data/d.txt")).stdout, "the data\n")
      } finally {
        await first.close()
      }
      // Stopped meanwhile (a reboot of the machine, say): its next use starts it, and the start checks its mounts.
      await docker().getContainer(`kilntainer-${id}`).stop({ t: 1 }).catch(() => undefined)
      server = await startServer(target, args())
      // A guest of this server moves the nested source: the permanent computer's bind no longer names it.
      const moved = await sh(server, computerId("guest"), "cd ~/app && mv data d0 && echo moved")
      assert.strictEqual(moved.stdout, "moved\n", moved.all)
      const refused = await server.call("sandbox_exec", { command: "echo up", computer_id: id, timeout: 60 })
      assert.isTrue(refused.isError, refused.text)
      assert.match(refused.text, /mounts no longer match the host \(\S+:\/home\/agent\/data.*factory-reset/)
      const reset = await server.call("computer_factory_reset", { computer_id: id })
      assert.isFalse(reset.isError, `the factory reset of the refused computer failed: ${reset.text}`)
      const after = await sh(server, id, "cat ~/data/d.txt; ls ~/app")
      assert.strictEqual(after.stdout, "the data\nd0\n", after.all)
      const listed = await server.call("computer_list", {})
      assert.include(listed.text, id)
    }, 360_000)
  }
)
