/**
 * Three replicas over one Docker engine behind nginx's round-robin, serving one MCP 2026-07-28
 * client whose consecutive requests land on different replicas. What needs no state of a replica
 * works on any of them: tools/list, a permanent computer (created by one, used, listed and deleted
 * through the others), the tasks of its own requests, and the processes of a permanent computer
 * (the computer holds them: any replica follows one another started), and the tasks of long calls
 * on them (the task id carries its process: any replica answers it, the one that made it killed or
 * not). What a replica keeps for itself — a session's temporary computers — needs that replica;
 * see the README's "Protocol eras".
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { randomBytes } from "node:crypto"
import { existsSync } from "node:fs"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { dockerWorks, requirement, TEST_IMAGE } from "../support/Docker.js"
import { binPath, waitFor } from "../support/McpHarness.js"
import { type ModernAnswer, modernRequest, type ModernOptions } from "../support/ModernHttp.js"
import { nginxWorks, type Replicas, startReplicas } from "../support/Replicas.js"
import { describeIf } from "../support/Requirements.js"

const token = "replicas-test-token_0123456789"
/** A second principal's token (`--auth-principal mallory=…`): the replicas serve both. */
const malloryToken = "replicas-test-mallory_0123456789"

describeIf(dockerWorks && nginxWorks && existsSync(binPath), `${requirement()}, nginx and a built CLI`)("replicas behind a round-robin load balancer", () => {
  let replicas: Replicas
  let client: Client

  const modernClient = async (url: string) => {
    const made = new Client({ name: "replicas-e2e", version: "1" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } })
    await made.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${token}` } } }))
    return made
  }

  beforeAll(async () => {
    replicas = await startReplicas(3, ["--backend", "docker", "--image", TEST_IMAGE, "--auth-principal", "mallory=MALLORY_TOKEN"], {
      KILNTAINERS_AUTH_TOKEN: token,
      MALLORY_TOKEN: malloryToken
    })
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
    // remove it and show it as lost (a call there would make it again: see the README's "Protocol eras").
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

  describe("tasks of long calls", () => {
    const as = (key: string, tasks = true, bearer = token): ModernOptions => ({ token: bearer, tasks, meta: { "kilntainers/session": key } })
    const port = (url: string) => Number(new URL(url).port)
    const get = (url: string, taskId: string, options: ModernOptions) => modernRequest(url, "tasks/get", { taskId }, options)
    const cancel = (url: string, taskId: string, options: ModernOptions) => modernRequest(url, "tasks/cancel", { taskId }, options)
    const processOf = (made: ModernAnswer) => made.result._meta["kilntainers/process"] as { computer_id: string; pid: string }
    /** tasks/get through `url` until the task is no longer working (bounded), with the replicas that answered. */
    const settled = async (url: string, taskId: string, options: ModernOptions) => {
      const before = replicas.answeredBy().length
      let task = await get(url, taskId, options)
      for (let i = 0; i < 150 && task.result?.status === "working"; i++) {
        await new Promise((resolve) => setTimeout(resolve, 200))
        task = await get(url, taskId, options)
      }
      return { task, answeredBy: new Set(replicas.answeredBy().slice(before)) }
    }
    const withComputer = async (work: (id: string) => Promise<void>) => {
      const id = `kt-replica-t-${randomBytes(3).toString("hex")}`
      const created = await call("computer_create", { computer_id: id, temporary: false })
      assert.isFalse(created.isError, created.text)
      try {
        await work(id)
      } finally {
        const deleted = await call("computer_delete", { computer_id: id })
        assert.isFalse(deleted.isError, deleted.text)
      }
    }

    it("a sandbox_exec task made on one replica is answered by the others, with the result the call gives when it ends within it", async () => {
      await withComputer(async (id) => {
        const command = "sleep 3; seq 1 3; echo oops >&2; exit 3"
        const direct = await call("sandbox_exec", { command, computer_id: id })
        const made = await modernRequest(replicas.url, "tools/call", { name: "sandbox_exec", arguments: { command, computer_id: id } }, as("t1"))
        assert.strictEqual(made.result?.resultType, "task", JSON.stringify(made))
        const maker = replicas.answeredBy().at(-1)
        assert.deepStrictEqual(processOf(made).computer_id, id)
        const { answeredBy, task } = await settled(replicas.url, made.result.taskId, as("t1"))
        assert.strictEqual(task.result?.status, "completed", JSON.stringify(task))
        assert.isTrue([...answeredBy].some((p) => p !== maker), `tasks/get answered by ${[...answeredBy]} (the task's replica: ${maker})`)
        const { exec_duration_ms: took, ...result } = task.result.result.structuredContent
        const { exec_duration_ms: _took, ...expected } = direct.structured
        assert.deepStrictEqual(result, expected)
        assert.deepInclude(result, { stdout: "1\n2\n3\n", stderr: "oops\n", exit_code: 3 })
        assert.isAtLeast(took, 3000)
        // Each replica, asked directly, gives the same answer.
        for (const replica of replicas.replicas) {
          const again = await get(replica.url, made.result.taskId, as("t1"))
          assert.deepStrictEqual(again.result?.result?.structuredContent, task.result.result.structuredContent, `replica ${replica.port}`)
        }
      })
    }, 180_000)

    it("refuses a task id to another principal, another session and a forger, on every replica", async () => {
      await withComputer(async (id) => {
        const [a, b, c] = replicas.replicas.map((replica) => replica.url)
        const made = await modernRequest(a!, "tools/call", { name: "sandbox_exec", arguments: { command: "sleep 20", computer_id: id } }, as("t2"))
        assert.strictEqual(made.result?.resultType, "task", JSON.stringify(made))
        const taskId = made.result.taskId as string
        const mallory = await get(b!, taskId, as("t2", true, malloryToken))
        assert.strictEqual(mallory.error?.code, -32602)
        assert.match(mallory.error!.message, /refused: it was not issued to this session/)
        assert.match((await cancel(c!, taskId, as("t2", true, malloryToken))).error!.message, /refused/)
        assert.match((await get(c!, taskId, as("another-key"))).error!.message, /refused: it was not issued to this session/)
        // The same id naming another process: its signature no longer matches.
        const [payload, tag] = taskId.slice(4).split(".")
        const forged = Buffer.from(Buffer.from(payload!, "base64url").toString().replace(/"pid":"p\d+"/, "\"pid\":\"p999\"")).toString("base64url")
        assert.match((await cancel(b!, `kt1.${forged}.${tag}`, as("t2"))).error!.message, /refused: it was not issued to this session/)
        // Refused everywhere, the command ran on: its owner still has it.
        assert.strictEqual((await get(c!, taskId, as("t2"))).result?.status, "working")
        assert.isUndefined((await cancel(c!, taskId, as("t2"))).error)
      })
    }, 180_000)

    it("cancelling a sandbox_exec task on another replica kills its command everywhere; a spawn task's process runs on", async () => {
      await withComputer(async (id) => {
        const [a, b, c] = replicas.replicas.map((replica) => replica.url)
        const exec = await modernRequest(a!, "tools/call", { name: "sandbox_exec", arguments: { command: "sleep 60", computer_id: id } }, as("t3"))
        const spawn = await modernRequest(a!, "tools/call", { name: "spawn", arguments: { command: "sleep 60", timeoutMs: 30_000, computer_id: id } }, as("t3"))
        assert.strictEqual(exec.result?.resultType, "task", JSON.stringify(exec))
        assert.strictEqual(spawn.result?.resultType, "task", JSON.stringify(spawn))
        assert.isUndefined((await cancel(b!, exec.result.taskId, as("t3"))).error)
        for (const url of [a!, b!, c!]) assert.strictEqual((await get(url, exec.result.taskId, as("t3"))).result?.status, "cancelled", url)
        assert.match((await cancel(c!, exec.result.taskId, as("t3"))).error!.message, /has already been cancelled/)
        const ps = async (url: string) => {
          const listed = await modernRequest(url, "tools/call", { name: "ps", arguments: { computer_id: id, status: "all" } }, as("t3", false))
          return listed.result.structuredContent.processes as Array<{ pid: string; status: string; signal?: string }>
        }
        const killed = (await ps(c!)).find((p) => p.pid === processOf(exec).pid)
        assert.deepInclude(killed, { status: "terminated", signal: "SIGKILL" })
        // A spawn task cancelled where no wait of it runs: nothing ends, its process runs on.
        assert.isUndefined((await cancel(c!, spawn.result.taskId, as("t3"))).error)
        assert.strictEqual((await ps(b!)).find((p) => p.pid === processOf(spawn).pid)?.status, "running")
        assert.strictEqual((await get(b!, spawn.result.taskId, as("t3"))).result?.status, "working")
        // Where its wait runs, cancelling ends it.
        assert.isUndefined((await cancel(a!, spawn.result.taskId, as("t3"))).error)
        assert.strictEqual((await get(a!, spawn.result.taskId, as("t3"))).result?.status, "cancelled")
        await modernRequest(b!, "tools/call", { name: "kill", arguments: { id: processOf(spawn).pid, computer_id: id, signal: "SIGKILL" } }, as("t3", false))
        const ended = await settled(c!, spawn.result.taskId, as("t3"))
        assert.strictEqual(ended.task.result?.status, "completed")
        assert.deepInclude(ended.task.result.result.structuredContent, { status: "terminated", signal: "SIGKILL" })
      })
    }, 180_000)

    it("a wait task is answered by another replica once its process ends, as the wait itself answers", async () => {
      await withComputer(async (id) => {
        const [a, b] = replicas.replicas.map((replica) => replica.url)
        const on = (url: string, name: string, args: Record<string, unknown>, tasks: boolean) =>
          modernRequest(url, "tools/call", { name, arguments: { computer_id: id, ...args } }, as("t5", tasks))
        const started = await on(a!, "spawn", { command: "echo before; sleep 3; echo after; exit 5", background: true }, false)
        const pid = started.result.structuredContent.pid as string
        assert.isTrue(await waitFor(async () => (await on(b!, "stdout", { id: pid }, false)).result.structuredContent.stdout === "before\n", 10_000))
        const waiting = await on(a!, "wait", { id: pid, timeoutMs: 30_000 }, true)
        assert.strictEqual(waiting.result?.resultType, "task", JSON.stringify(waiting))
        const there = await settled(b!, waiting.result.taskId, as("t5"))
        const here = await settled(a!, waiting.result.taskId, as("t5"))
        const { waitedMs: _there, ...fromProcess } = there.task.result.result.structuredContent
        const { waitedMs: _here, ...fromWait } = here.task.result.result.structuredContent
        // Output from where the wait began (after "before"), as the wait that ran gives it.
        assert.deepInclude(fromWait, { outcome: "exited", exitCode: 5, stdout: "after\n" })
        assert.deepStrictEqual(fromProcess, fromWait)
      })
    }, 180_000)

    // Last: it leaves two replicas.
    it("a task outlives the replica that made it (SIGKILL): the others answer it", async () => {
      await withComputer(async (id) => {
        const maker = replicas.replicas[0]!
        // The computer opened on it first (a call that must attach it first may name its process late).
        const warm = await modernRequest(maker.url, "tools/call", { name: "sandbox_exec", arguments: { command: "true", computer_id: id } }, as("t4", false))
        assert.strictEqual(warm.result?.structuredContent?.exit_code, 0, JSON.stringify(warm))
        const made = await modernRequest(maker.url, "tools/call", {
          name: "sandbox_exec",
          arguments: { command: "sleep 5; echo survived", computer_id: id }
        }, as("t4"))
        assert.strictEqual(made.result?.resultType, "task", JSON.stringify(made))
        await maker.stop("SIGKILL")
        assert.strictEqual(maker.child.signalCode, "SIGKILL")
        const { answeredBy, task } = await settled(replicas.url, made.result.taskId, as("t4"))
        assert.strictEqual(task.result?.status, "completed", JSON.stringify(task))
        assert.deepInclude(task.result.result.structuredContent, { stdout: "survived\n", exit_code: 0, computer_id: id })
        assert.notInclude([...answeredBy], port(maker.url))
        assert.isAtLeast(answeredBy.size, 1)
      })
    }, 180_000)
  })
})

