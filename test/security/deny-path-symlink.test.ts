/**
 * Issue 19, item 5: a guest stopping every new computer from starting. After moving a denied
 * directory's parent away, the guest leaves symlinks (absolute, and dangling) where the denied
 * paths were. The restarted computer and new ones must still start, with the rules on the objects
 * where they are now. Where the engine binds checked paths the swapped computer itself may be
 * refused, naming the mount, until it is factory reset (then it starts like the rest); the computers
 * made after it start (a failed agent install of the swapped one must not be taken for its image's).
 * The same for a warm pool: its refills after the swap are made, and the computers handed out from
 * them start with the rules on the moved objects (on main every refill failed, and the pool stayed empty).
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { describeIf } from "../support/Requirements.js"
import type { HostServer } from "./HostServer.js"
import { requirements, requirementsMet } from "./HostServer.js"
import { computerId, makeProject, restartAfterSwap, runsAfterSwap, type Project, sh, startServer, targets } from "./SharedDirectory.js"

/** What a guest leaves: the denied paths' parent moved to s0, and a dangling and an absolute link where they were. */
const LEAVE_LINKS = `cd ~/app && mv sub s0 && mkdir sub && ln -s /nonexistent-kt-${process.pid} sub/locked && ln -s /etc sub/hidden.txt && echo left`
/** Run in each computer after that: it started, and the rules hold on the moved objects. */
const AFTER = "echo started; cat ~/app/s0/hidden.txt; echo changed > ~/app/s0/locked/l.txt; echo end"

const serverArgs = (project: Project) => [
  "--mount", `${project.project}:/home/agent/app`,
  "--deny-write", `${project.project}/sub/locked`,
  "--deny-read", `${project.project}/sub/hidden.txt`
]

const assertStarted = (project: Project, computer: string, seen: { stdout: string; stderr: string; all: string }) => {
  assert.include(seen.stdout, "started\n", `${computer} did not start: ${seen.all}`)
  assert.notInclude(seen.all, project.secretText)
  assert.match(seen.stderr, /s0\/locked\/l\.txt.*Read-only file system/)
}

interface PoolStatus {
  readonly size: number
  readonly ready: number
  readonly starting: number
  readonly handedOut: number
}

describeIf(requirementsMet, requirements)("symlinks left at deny paths", () => {
  for (const target of targets) {
    describe(target.name, () => {
      let project: Project
      let server: HostServer
      beforeAll(async () => {
        project = makeProject(target, { "sub/locked/l.txt": "locked\n", "sub/hidden.txt": "{secret}\n" })
        server = await startServer(target, serverArgs(project))
      }, 120_000)
      afterAll(async () => {
        await server?.close()
        project?.remove()
      })

      it("the restarted computer and new ones start, with the rules on the moved objects", async () => {
        const id = computerId("dos")
        const left = await sh(server, id, LEAVE_LINKS)
        assert.strictEqual(left.stdout, "left\n", left.all)
        await restartAfterSwap(server, target, id)
        if (!(await runsAfterSwap(server, target, id))) {
          // Refused, naming the mount: a factory reset makes it afresh from the image, never reopening the refused container.
          const reset = await server.call("computer_factory_reset", { computer_id: id })
          assert.isFalse(reset.isError, `the factory reset of the refused computer failed: ${reset.text}`)
        }
        for (const computer of [id, computerId("fresh"), computerId("fresh")]) assertStarted(project, computer, await sh(server, computer, AFTER))
      }, 240_000)
    })

    describe(`${target.name}, with a warm pool`, () => {
      let project: Project
      let server: HostServer
      beforeAll(async () => {
        project = makeProject(target, { "sub/locked/l.txt": "locked\n", "sub/hidden.txt": "{secret}\n" })
        server = await startServer(target, [...serverArgs(project), "--warm-pool", "1"])
      }, 120_000)
      afterAll(async () => {
        await server?.close()
        project?.remove()
      })

      const pool = async () => {
        const listed = await server.call("computer_list", {})
        assert.isFalse(listed.isError, listed.text)
        return listed.structured?.pool as PoolStatus
      }
      /** The pool once its one computer is ready; fails when it is not within 90 s (its refills keep failing). */
      const ready = async (when: string) => {
        for (let tries = 0; tries < 180; tries++) {
          const status = await pool()
          if (status.ready === 1 && status.starting === 0) return status
          await new Promise((resolve) => setTimeout(resolve, 500))
        }
        return assert.fail(`${when}: the pool was never refilled (${JSON.stringify(await pool())}): ${server.stderr().slice(-2000)}`)
      }
      /** A computer handed out from the pool (its count of hand-outs goes up by one). */
      const handOut = async () => {
        const before = (await ready("before a hand-out")).handedOut
        const computer = computerId("pooled")
        const created = await server.call("computer_create", { computer_id: computer })
        assert.isFalse(created.isError, created.text)
        assert.strictEqual((await pool()).handedOut, before + 1, `${computer} was not handed out from the pool`)
        return computer
      }

      it("the pool refills after the swap, and the computers it hands out start with the rules on the moved objects", async () => {
        const swapped = await handOut()
        const left = await sh(server, swapped, LEAVE_LINKS)
        assert.strictEqual(left.stdout, "left\n", left.all)
        // The first may have been made before the swap (its refill starts 100 ms after a hand-out); the others after it.
        for (let round = 0; round < 3; round++) {
          const computer = await handOut()
          assertStarted(project, computer, await sh(server, computer, AFTER))
        }
        await ready("after the swap")
        assert.notInclude(server.stderr(), "warm pool: cannot prepare a computer")
      }, 300_000)
    })
  }
})
