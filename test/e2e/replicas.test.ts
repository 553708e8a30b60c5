/**
 * Three replicas over one Docker engine behind nginx's round-robin, serving one MCP 2026-07-28
 * client whose consecutive requests land on different replicas. What needs no state of a replica
 * works on any of them: tools/list, a permanent computer (created by one, used, listed and deleted
 * through the others), the tasks of its own requests. What a replica keeps for itself — the
 * processes it started, a session's temporary computers — waits for the computer to hold its
 * process table (issue 21); see the README's "Replicas".
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
