/**
 * Attack: a toolset computer spins (`while true; do :; done`), or runs a 1,000-stage pipeline,
 * hoping to take the server's thread. The shell runs in a worker: the server answers other calls
 * meanwhile, the spinning call ends at its timeout, and stdin EOF still shuts the server down.
 */
import { spawn } from "node:child_process"
import { existsSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createInterface } from "node:readline"
import { assert, it } from "vitest"
import { binPath, root, startServer } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"

const built = existsSync(join(root, "wasm", "build", "toolset.json")) && existsSync(binPath)
const SPIN = "while true; do :; done"

/** A server over stdio driven by hand (the SDK's close() would SIGTERM it: here only EOF counts). */
const rawServer = (args: ReadonlyArray<string>) => {
  const child = spawn(process.execPath, [binPath, "--state-dir", mkdtempSync(join(tmpdir(), "kt-sec-")), ...args], {
    stdio: ["pipe", "pipe", "pipe"],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" }
  })
  child.stderr.resume()
  const waiting = new Map<number, (message: any) => void>()
  createInterface({ input: child.stdout }).on("line", (line) => {
    const message = JSON.parse(line)
    if (typeof message.id === "number") waiting.get(message.id)?.(message)
  })
  let next = 1
  const request = (method: string, params: unknown) => {
    const id = next++
    const answered = new Promise<any>((resolve) => waiting.set(id, resolve))
    child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n")
    return answered
  }
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
  return { child, request, exited }
}

const within = <A>(ms: number, promise: Promise<A>) =>
  Promise.race([promise, new Promise<"late">((resolve) => setTimeout(() => resolve("late"), ms).unref())])

describeIf(built, "the WASM toolset (bash wasm/build.sh) and a built CLI (npm run build)")("a spinning toolset computer", () => {
  it("does not stop the server from answering, and ends at the call's timeout", async () => {
    const server = await startServer(["--backend", "toolset"])
    try {
      const started = Date.now()
      const spinning = server.call("sandbox_exec", { command: SPIN, timeout: 3 })
      await new Promise((resolve) => setTimeout(resolve, 500))
      const before = Date.now()
      const other = await server.call("sandbox_exec", { command: "echo alive; ls /" })
      assert.isFalse(other.isError, other.text)
      assert.strictEqual(other.structured.stdout, "alive\nbin\netc\nhome\ntmp\n")
      assert.isBelow(Date.now() - before, 5_000, "another call is answered while a computer spins")
      const listed = await server.call("computer_list", {})
      assert.isFalse(listed.isError, listed.text)
      const spun = await spinning
      assert.isFalse(spun.isError, spun.text)
      assert.isTrue(spun.structured.timed_out)
      assert.strictEqual(spun.structured.exit_code, 124)
      assert.isBelow(Date.now() - started, 15_000, "the spinning call returns at its timeout")
      // The computer is still usable after.
      const after = await server.call("sandbox_exec", { command: "echo again" })
      assert.strictEqual(after.structured.stdout, "again\n")
    } finally {
      await server.client.close()
    }
  }, 60_000)

  it("ends at --wasm-timeout-ms, and kill ends a spinning background process", async () => {
    const server = await startServer(["--backend", "toolset", "--wasm-timeout-ms", "1000"])
    try {
      const started = Date.now()
      const limited = await server.call("sandbox_exec", { command: SPIN, timeout: 60 })
      assert.isBelow(Date.now() - started, 10_000)
      assert.match(limited.structured.stderr, /wall-clock limit of 1000 ms/)
      assert.notStrictEqual(limited.structured.exit_code, 0)
    } finally {
      await server.client.close()
    }
    const unlimited = await startServer(["--backend", "toolset"])
    try {
      const spawned = await unlimited.call("spawn", { command: SPIN, background: true })
      const id = spawned.structured.pid
      assert.strictEqual(spawned.structured.status, "running")
      const killed = await unlimited.call("kill", { id })
      assert.isFalse(killed.isError, killed.text)
      const waited = await unlimited.call("wait", { id, timeoutMs: 10_000 })
      assert.strictEqual(waited.structured.outcome, "exited")
      assert.strictEqual(waited.structured.status, "terminated")
      assert.strictEqual(waited.structured.signal, "SIGTERM")
    } finally {
      await unlimited.client.close()
    }
  }, 60_000)

  it("lets the server exit promptly on stdin EOF while a computer spins", async () => {
    const server = rawServer(["--backend", "toolset"])
    try {
      const init = await server.request("initialize", { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "attack", version: "1" } })
      assert.isDefined(init.result)
      server.child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n")
      const spawned = await server.request("tools/call", { name: "spawn", arguments: { command: SPIN, background: true } })
      assert.isFalse(spawned.result.isError === true, JSON.stringify(spawned))
      await new Promise((resolve) => setTimeout(resolve, 500))
      const pong = await within(5_000, server.request("tools/call", { name: "sandbox_exec", arguments: { command: "echo pong" } }))
      assert.notStrictEqual(pong, "late", "the server answers while a computer spins")
      const closedAt = Date.now()
      server.child.stdin.end()
      const code = await within(10_000, server.exited)
      assert.notStrictEqual(code, "late", "the server exits on stdin EOF")
      assert.isBelow(Date.now() - closedAt, 10_000)
    } finally {
      server.child.kill("SIGKILL")
    }
  }, 60_000)
})

