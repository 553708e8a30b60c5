/**
 * process-mcp's contract, as its own test suite (anonx3247/process-mcp test/host.test.ts) checks it,
 * against the built CLI over stdio on the host backend, configured as process-mcp is
 * (PROCESS_MODE=host): results read from the text content as JSON, `pid` the handle everywhere,
 * `status` "running" or "terminated", `stdout`/`stderr` strings, kill's words. Written here from
 * that contract; `scripts/process-mcp-suite.sh` runs their file itself. Our two documented
 * supersets are asserted as such: more than five tools, and stdin on pipes.
 */
import { afterAll, assert, beforeAll, it } from "vitest"
import { existsSync } from "node:fs"
import { binPath, type Harness, startServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("process-mcp's clients, unchanged", () => {
  let server: Harness
  const call = async (name: string, args: Record<string, unknown>) => {
    const result = await server.call(name, args)
    return { ...result, json: (() => {
      try {
        return JSON.parse(result.text)
      } catch {
        return undefined
      }
    })() }
  }

  beforeAll(async () => {
    server = await startServer([], { PROCESS_MODE: "host" })
  })
  afterAll(async () => {
    await server.client.close()
  })

  it("lists its five tools (among ours)", async () => {
    const names = (await server.client.listTools()).tools.map((t) => t.name)
    assert.includeMembers(names, ["kill", "ps", "spawn", "stdin", "stdout"])
  })

  it("spawns a simple command and returns its output", async () => {
    const { json } = await call("spawn", { command: "echo hello world" })
    assert.strictEqual(json.status, "terminated")
    assert.strictEqual(json.exitCode, 0)
    assert.match(json.stdout, /hello world/)
  })

  it("captures stderr and a non-zero exit code", async () => {
    assert.match((await call("spawn", { command: "echo error >&2" })).json.stderr, /error/)
    const failed = await call("spawn", { command: "exit 42" })
    assert.strictEqual(failed.json.status, "terminated")
    assert.strictEqual(failed.json.exitCode, 42)
  })

  it("lists a background process in ps by the pid spawn gave, and reads its output", async () => {
    const spawned = (await call("spawn", { command: "echo line1; echo line2; sleep 30", background: true })).json
    assert.strictEqual(spawned.status, "running")
    const found = (await call("ps", {})).json.find((p: { pid: string }) => p.pid === spawned.pid)
    assert.ok(found, "the background process is in ps")
    assert.strictEqual(found.status, "running")
    await sleep(500)
    const read = (await call("stdout", { id: spawned.pid, lines: 10 })).json
    assert.match(read.stdout, /line1/)
    assert.match(read.stdout, /line2/)
    await call("kill", { id: spawned.pid })
  })

  it("kills a running process and says so in its words", async () => {
    const { pid } = (await call("spawn", { command: "sleep 60", background: true })).json
    const killed = await call("kill", { id: pid, signal: "SIGTERM" })
    assert.match(killed.text, /killed successfully/)
    await sleep(300)
    const proc = (await call("ps", {})).json.find((p: { pid: string }) => p.pid === pid)
    if (proc) assert.strictEqual(proc.status, "terminated")
  })

  it("passes environment variables and the working directory", async () => {
    assert.match((await call("spawn", { command: "echo $MY_TEST_VAR", env: { MY_TEST_VAR: "test_value_123" } })).json.stdout, /test_value_123/)
    assert.match((await call("spawn", { command: "pwd", cwd: "/tmp" })).json.stdout, /\/tmp/)
  })

  it("moves a command past its timeout to the background", async () => {
    const { json } = await call("spawn", { command: "sleep 60", timeoutMs: 1000 })
    assert.strictEqual(json.status, "running")
    assert.ok(json.pid)
    await call("kill", { id: json.pid })
  })

  it("talks to a TTY process through stdin", async () => {
    const { pid } = (await call("spawn", { command: "cat", tty: true, background: true })).json
    await call("stdin", { id: pid, input: "hello from stdin\n" })
    await sleep(500)
    assert.match((await call("stdout", { id: pid })).json.stdout, /hello from stdin/)
    await call("kill", { id: pid })
  })

  it("accepts stdin on pipes too (our superset: process-mcp answered not_tty)", async () => {
    const { pid } = (await call("spawn", { command: "cat", background: true })).json
    const sent = await call("stdin", { id: pid, input: "test\n", eof: true })
    assert.isFalse(sent.isError)
    assert.strictEqual(sent.json.stdout, "test\n")
  })
})
