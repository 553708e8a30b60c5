/**
 * A permanent Docker computer whose agent cannot start (a read-only root: the agent cannot be copied
 * in) still works through Engine exec, and says what that costs: its processes end with this
 * server. Through the MCP SDK's client and the built CLI.
 */
import { afterAll, assert, beforeAll, it } from "vitest"
import { existsSync } from "node:fs"
import { engineWorks, removeOurContainersOn, TEST_IMAGE } from "../support/Docker.js"
import { binPath, type Harness, startServer } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"

describeIf(engineWorks("docker", TEST_IMAGE) && existsSync(binPath), `a Docker engine with ${TEST_IMAGE} and a built CLI`)(
  "a permanent computer without its agent",
  () => {
    let server: Harness
    const id = `kt-unheld-${process.pid}`
    beforeAll(async () => {
      server = await startServer(["--image", TEST_IMAGE, "--docker-run-flag=--read-only"])
    }, 180_000)
    afterAll(async () => {
      await server?.call("computer_delete", { computer_id: id }).catch(() => undefined)
      await server?.client.close()
      await removeOurContainersOn("docker")()
    })

    it("runs its processes through Engine exec, and computer_list and a running process's result say they end with this server", async () => {
      const made = await server.call("computer_create", { computer_id: id, temporary: false })
      assert.isFalse(made.isError, made.text)
      const ran = await server.call("sandbox_exec", { command: "echo works", computer_id: id })
      assert.isFalse(ran.isError, ran.text)
      assert.strictEqual(ran.structured.stdout, "works\n", ran.text)
      const listed = await server.call("computer_list", {})
      const mine = listed.structured.computers.find((c: { computer_id: string }) => c.computer_id === id)
      assert.isDefined(mine, listed.text)
      assert.include(mine.warning, "its processes end with this kilntainers server", listed.text)
      const spawned = await server.call("spawn", { command: "sleep 30", background: true, computer_id: id })
      assert.isFalse(spawned.isError, spawned.text)
      assert.include(spawned.structured.note, "its processes end with this kilntainers server", spawned.text)
      await server.call("kill", { id: spawned.structured.pid, signal: "SIGKILL", computer_id: id })
    }, 120_000)
  }
)