describeIf(built, "the WASM toolset (bash wasm/build.sh) and a built CLI (npm run build)")("a memory-hungry toolset shell", () => {
  it("ends its own process, not the server", async () => {
    const server = await startServer(["--backend", "toolset"])
    try {
      const doubling = await server.call("sandbox_exec", { command: "x=a; while true; do x=\"$x$x\"; done", timeout: 60 })
      assert.isFalse(doubling.isError, doubling.text)
      assert.strictEqual(doubling.structured.exit_code, 1)
      assert.match(doubling.structured.stderr, /the shell ran out of memory/)
      const substitution = await server.call("sandbox_exec", { command: "x=$(yes | head -c 20000000); echo survived" })
      assert.match(substitution.structured.stderr, /command substitution: more than 16 MiB of output/)
      const alive = await server.call("sandbox_exec", { command: "echo alive" })
      assert.strictEqual(alive.structured.stdout, "alive\n")
    } finally {
      await server.client.close()
    }
  }, 60_000)
})

describeIf(built, "the WASM toolset (bash wasm/build.sh) and a built CLI (npm run build)")("a long toolset pipeline", () => {
  it("is refused at its limit without freezing the server; one within it runs", async () => {
    const server = await startServer(["--backend", "toolset"])
    try {
      const huge = Array.from({ length: 1000 }, () => "cat").join(" | ")
      const started = Date.now()
      const pending = server.call("sandbox_exec", { command: `echo in | ${huge}`, timeout: 60 })
      const other = await server.call("sandbox_exec", { command: "echo alive" })
      assert.strictEqual(other.structured.stdout, "alive\n")
      const refused = await pending
      assert.isBelow(Date.now() - started, 10_000)
      assert.notStrictEqual(refused.structured.exit_code, 0)
      assert.match(refused.structured.stderr, /pipeline of 1001 commands is over the limit of 32/)
      const within = Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? "cat" : "tr a-z A-Z")).join(" | ")
      const ran = await server.call("sandbox_exec", { command: `echo through | ${within} | tr A-Z a-z`, timeout: 60 })
      assert.isFalse(ran.isError, ran.text)
      assert.strictEqual(ran.structured.stdout, "through\n", ran.structured.stderr)
    } finally {
      await server.client.close()
    }
  }, 120_000)
})

describeIf(existsSync(binPath), "a built CLI (npm run build)")("the toolset's flags", () => {
  it("refuses a --wasm-max-disk that is not a size", async () => {
    const { spawnSync } = await import("node:child_process")
    const result = spawnSync(process.execPath, [binPath, "--backend", "toolset", "--wasm-max-disk", "lots"], { input: "", encoding: "utf8", timeout: 20_000 })
    assert.strictEqual(result.status, 1)
    assert.match(result.stderr, /--wasm-max-disk must be a size/)
    assert.strictEqual(result.stdout, "")
  })
})
