import { afterAll, assert, beforeAll, it } from "vitest"
import { existsSync } from "node:fs"
import { join } from "node:path"
import { binPath, root } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

/** The bench's own modules (plain .mjs, loaded as the bench loads them). */
interface Agent {
  readonly calls: number
  readonly bytes: number
  reset(): void
  close(): Promise<void>
}
interface Task {
  readonly name: string
  readonly kilntainers: (agent: Agent) => Promise<{ ok: boolean; note?: string }>
}
const load = async () => {
  const servers = join(root, "bench/agent-tasks/servers.mjs")
  const tasks = join(root, "bench/agent-tasks/tasks.mjs")
  return {
    startOurs: (await import(servers)).startOurs as (options: { bin: string }) => Promise<Agent>,
    tasks: (await import(tasks)).tasks as ReadonlyArray<Task>
  }
}

/**
 * bench/agent-tasks keeps us honest: an agent's workflows succeed in at most this many calls.
 * (Calls, not bytes or times: those belong to the bench's table.)
 */
const bounds: ReadonlyArray<readonly [string, number]> = [
  // spawn, curl, and kill with the request log.
  ["web server", 3],
  // spawn's input: typed at start (the REPL), or once the pattern showed vim drew the file.
  ["Python REPL", 1],
  ["vim", 1]
]

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI (npm run build)")("agent tasks (bench/agent-tasks) against kilntainers", () => {
  let agent: Agent
  let tasks: ReadonlyArray<Task>

  beforeAll(async () => {
    const loaded = await load()
    tasks = loaded.tasks
    agent = await loaded.startOurs({ bin: binPath })
  })
  afterAll(async () => {
    await agent?.close()
  })

  for (const [name, most] of bounds) {
    it(`${name}: succeeds in at most ${most} calls`, async () => {
      const task = tasks.find((t) => t.name.startsWith(name))
      assert.isDefined(task, name)
      agent.reset()
      const outcome = await task!.kilntainers(agent)
      assert.isTrue(outcome.ok, outcome.note)
      assert.isAtMost(agent.calls, most)
      assert.isAbove(agent.bytes, 0)
    }, 30_000)
  }
})
