/**
 * The Tasks extension end to end (MCP 2026-07-28 over HTTP): a sandbox_exec, spawn or wait that
 * outlives a second becomes a task naming its process; tasks/get answers its status and then the
 * tool's result; tasks/cancel kills a command (sandbox_exec) or ends a wait (spawn, wait).
 */
import { existsSync } from "node:fs"
import { afterAll, assert, beforeAll, it } from "vitest"
import { binPath, type HttpServerProcess, startHttpServer, waitFor } from "../support/McpHarness.js"
import { modernRequest, type ModernOptions } from "../support/ModernHttp.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const token = "tasks-test-token_0123456789"

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("Tasks for long calls", () => {
  let server: HttpServerProcess
  const as = (key: string, tasks = true): ModernOptions => ({ token, tasks, meta: { "kilntainers/session": key } })
  const call = (name: string, args: Record<string, unknown>, options: ModernOptions) =>
    modernRequest(server.url, "tools/call", { name, arguments: args }, options)
  const get = (taskId: string, options: ModernOptions) => modernRequest(server.url, "tasks/get", { taskId }, options)
  /**
   * The session's default computer, made before the calls a test times: the budget is wall time,
   * and making a computer can take longer than a second on a loaded machine (a call that makes one
   * is a task then, and may name no process yet).
   */
  const ready = async (key: string) => {
    const made = await call("sandbox_exec", { command: "true" }, as(key, false))
    assert.strictEqual(made.result.structuredContent.exit_code, 0, JSON.stringify(made))
  }

  beforeAll(async () => {
    server = await startHttpServer(["--backend", "host"], { KILNTAINERS_AUTH_TOKEN: token })
  })
  afterAll(async () => {
    await server?.stop()
  })

  it("answers a quick call at once, and makes a long one a task whose result tasks/get gives once it ends", async () => {
    await ready("a")
    const quick = await call("sandbox_exec", { command: "echo quick" }, as("a"))
    assert.strictEqual(quick.result.resultType, "complete")
    assert.strictEqual(quick.result.structuredContent.stdout, "quick\n")
    const long = await call("sandbox_exec", { command: "sleep 3; echo slow; exit 4" }, as("a"))
    assert.strictEqual(long.result.resultType, "task", JSON.stringify(long))
    assert.strictEqual(long.result.status, "working")
    const process = long.result._meta["kilntainers/process"]
    assert.match(process.pid, /^p\d+$/)
    assert.strictEqual(process.computer_id, quick.result.structuredContent.computer_id)
    const taskId = long.result.taskId as string
    let task = await get(taskId, as("a"))
    assert.include(["working", "completed"], task.result.status)
    assert.isTrue(await waitFor(async () => (task = await get(taskId, as("a"))).result.status === "completed", 20_000))
    assert.strictEqual(task.result.result.structuredContent.stdout, "slow\n")
    assert.strictEqual(task.result.result.structuredContent.exit_code, 4)
    // Another session of the principal, or a request without its key, is refused the task.
    const elsewhere = await get(taskId, as("b"))
    assert.strictEqual(elsewhere.error?.code, -32602)
    assert.match(elsewhere.error!.message, /refused: it was not issued to this session/)
  }, 60_000)

  it("cancelling a sandbox_exec task kills its command; cancelling a spawn task ends the wait and leaves the process running", async () => {
    await ready("c")
    const exec = await call("sandbox_exec", { command: "sleep 60" }, as("c"))
    const spawn = await call("spawn", { command: "sleep 60", timeoutMs: 30_000 }, as("c"))
    assert.strictEqual(exec.result.resultType, "task")
    assert.strictEqual(spawn.result.resultType, "task")
    const cancelled = await modernRequest(server.url, "tasks/cancel", { taskId: exec.result.taskId }, as("c"))
    assert.isUndefined(cancelled.error)
    await modernRequest(server.url, "tasks/cancel", { taskId: spawn.result.taskId }, as("c"))
    assert.strictEqual((await get(spawn.result.taskId, as("c"))).result.status, "cancelled")
    const ps = async () => (await call("ps", {}, as("c", false))).result.structuredContent.processes as Array<{ pid: string; status: string; signal?: string }>
    const entry = async (pid: string) => (await ps()).find((p) => p.pid === pid)
    const killed = exec.result._meta["kilntainers/process"].pid as string
    assert.isTrue(await waitFor(async () => (await entry(killed))?.signal === "SIGKILL", 10_000), JSON.stringify(await ps()))
    assert.strictEqual((await entry(killed))?.status, "terminated")
    assert.strictEqual((await entry(spawn.result._meta["kilntainers/process"].pid))?.status, "running")
    const again = await modernRequest(server.url, "tasks/cancel", { taskId: exec.result.taskId }, as("c"))
    assert.match(again.error!.message, /has already been cancelled/)
  }, 60_000)

  it("turns a long wait into a task that completes when its pattern shows", async () => {
    await ready("d")
    const started = await call("spawn", { command: "sleep 2; echo ready-now; sleep 60", background: true }, as("d"))
    const pid = started.result.structuredContent.pid as string
    const wait = await call("wait", { id: pid, pattern: "ready-now", timeoutMs: 30_000 }, as("d"))
    assert.strictEqual(wait.result.resultType, "task")
    let task = await get(wait.result.taskId, as("d"))
    assert.isTrue(await waitFor(async () => (task = await get(wait.result.taskId, as("d"))).result.status === "completed", 20_000))
    assert.strictEqual(task.result.result.structuredContent.outcome, "matched")
  }, 60_000)

  it("gives a client that does not declare the extension today's result, however long the call", async () => {
    const plain = await call("sandbox_exec", { command: "sleep 2; echo waited" }, as("e", false))
    assert.strictEqual(plain.result.resultType, "complete")
    assert.strictEqual(plain.result.structuredContent.stdout, "waited\n")
  }, 60_000)
})
