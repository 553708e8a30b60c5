import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { connectInProcess } from "../support/InProcessMcp.js"

type Mcp = Awaited<ReturnType<typeof connectInProcess>>

describe("tool inputs an attacker or a confused model might send", () => {
  let mcp: Mcp
  let running: string

  beforeAll(async () => {
    mcp = await connectInProcess()
    running = (await mcp.call("spawn", { command: "sleep 10", background: true })).structured.pid
  })
  afterAll(async () => {
    await mcp?.close()
  })

  it("non-object arguments get an isError result, never a JSON-RPC error", async () => {
    for (const args of [null, [], ["ls"], "ls", 42, true]) {
      for (const tool of ["sandbox_exec", "ps", "computer_list"]) {
        const result = await mcp.call(tool, args)
        assert.isTrue(result.isError, `${tool} ${JSON.stringify(args)}`)
        assert.match(result.text, /^InvalidInput: invalid arguments for \w+: arguments must be an object of named arguments, not /)
      }
    }
    const nameless = await mcp.request(undefined as never, {})
    assert.isTrue(nameless.isError)
  })

  it("NUL is refused in every string that becomes a C string, saying so", async () => {
    const cases: ReadonlyArray<readonly [string, Record<string, unknown>, RegExp]> = [
      ["spawn", { command: "echo a\u0000b" }, /command must not contain NUL/],
      ["spawn", { command: "pwd", cwd: "/tmp\u0000/x" }, /cwd must not contain NUL/],
      ["spawn", { command: "env", env: { A: "1\u00002" } }, /value of A contains a NUL/],
      ["spawn", { command: "env", env: { "A\u0000B": "1" } }, /not a valid environment variable name/],
      ["sandbox_exec", { command: "echo a\u0000b" }, /command must not contain NUL/],
      ["sandbox_exec", { args: ["echo", "a\u0000b"] }, /args\[1\] must not contain NUL/],
      ["sandbox_exec", { command: "pwd", working_directory: "/tmp\u0000" }, /working_directory must not contain NUL/],
      ["file_read", { path: "a\u0000b" }, /NUL/],
      ["file_write", { path: "a\u0000b", content: "x" }, /NUL/],
      ["computer_create", { computer_id: "a\u0000b" }, /computer_id "a\\u0000b" is not valid|is not valid/],
      ["ps", { computer_id: "a\u0000b" }, /computer_id "a\\u0000b" is not valid/],
      ["stdout", { id: running, computer_id: "a\u0000b" }, /is not valid/],
      ["wait", { id: running, pattern: "a\u0000b", timeoutMs: 10 }, /pattern must not contain NUL/],
      ["kill", { id: running, signal: "TERM\u0000" }, /unknown signal/]
    ]
    for (const [tool, args, expected] of cases) {
      const result = await mcp.call(tool, args)
      assert.isTrue(result.isError, `${tool} ${JSON.stringify(args)}`)
      assert.match(result.text, expected, `${tool} ${JSON.stringify(args)}`)
    }
  })

  it("environment names must be non-empty and free of '=' and NUL, and the error says the rule", async () => {
    for (const name of ["", "A=B", "="]) {
      for (const tool of ["spawn", "sandbox_exec"]) {
        const result = await mcp.call(tool, { command: "env", env: { [name]: "x" } })
        assert.isTrue(result.isError, `${tool} env ${JSON.stringify(name)}`)
        assert.include(result.text, "a name must be non-empty and contain neither '=' nor NUL")
      }
    }
    const fine = await mcp.call("sandbox_exec", { command: "env", env: { "MY.VAR-1": "x", A_B: "" } })
    assert.isFalse(fine.isError, fine.text)
  })

  it("ps validates computer_id like every other tool", async () => {
    for (const id of ["", "UPPER", "-bad-", "a".repeat(64), "../x"]) {
      const result = await mcp.call("ps", { computer_id: id })
      assert.isTrue(result.isError, JSON.stringify(id))
      assert.match(result.text, /is not valid: use 1-63 characters of a-z, 0-9 and '-'/)
    }
    assert.isFalse((await mcp.call("ps", { computer_id: "ok-computer" })).isError)
  })

  it("a base64 check that could backtrack quadratically answers at once", async () => {
    const start = performance.now()
    const result = await mcp.call("file_write", { path: "x", content: `${" ".repeat(2_000_000)}!`, encoding: "base64" })
    assert.isTrue(result.isError)
    assert.match(result.text, /not valid base64/)
    assert.isBelow(performance.now() - start, 2_000)
  })
})
