/**
 * Three replicas over one Docker engine behind nginx's round-robin, serving one MCP 2026-07-28
 * client whose consecutive requests land on different replicas. What needs no state of a replica
 * works on any of them: tools/list, a permanent computer (created by one, used, listed and deleted
 * through the others), the tasks of its own requests, and the processes of a permanent computer
 * (the computer holds them: any replica follows one another started). What a replica keeps for
 * itself — a session's temporary computers, tasks — needs that replica; see the README's "Replicas".
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { randomBytes } from "node:crypto"
import { existsSync } from "node:fs"
import { afterAll, assert, beforeAll, it } from "vitest"
import { dockerWorks, requirement, TEST_IMAGE } from "../support/Docker.js"
import { binPath, waitFor } from "../support/McpHarness.js"
import { nginxWorks, type Replicas, startReplicas } from "../support/Replicas.js"
import { describeIf } from "../support/Requirements.js"

const token = "replicas-test-token_0123456789"

describeIf(dockerWorks && nginxWorks && existsSync(binPath), `${requirement()}, nginx and a built CLI`)("replicas behind a round-robin load balancer", () => {
  let replicas: Replicas
  let client: Client

  const modernClient = async (url: string) => {
    const made = new Client({ name: "replicas-e2e", version: "1" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } })
    await made.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${token}` } } }))
    return made
  }

  beforeAll(async () => {
    replicas = await startReplicas(3, ["--backend", "docker", "--image", TEST_IMAGE], { KILNTAINERS_AUTH_TOKEN: token })
    client = await modernClient(replicas.url)
  }, 120_000)
  afterAll(async () => {
    await client?.close().catch(() => undefined)
    await replicas?.stop()
  })

  const call = async (name: string, args: Record<string, unknown>) => {
    const result = await client.callTool({ name, arguments: args })
    const text = (result.content as Array<{ text?: string }>).map((c) => c.text ?? "").join("")
    return { isError: result.isError === true, text, structured: result.structuredContent as Record<string, any> }
  }

  it("answers tools/list on every replica, and the client may cache it", async () => {
    const before = replicas.answeredBy().length
    for (let i = 0; i < 6; i++) {
      // Past the client's cache (the list is cacheable for an hour), to the replicas themselves.
      const tools = await client.listTools(undefined, { cacheMode: "refresh" })
      assert.include(tools.tools.map((tool) => tool.name), "sandbox_exec")
    }
    const ports = new Set(replicas.answeredBy().slice(before))
    assert.deepStrictEqual([...ports].sort(), replicas.replicas.map((replica) => replica.port).sort(), "each replica answered")
    const cached = replicas.answeredBy().length
    await client.listTools()
    assert.strictEqual(replicas.answeredBy().length, cached, "a cached list needs no request")
  }, 60_000)

  it("a process spawned through one replica is read by cursor, written, waited and killed through the others", async () => {
    const id = `kt-replica-p-${randomBytes(3).toString("hex")}`
    const created = await call("computer_create", { computer_id: id, temporary: false })
    assert.isFalse(created.isError, created.text)
    const [a, b, c] = await Promise.all(replicas.replicas.map((replica) => modernClient(replica.url)))
    const on = async (client: Client, name: string, args: Record<string, unknown>) => {
      const result = await client.callTool({ name, arguments: { computer_id: id, ...args } })
      const text = (result.content as Array<{ text?: string }>).map((part) => part.text ?? "").join("")
      assert.isFalse(result.isError === true, `${name}: ${text}`)
      return result.structuredContent as Record<string, any>
    }
    /** Reads stdout from `cursor` through `client` until it is `expected` (bounded). */
    const readUntil = async (client: Client, pid: string, cursor: number, expected: string) => {
      let read = await on(client, "stdout", { id: pid, stdoutCursor: cursor })
      for (let i = 0; i < 100 && read.stdout !== expected; i++) {
        await new Promise((resolve) => setTimeout(resolve, 200))
        read = await on(client, "stdout", { id: pid, stdoutCursor: cursor })
      }
      return read
    }
    try {
      const loop = await on(a!, "spawn", {
        command: "echo ready; while read line; do echo got $line; if [ \"$line\" = bye ]; then exit 4; fi; done",
        background: true
      })
      const pid = loop.pid as string
      assert.strictEqual((await readUntil(b!, pid, 0, "ready\n")).stdout, "ready\n")
      await on(c!, "stdin", { id: pid, input: "hello\n" })
      assert.strictEqual((await readUntil(b!, pid, 6, "got hello\n")).stdout, "got hello\n")
      await on(b!, "stdin", { id: pid, input: "bye\n" })
      const waited = await on(c!, "wait", { id: pid, timeoutMs: 30_000 })
      assert.strictEqual(waited.outcome, "exited")
      assert.strictEqual(waited.exitCode, 4)
      // The replica that started it sees the end the others caused.
      const seen = await readUntil(a!, pid, 0, "ready\ngot hello\ngot bye\n")
      assert.strictEqual(seen.status, "terminated")

      const sleeper = await on(a!, "spawn", { command: "sleep 600", background: true })
      const killed = await on(b!, "kill", { id: sleeper.pid, signal: "SIGKILL" })
      assert.strictEqual(killed.status, "terminated")
      const listed = await on(c!, "ps", { status: "all" })
      const entry = (listed.processes as Array<{ pid: string; status: string; signal?: string }>).find((p) => p.pid === sleeper.pid)
      assert.deepInclude(entry, { status: "terminated", signal: "SIGKILL" })
    } finally {
      await Promise.all([a, b, c].map((client) => client?.close().catch(() => undefined)))
      const deleted = await call("computer_delete", { computer_id: id })
      assert.isFalse(deleted.isError, deleted.text)
    }
  }, 240_000)

  it("creates a permanent computer on one replica and runs, lists and deletes it through the others", async () => {
    const id = `kt-replica-${randomBytes(3).toString("hex")}`
    const created = await call("computer_create", { computer_id: id, temporary: false })
    assert.isFalse(created.isError, created.text)
    try {
      const before = replicas.answeredBy().length
      const outputs: Array<string> = []
      for (let round = 0; round < 6; round++) {
        const ran = await call("sandbox_exec", { command: `echo round-${round} >> log.txt; wc -l < log.txt`, computer_id: id })
        assert.isFalse(ran.isError, ran.text)
        outputs.push(ran.structured.stdout.trim())
      }
      // Every round saw the file the rounds before it wrote, whichever replica ran it.
      assert.deepStrictEqual(outputs, ["1", "2", "3", "4", "5", "6"])
      assert.strictEqual(new Set(replicas.answeredBy().slice(before)).size, 3, "the rounds went to all three replicas")
      for (let i = 0; i < 3; i++) {
        const listed = await call("computer_list", {})
        assert.include(listed.structured.computers.map((c: { computer_id: string }) => c.computer_id), id)
      }
    } finally {
      const deleted = await call("computer_delete", { computer_id: id })
      assert.isFalse(deleted.isError, deleted.text)
    }
    // The replica that deleted it lists it no more; the others, which had it attached, see the engine
    // remove it and show it as lost (a call there would make it again: see the README's "Replicas").
    for (const replica of replicas.replicas) {
      const direct = await modernClient(replica.url)
      const states = async () => {
        const listed = await direct.callTool({ name: "computer_list", arguments: {} })
        return ((listed.structuredContent as Record<string, any>).computers as Array<{ computer_id: string; state: string }>)
          .filter((c) => c.computer_id === id).map((c) => c.state)
      }
      assert.isTrue(await waitFor(async () => ["", "lost"].includes((await states()).join(",")), 20_000), JSON.stringify(await states()))
      await direct.close()
    }
  }, 240_000)
})
