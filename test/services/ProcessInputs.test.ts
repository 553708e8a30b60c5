import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Schema } from "effect"
import * as ProcessTools from "../../src/layers/mcp/ProcessTools.js"
import * as Tool from "../../src/layers/mcp/Tool.js"
import {
  decodeInput,
  ExecInput,
  KillInput,
  ListFilter,
  ReadInput,
  SpawnInput,
  StdinInput,
  WaitInput
} from "../../src/services/ProcessInputs.js"
import { Settings } from "../../src/services/Settings.js"

type AnyInput = Schema.Schema<any, any>

/** The one line that says why the input is refused, or "accepted". */
const refusal = (name: string, schema: AnyInput, input: unknown) =>
  Effect.map(Effect.either(decodeInput(name, schema)(input)), (result) => (result._tag === "Left" ? result.left.message : "accepted"))

describe("the Processes service's inputs", () => {
  it.effect("decoding parses what a check parses anyway: a pattern compiled, stdin escapes as bytes, a signal by its name", () =>
    Effect.gen(function*() {
      const waited = yield* decodeInput("wait", WaitInput)({ id: "p1", pattern: "ready|done" })
      assert.strictEqual(waited.pattern?.source, "ready|done")
      assert.isTrue(waited.pattern !== undefined && waited.pattern.find("all done").pipe((found) => found._tag === "Some"))
      assert.isUndefined((yield* decodeInput("wait", WaitInput)({ id: "p1", pattern: "" })).pattern, "the empty pattern is none")
      const written = yield* decodeInput("stdin", StdinInput)({ id: "p1", input: "q\\x03\\r" })
      assert.deepStrictEqual([...written.input!], [0x71, 0x03, 0x0d])
      assert.strictEqual((yield* decodeInput("kill", KillInput)({ id: "p1", signal: "int" })).signal, "SIGINT")
      assert.strictEqual((yield* decodeInput("kill", KillInput)({ id: "p1", signal: "9" })).signal, "SIGKILL")
      const exec = yield* decodeInput("sandbox_exec", ExecInput)({ command: "cat", stdin: "héllo" })
      assert.deepStrictEqual(exec.stdin, new TextEncoder().encode("héllo"))
    }))

  it.effect("every check is the Schema's, said in one line that names the argument and its rule", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [string, AnyInput, unknown, string | RegExp]> = [
        ["spawn", SpawnInput, { command: "  " }, "invalid arguments for spawn: command must not be empty"],
        ["spawn", SpawnInput, { command: "a\u0000b" }, /command must not contain NUL characters/],
        ["spawn", SpawnInput, { command: "ls", cwd: "/x\u0000" }, /cwd must not contain NUL characters/],
        ["spawn", SpawnInput, { command: "ls", env: { "A=B": "x" } }, /env: "A=B" is not a valid environment variable name/],
        ["spawn", SpawnInput, { command: "ls", cols: 1 }, "invalid arguments for spawn: cols must be an integer from 2 to 1000"],
        ["spawn", SpawnInput, { command: "ls", timeoutMs: -1 }, "invalid arguments for spawn: timeoutMs must be an integer ≥ 0"],
        ["spawn", SpawnInput, { command: "ls", computer_id: "Bad_Id" }, /computer_id "Bad_Id" is not valid: use 1-63 characters/],
        ["spawn", SpawnInput, { command: "ls", pattern: "(" }, /pattern is not a valid regular expression/],
        ["spawn", SpawnInput, { command: "ls", bogus: 1 }, /bogus is not an argument of spawn \(it takes command, cwd, env, /],
        ["wait", WaitInput, { id: "p1", pattern: "(?=x)" }, /pattern uses lookahead/],
        ["wait", WaitInput, { id: "p1", quietMs: 0 }, "invalid arguments for wait: quietMs must be an integer ≥ 1"],
        ["stdin", StdinInput, { id: "p1", input: "bad \\q escape" }, /\\q/],
        ["stdin", StdinInput, { id: "p1", input: "" }, "invalid arguments for stdin: input is empty and eof is not set: nothing to send"],
        ["stdout", ReadInput, { id: "p1", lines: 0 }, "invalid arguments for stdout: lines must be an integer from 1 to 100000"],
        ["kill", KillInput, { id: "p1", signal: "SIGNOPE" }, /unknown signal/],
        ["ps", ListFilter, { limit: 0 }, "invalid arguments for ps: limit must be an integer ≥ 1"],
        ["ps", ListFilter, { status: "zombie" }, /status must be one of "running", "terminated", "all"/],
        ["sandbox_exec", ExecInput, { command: "x", args: ["y"] }, /Cannot provide both command and args/],
        ["sandbox_exec", ExecInput, { command: "" }, /Provide either command \(a shell command line\) or args/],
        ["sandbox_exec", ExecInput, { args: ["echo", "a\u0000b"] }, /args\[1\] must not contain NUL/],
        ["sandbox_exec", ExecInput, { command: "pwd", working_directory: "tmp" }, /working_directory must be an absolute path/],
        ["sandbox_exec", ExecInput, { command: "x", timeout: 0 }, /timeout must be a number ≥ 1/],
        ["sandbox_exec", ExecInput, { command: "cat", stdin: "x".repeat(8 * 1024 * 1024 + 1) }, /stdin is larger than 8388608 bytes/]
      ]
      for (const [name, schema, input, expected] of cases) {
        const said = yield* refusal(name, schema, input)
        if (typeof expected === "string") assert.strictEqual(said, expected, JSON.stringify(input).slice(0, 80))
        else assert.match(said, expected, JSON.stringify(input).slice(0, 80))
        assert.notInclude(said, "Expected", "Effect's generic wording never reaches a caller")
      }
      assert.strictEqual(yield* refusal("spawn", SpawnInput, { command: "ls", tty: true, cols: 120, rows: 40 }), "accepted")
      assert.strictEqual(yield* refusal("sandbox_exec", ExecInput, { args: ["ls", "-la"], working_directory: "" }), "accepted")
      assert.strictEqual(yield* refusal("stdin", StdinInput, { id: "p1", eof: true }), "accepted")
    }))

  it("a tool's input is the service's Schema with words for clients where they need them: the same arguments", () => {
    const tools = ProcessTools.make(Settings.make({}))
    const pairs: ReadonlyArray<readonly [string, AnyInput]> = [
      ["spawn", SpawnInput],
      ["ps", ListFilter],
      ["stdin", StdinInput],
      ["stdout", ReadInput],
      ["kill", KillInput],
      ["wait", WaitInput],
      ["sandbox_exec", ExecInput]
    ]
    for (const [name, schema] of pairs) {
      const tool = tools.find((candidate) => candidate.name === name)!
      const listed = Tool.jsonSchema(tool.input)
      const plain = Tool.jsonSchema(schema)
      const properties = listed["properties"] as Record<string, { description?: string }>
      assert.deepStrictEqual(Object.keys(properties), Object.keys(plain["properties"] as object), name)
      // Words only where the name, the type and the tool's description leave a doubt (the tools/list
      // budget, test/layers/mcp/ToolSurface.test.ts); each of those is a sentence, never empty.
      for (const [argument, property] of Object.entries(properties)) {
        if (property.description !== undefined) assert.isAbove(property.description.trim().length, 0, `${name}.${argument}`)
      }
    }
    // The described Schema still checks: what the service's refuses, the tool's refuses.
    const input = (name: string): AnyInput => tools.find((candidate) => candidate.name === name)!.input
    assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(input("spawn"))({ command: "  " })))
    assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(input("sandbox_exec"))({ command: "x", args: ["y"] })))
    assert.isTrue(Either.isLeft(Schema.decodeUnknownEither(input("wait"))({ id: "p1", pattern: "(" })))
    assert.isTrue(Either.isRight(Schema.decodeUnknownEither(input("stdin"))({ id: "p1", input: "\\r" })))
  })
})
