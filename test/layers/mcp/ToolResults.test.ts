import { assert, describe, it } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js"
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { Effect, Fiber, Layer, TestClock } from "effect"
import * as McpServer from "../../../src/layers/mcp/McpServer.js"
import * as Runtime from "../../../src/layers/Runtime.js"
import { Settings, type SettingsShape } from "../../../src/services/Settings.js"
import * as ScriptedBackend from "../../support/ScriptedBackend.js"

const encoder = new TextEncoder()

/** An MCP client talking to an in-process server over the scripted backend. */
const connected = (overrides: Partial<SettingsShape> = {}) =>
  Effect.gen(function*() {
    const scripted = yield* ScriptedBackend.make()
    const context = yield* Layer.build(Runtime.layer(Settings.make({ killGraceMs: 50, ...overrides }), scripted.layer, "test"))
    const server = yield* McpServer.makeServer(Settings.make({ killGraceMs: 50, ...overrides }), McpServer.ready(context))
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair()
    yield* Effect.promise(() => server.connect(serverSide))
    const client = new Client({ name: "results-test", version: "1" })
    yield* Effect.acquireRelease(Effect.promise(() => client.connect(clientSide)), () => Effect.promise(() => client.close()))
    const call = (name: string, args: Record<string, unknown>, options: { progress?: boolean } = {}) =>
      Effect.promise(async () => {
        const result = await client.request(
          { method: "tools/call", params: { name, arguments: args, ...(options.progress ? { _meta: { progressToken: 1 } } : {}) } },
          CallToolResultSchema,
          options.progress ? { onprogress: () => {} } : {}
        )
        assert.strictEqual(result.content.length, 1, "one content item")
        const text = result.content[0]!.type === "text" ? result.content[0]!.text : ""
        return { isError: result.isError === true, text, json: result.isError ? undefined : JSON.parse(text), structured: result.structuredContent as any }
      })
    return { call, client, scripted }
  })

