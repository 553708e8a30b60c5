import { afterAll, assert, beforeAll, it } from "vitest"
import { spawn } from "node:child_process"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { binPath, type Harness, processesWith, startServer, waitFor } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const toolNames = [
  "computer_checkpoint",
  "computer_create",
  "computer_dashboard",
  "computer_delete",
  "computer_expose",
  "computer_factory_reset",
  "computer_list",
  "computer_restart",
  "computer_unexpose",
  "file_read",
  "file_write",
  "kill",
  "ps",
  "sandbox_exec",
  "spawn",
  "stdin",
  "stdout",
  "terminal",
  "wait"
]

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI (npm run build)")("stdio MCP server end to end", () => {
  let server: Harness

  beforeAll(async () => {
    server = await startServer(["--backend", "host"])
  })
  afterAll(async () => {
    await server?.client.close().catch(() => undefined)
  })

  it("lists every tool with input and output schemas and annotations", async () => {
    const { tools } = await server.client.listTools()
    assert.deepStrictEqual(tools.map((t) => t.name).sort(), toolNames)
    for (const tool of tools) {
      assert.strictEqual(tool.inputSchema.type, "object", tool.name)
      assert.strictEqual(tool.outputSchema?.type, "object", tool.name)
      // Hints at MCP's defaults are left out (tools/list is in every conversation); none reaches an open world.
      assert.isFalse(tool.annotations?.openWorldHint, tool.name)
      assert.isString(tool.description)
    }
    const hints = (name: string) => {
      const annotations = tools.find((t) => t.name === name)!.annotations
      return { readOnly: annotations?.readOnlyHint ?? false, destructive: annotations?.destructiveHint ?? true }
    }
    assert.isTrue(hints("ps").readOnly)
    assert.deepStrictEqual(hints("kill"), { readOnly: false, destructive: true })
    assert.deepStrictEqual(hints("spawn"), { readOnly: false, destructive: false })
  })

  it("sandbox_exec runs a command and reports stdout, stderr and exit code", async () => {
    const result = await server.call("sandbox_exec", { command: "echo out; echo err >&2; exit 3" })
    assert.isFalse(result.isError)
    assert.strictEqual(result.structured.stdout, "out\n")
    assert.strictEqual(result.structured.stderr, "err\n")
    assert.strictEqual(result.structured.exit_code, 3)
    assert.match(result.structured.computer_id, /^[a-z]+-[a-z]+-[0-9a-f]{4}$/)
    assert.deepStrictEqual(JSON.parse(result.text), result.structured)
  })

  it("sandbox_exec takes args, stdin, working_directory and env", async () => {
    const cat = await server.call("sandbox_exec", { args: ["cat"], stdin: "piped\n" })
    assert.strictEqual(cat.structured.stdout, "piped\n")
    const pwd = await server.call("sandbox_exec", { command: "pwd; echo $GREETING", working_directory: "/tmp", env: { GREETING: "hi" } })
    assert.strictEqual(pwd.structured.stdout, "/tmp\nhi\n")
  })

  it("sandbox_exec kills on timeout with exit code 124 and keeps the partial output", async () => {
    const result = await server.call("sandbox_exec", { command: "echo started; sleep 30", timeout: 1 })
    assert.strictEqual(result.structured.exit_code, 124)
    assert.isTrue(result.structured.timed_out)
    assert.strictEqual(result.structured.stdout, "started\n")
    assert.match(result.structured.stderr, /timed out after 1s/)
  })

  it("spawn returns exit code and output of a quick command, and running for a slow one", async () => {
    const quick = await server.call("spawn", { command: "echo hello; exit 7" })
    assert.strictEqual(quick.structured.status, "terminated")
    assert.strictEqual(quick.structured.exitCode, 7)
    assert.strictEqual(quick.structured.stdout, "hello\n")

    const slow = await server.call("spawn", { command: "echo begin; sleep 2; echo end", timeoutMs: 300 })
    assert.strictEqual(slow.structured.status, "running")
    assert.strictEqual(slow.structured.stdout, "begin\n")
    const waited = await server.call("wait", { id: slow.structured.pid, timeoutMs: 10_000 })
    assert.strictEqual(waited.structured.outcome, "exited")
    assert.strictEqual(waited.structured.exitCode, 0)
    assert.strictEqual(waited.structured.stdout, "end\n", "wait returns what arrived while it waited")
    const out = await server.call("stdout", { id: slow.structured.pid, stdoutCursor: slow.structured.next.stdout })
    assert.strictEqual(out.structured.stdout, "end\n")
  })

  it("stdin feeds a pipe and eof closes it", async () => {
    const cat = await server.call("spawn", { command: "tr a-z A-Z", background: true })
    const sent = await server.call("stdin", { id: cat.structured.pid, input: "shout\\n", eof: true })
    assert.strictEqual(sent.structured.bytes, 6)
    const waited = await server.call("wait", { id: cat.structured.pid, timeoutMs: 5_000 })
    assert.strictEqual(waited.structured.exitCode, 0)
    const out = await server.call("stdout", { id: cat.structured.pid })
    assert.strictEqual(out.structured.stdout, "SHOUT\n")
  })

  it("a TTY process renders its screen", async () => {
    const repl = await server.call("spawn", { command: "python3 -q", tty: true, background: true })
    const id = repl.structured.pid
    await server.call("wait", { id, pattern: ">>> ", timeoutMs: 10_000 })
    await server.call("stdin", { id, input: "import os; print(os.isatty(0), 6*7)\\r" })
    const matched = await server.call("wait", { id, pattern: "True 42", timeoutMs: 10_000 })
    assert.strictEqual(matched.structured.outcome, "matched")
    const screen = await server.call("stdout", { id })
    assert.isDefined(screen.structured.screen)
    assert.match(screen.structured.stdout, /True 42/)
    assert.notProperty(screen.structured, "next", "a TTY's stdout is its screen: no byte cursors")
    await server.call("stdin", { id, input: "", eof: true })
    const done = await server.call("wait", { id, timeoutMs: 10_000 })
    assert.strictEqual(done.structured.outcome, "exited")
  })

  it("ps lists processes and kill signals the whole group", async () => {
    const marker = `kt-e2e-kill-${process.pid}`
    const tree = await server.call("spawn", { command: `sleep 301 & sleep 302; : ${marker}`, background: true })
    const listed = await server.call("ps", {})
    assert.isTrue(listed.structured.processes.some((p: any) => p.pid === tree.structured.pid && p.status === "running"))
    const killed = await server.call("kill", { id: tree.structured.pid })
    assert.strictEqual(killed.structured.signal, "SIGTERM")
    assert.strictEqual(killed.structured.status, "terminated")
    assert.isTrue(await waitFor(async () => (await processesWith("sleep 301")).length === 0))
  })

  it("bad input gets a clear error, never a crash", async () => {
    const unknownId = await server.call("stdout", { id: "p99999" })
    assert.isTrue(unknownId.isError)
    assert.match(unknownId.text, /no process with id 'p99999'/)
    const wrongType = await server.call("spawn", { command: "true", timeoutMs: "soon" })
    assert.isTrue(wrongType.isError)
    assert.match(wrongType.text, /timeoutMs/)
    const outOfRange = await server.call("spawn", { command: "true", tty: true, cols: 5000 })
    assert.isTrue(outOfRange.isError)
    assert.match(outOfRange.text, /cols/)
    const missing = await server.call("spawn", {})
    assert.isTrue(missing.isError)
    const finished = await server.call("spawn", { command: "true" })
    const killFinished = await server.call("kill", { id: finished.structured.pid })
    assert.isTrue(killFinished.isError)
    assert.match(killFinished.text, /already finished/)
    const badSignal = await server.call("kill", { id: finished.structured.pid, signal: "SIGWHAT" })
    assert.isTrue(badSignal.isError)
    const badEscape = await server.call("stdin", { id: finished.structured.pid, input: "\\q" })
    assert.isTrue(badEscape.isError)
    const unknownTool = await server.call("no_such_tool", {})
    assert.isTrue(unknownTool.isError)
    // the server still answers
    const alive = await server.call("ps", {})
    assert.isFalse(alive.isError)
  })

  it("sends progress notifications while a call waits", async () => {
    const progress: Array<unknown> = []
    const result = await server.call("spawn", { command: "sleep 2.5", timeoutMs: 5_000 }, { onprogress: (p) => progress.push(p) })
    assert.strictEqual(result.structured.status, "terminated")
    assert.isAtLeast(progress.length, 1)
  })

  it("a cancelled wait ends the wait, not the process", async () => {
    const proc = await server.call("spawn", { command: "sleep 30", background: true })
    const controller = new AbortController()
    const pending = server.call("wait", { id: proc.structured.pid, timeoutMs: 30_000 }, { signal: controller.signal })
    setTimeout(() => controller.abort(), 300)
    const outcome = await pending.then(() => "resolved", () => "rejected")
    assert.strictEqual(outcome, "rejected")
    const ps = await server.call("ps", { status: "running" })
    assert.isTrue(ps.structured.processes.some((p: any) => p.pid === proc.structured.pid))
    await server.call("kill", { id: proc.structured.pid, signal: "SIGKILL" })
  })

  it("nothing but the protocol goes to stdout, and logs go to stderr", () => {
    // Every message the client parsed was valid JSON-RPC (else the calls above would fail);
    // the startup log line is on stderr.
    assert.match(server.stderr(), /kilntainers/)
  })
})

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI (npm run build)")("stdio shutdown", () => {
  it("ends every process when stdin closes and leaves nothing behind", async () => {
    const server = await startServer(["--backend", "host"])
    const marker = `kt-e2e-eof-${process.pid}`
    await server.call("spawn", { command: `sleep 303; : ${marker}`, background: true })
    await server.call("spawn", { command: `trap '' TERM; sleep 304; : ${marker}`, background: true })
    await server.call("spawn", { command: `sleep 305; : ${marker}`, tty: true, background: true })
    assert.isAtLeast((await processesWith(marker)).length, 3)
    const pid = server.pid!
    await server.client.close()
    assert.isTrue(await waitFor(() => {
      try {
        process.kill(pid, 0)
        return false
      } catch {
        return true
      }
    }, 15_000), "the server exits after stdin closes")
    assert.isTrue(await waitFor(async () => (await processesWith(marker)).length === 0, 5_000))
  })

  it("shuts down cleanly, ending its processes, when the client closes its end of stdout", async () => {
    const stateDir = mkdtempSync(join(tmpdir(), "kt-epipe-"))
    const child = spawn(process.execPath, [binPath, "--backend", "host", "--state-dir", stateDir], { stdio: ["pipe", "pipe", "pipe"] })
    let stderr = ""
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
    const marker = `kt-e2e-epipe-${process.pid}`
    const send = (message: unknown) => child.stdin.write(`${JSON.stringify(message)}\n`)
    send({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "epipe", version: "1" } } })
    send({ jsonrpc: "2.0", method: "notifications/initialized" })
    send({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "spawn", arguments: { command: `sleep 309; : ${marker}`, background: true } } })
    let answered = ""
    await new Promise<void>((resolve) => child.stdout.on("data", (chunk: Buffer) => (answered += chunk.toString()).includes(`"id":2`) && resolve()))
    assert.isAtLeast((await processesWith(marker)).length, 1)
    // The client stops reading: every later write by the server meets a closed pipe (EPIPE).
    child.stdout.destroy()
    for (let id = 3; id < 8; id++) send({ jsonrpc: "2.0", id, method: "tools/list" })
    const code = await Promise.race([exited, new Promise<"running">((resolve) => setTimeout(() => resolve("running"), 20_000))])
    if (code === "running") child.kill("SIGKILL")
    rmSync(stateDir, { recursive: true, force: true })
    assert.strictEqual(code, 0, stderr)
    assert.notMatch(stderr, /Unhandled 'error' event|EPIPE/)
    assert.isTrue(await waitFor(async () => (await processesWith(marker)).length === 0, 5_000))
  }, 40_000)

  it("ends every process on SIGTERM", async () => {
    const server = await startServer(["--backend", "host"])
    const marker = `kt-e2e-term-${process.pid}`
    await server.call("spawn", { command: `sleep 306; : ${marker}`, background: true })
    const pid = server.pid!
    process.kill(pid, "SIGTERM")
    assert.isTrue(await waitFor(() => {
      try {
        process.kill(pid, 0)
        return false
      } catch {
        return true
      }
    }, 15_000))
    assert.isTrue(await waitFor(async () => (await processesWith(marker)).length === 0, 5_000))
  })

  it("leaves nothing running even when the server is killed with SIGKILL", async () => {
    const server = await startServer(["--backend", "host"])
    const marker = `kt-e2e-sigkill-${process.pid}`
    await server.call("spawn", { command: `sleep 307; : ${marker}`, background: true })
    await server.call("spawn", { command: `sleep 308; : ${marker}`, tty: true, background: true })
    assert.isAtLeast((await processesWith(marker)).length, 2)
    process.kill(server.pid!, "SIGKILL")
    assert.isTrue(await waitFor(async () => (await processesWith(marker)).length === 0, 10_000))
  })

  it("reads every flag from its KILNTAINERS_* variable", async () => {
    const server = await startServer(["--backend", "host"], { KILNTAINERS_TIMEOUT: "7", KILNTAINERS_SHELL: "/bin/sh" })
    try {
      const { tools } = await server.client.listTools()
      const exec = tools.find((t) => t.name === "sandbox_exec")!
      assert.match(exec.description ?? "", /time out after 7 seconds/)
      assert.match(exec.description ?? "", /Commands run in \/bin\/sh/)
      const result = await server.call("sandbox_exec", { command: "sleep 30", timeout: undefined })
      assert.strictEqual(result.structured.exit_code, 124)
      assert.match(result.structured.stderr, /timed out after 7s/)
    } finally {
      await server.client.close()
    }
  }, 30_000)

  it("answers at once, but runs nothing when the sandbox cannot be set up, and says how to fix it", async () => {
    // The backend starts in the background (tools/list never waits for it); a backend that cannot
    // start fails closed: every call is refused with the reason, nothing runs unsandboxed.
    const broken = await startServer(["--backend", "host", "--bwrap-path", "/nonexistent/bwrap"])
    try {
      const { tools } = await broken.client.listTools()
      assert.isAbove(tools.length, 5)
      const refused = await broken.call("sandbox_exec", { command: "echo should not run" })
      assert.isTrue(refused.isError)
      assert.match(refused.text, /the host backend could not start: .*(bubblewrap|bwrap)/)
      assert.match(refused.text, /--unsafe-no-sandbox/)
      // The log line may reach stderr just after the refusal reaches stdout.
      for (let i = 0; i < 50 && !/the backend cannot start/.test(broken.stderr()); i++) await new Promise((resolve) => setTimeout(resolve, 100))
      assert.match(broken.stderr(), /the backend cannot start/)
    } finally {
      await broken.client.close()
    }
  })
})