describe("tool results an agent can live on", () => {
  it.scoped("compact JSON, equal to structuredContent, with process-mcp's fields and nothing empty", () =>
    Effect.gen(function*() {
      const { call } = yield* connected()
      const result = yield* call("spawn", { command: "fail-fast" })
      assert.notInclude(result.text, "\n  ")
      assert.deepStrictEqual(result.json, result.structured)
      const { computer_id, ...rest } = result.json
      assert.isString(computer_id)
      assert.deepStrictEqual(rest, { pid: "p1", status: "terminated", exitCode: 1, stdout: "", stderr: "boom\n" })
      // The session's default computer is named once, not in every result.
      const again = yield* call("spawn", { command: "fail-fast" })
      assert.deepStrictEqual(again.json, { pid: "p2", status: "terminated", exitCode: 1, stdout: "", stderr: "boom\n" })
    }))

  it.scoped("one handle everywhere: spawn's pid is what ps lists and kill takes; kill reports in process-mcp's words", () =>
    Effect.gen(function*() {
      const { call, scripted } = yield* connected()
      const spawned = yield* call("spawn", { command: "sleep 30", background: true })
      assert.strictEqual(spawned.json.status, "running")
      assert.deepStrictEqual(spawned.json.next, { stdout: 0, stderr: 0 })
      const ps = yield* call("ps", {})
      assert.isArray(ps.json, "ps text is the list itself")
      assert.deepStrictEqual(ps.structured.processes, ps.json)
      const entry = ps.json.find((p: any) => p.pid === spawned.json.pid)
      assert.strictEqual(entry.status, "running")
      assert.strictEqual(entry.osPid, scripted.spawned.length)
      const killed = yield* call("kill", { id: spawned.json.pid, signal: "SIGTERM" })
      assert.match(killed.text, /killed successfully/)
      assert.strictEqual(killed.json.sent, "SIGTERM")
      assert.strictEqual(killed.json.signal, "SIGTERM")
      assert.strictEqual(killed.json.status, "terminated")
      assert.notProperty(killed.json, "exitSignal")
      assert.notProperty(killed.json, "reason", "ended by the signal sent: no reason repeating it")
    }))

  it.scoped("ps lists the running ones and the last few finished, with filters", () =>
    Effect.gen(function*() {
      const { call } = yield* connected({ psFinished: 2 })
      for (let i = 0; i < 4; i++) yield* call("spawn", { command: "fail-fast" })
      const server = yield* call("spawn", { command: "server", background: true })
      const ps = yield* call("ps", {})
      assert.deepStrictEqual(ps.json.map((p: any) => p.pid), [server.json.pid, "p4", "p3"])
      assert.strictEqual(ps.structured.hidden, 2)
      assert.deepStrictEqual((yield* call("ps", { status: "terminated", limit: 3 })).json.map((p: any) => p.pid), ["p4", "p3", "p2"])
      assert.deepStrictEqual((yield* call("ps", { status: "running" })).json.map((p: any) => p.pid), [server.json.pid])
      const bad = yield* call("ps", { computer_id: "Not A Slug" })
      assert.isTrue(bad.isError)
    }))

  it.scoped("long output keeps head and tail within the inline budget, and the marker counts exactly what was cut", () =>
    Effect.gen(function*() {
      const { call, scripted } = yield* connected({ inlineBytes: 1000 })
      const spawned = yield* call("spawn", { command: "server", background: true })
      const lines = Array.from({ length: 20_000 }, (_, i) => `${i + 1}\n`).join("")
      yield* scripted.spawned[0]!.emit({ _tag: "Stdout", data: encoder.encode(lines) })
      const total = encoder.encode(lines).length
      // The process's drain fiber takes the output in its own time: read once it has all of it.
      let read = yield* call("stdout", { id: spawned.json.pid, stdoutCursor: 0 })
      for (let i = 0; i < 100 && read.json.next.stdout < total; i++) {
        yield* Effect.yieldNow()
        read = yield* call("stdout", { id: spawned.json.pid, stdoutCursor: 0 })
      }
      const cut = total - 1000
      assert.strictEqual(read.json.omitted.stdout, cut)
      assert.include(read.json.stdout, `[… ${cut} bytes omitted …]`)
      assert.isTrue(read.json.stdout.startsWith("1\n2\n3\n"))
      assert.isTrue(read.json.stdout.endsWith("19999\n20000\n"))
      assert.strictEqual(read.json.next.stdout, total)
      assert.notProperty(read.json.omitted, "stderr")
    }))

  it.scoped("stdin answers with the output that follows, in one call", () =>
    Effect.gen(function*() {
      const { call } = yield* connected()
      const repl = yield* call("spawn", { command: "echo-stdin", background: true })
      const answer = yield* Effect.fork(call("stdin", { id: repl.json.pid, input: "1+1\\n" }))
      yield* TestClock.adjust("1 second")
      const result = yield* Fiber.join(answer)
      assert.strictEqual(result.json.stdout, "1+1\n")
      assert.strictEqual(result.json.bytes, 4)
      assert.strictEqual(result.json.status, "running")
    }))

  it.scoped("spawn returns as soon as the output matches its ready pattern", () =>
    Effect.gen(function*() {
      const { call, scripted } = yield* connected()
      const started = yield* Effect.fork(call("spawn", { command: "server", pattern: "listening on \\d+", timeoutMs: 30_000 }))
      for (let i = 0; i < 100 && scripted.spawned.length === 0; i++) yield* Effect.yieldNow()
      yield* scripted.spawned[0]!.emit({ _tag: "Stdout", data: encoder.encode("booting\nlistening on 8080\n") })
      const result = yield* Fiber.join(started)
      assert.strictEqual(result.json.status, "running")
      assert.strictEqual(result.json.match, "listening on 8080")
      assert.include(result.json.stdout, "listening on 8080")
    }))

  it.scoped("a wait longer than a client's request timeout is capped without progress, and says so", () =>
    Effect.gen(function*() {
      const { call } = yield* connected({ maxCallMs: 50_000, maxTimeoutMs: 600_000 })
      const started = yield* Effect.fork(call("spawn", { command: "server", timeoutMs: 120_000 }))
      yield* TestClock.adjust("50 seconds")
      const result = yield* Fiber.join(started)
      assert.strictEqual(result.json.status, "running")
      assert.match(result.json.note, /waited 50000 ms, not 120000/)
      const withProgress = yield* Effect.fork(call("spawn", { command: "server", timeoutMs: 120_000 }, { progress: true }))
      yield* TestClock.adjust("60 seconds")
      assert.isNull(withProgress.unsafePoll(), "with progress it waits longer")
      yield* TestClock.adjust("60 seconds")
      assert.notProperty((yield* Fiber.join(withProgress)).json, "note")
    }))

  it.scoped("tools/list carries descriptions, not Effect's internal titles", () =>
    Effect.gen(function*() {
      const { client } = yield* connected()
      const { tools } = yield* Effect.promise(() => client.listTools())
      const text = JSON.stringify(tools)
      assert.notMatch(text, /"title":"(int|greaterThanOrEqualTo|between)/)
      // Every tool is described; its arguments where they need it (ToolSurface.test.ts).
      for (const tool of tools) assert.isString(tool.description, tool.name)
      const spawn = tools.find((tool) => tool.name === "spawn")!
      assert.isString((spawn.outputSchema?.properties as any)?.pid?.description)
    }))

  it.scoped("bad arguments are told in one line a model can act on, without repeating the values", () =>
    Effect.gen(function*() {
      const { call } = yield* connected()
      const cases: ReadonlyArray<readonly [string, Record<string, unknown>, string]> = [
        ["spawn", { command: 5 }, "spawn: command must be a string (got a number)"],
        ["spawn", {}, "spawn: command is required: a string"],
        ["spawn", { command: "ls", cols: 0 }, "spawn: cols must be an integer from 2 to 1000"],
        ["spawn", { command: "ls", env: { A: 1 } }, "spawn: env.A must be a string (got a number)"],
        ["wait", { id: "p1", timeoutMs: "soon" }, "wait: timeoutMs must be an integer ≥ 0 (got a string)"],
        ["stdout", { id: "p1", maxBytes: -3, lines: 0 }, "stdout: lines must be an integer from 1 to 100000; maxBytes must be an integer ≥ 1"]
      ]
      for (const [tool, args, said] of cases) {
        const result = yield* call(tool, args)
        assert.isTrue(result.isError)
        assert.strictEqual(result.text, `InvalidInput: invalid arguments for ${said}`)
      }
      const unknown = yield* call("spawn", { command: "ls", secret: "hunter2" })
      assert.match(unknown.text, /^InvalidInput: invalid arguments for spawn: secret is not an argument of spawn \(it takes command, cwd, env, /)
      assert.notInclude(unknown.text, "hunter2")
      assert.notInclude((yield* call("spawn", { command: ["hunter2"] })).text, "hunter2")
    }))

  it.scoped("computer_list names what the backend cannot do, and computer_checkpoint answers Unsupported there", () =>
    Effect.gen(function*() {
      const { call } = yield* connected()
      const listed = yield* call("computer_list", {})
      // The scripted backend: no pty, held processes, files, network control, checkpoints or previews.
      assert.deepStrictEqual(listed.json.unsupported, ["pty", "heldProcesses", "files", "networkControl", "checkpoints", "previews"])
      const created = yield* call("computer_create", {})
      const refused = yield* call("computer_checkpoint", { computer_id: created.json.computer_id })
      assert.isTrue(refused.isError)
      assert.match(refused.text, /^Unsupported: .*checkpoints/)
    }))
})
