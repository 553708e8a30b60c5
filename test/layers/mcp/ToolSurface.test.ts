/**
 * The tool surface an agent pays for: the input part of tools/list (names, descriptions, input
 * schemas, annotations; not the output schemas, which describe results) is read
 * in every conversation, so it has a budget — and, cut to it, still says what a model must know.
 * Through the MCP SDK's client, as a host sees it.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { defaultSettings } from "../../../src/services/Settings.js"
import { connectInProcess } from "../../support/InProcessMcp.js"

/** The budget of issue 23: the input part of tools/list for its fifteen tools, as JSON, in bytes. */
const BUDGET = 8 * 1024
/** Tools added since, each with its own budget: what they add to every conversation is counted apart. */
const ADDED: Readonly<Record<string, number>> = { computer_checkpoint: 700, computer_expose: 600, computer_unexpose: 350, terminal: 700 }

type Listed = Awaited<ReturnType<Awaited<ReturnType<typeof connectInProcess>>["client"]["listTools"]>>["tools"][number]

/** What a tool costs a model: everything tools/list says of it but its output schema. */
const inputPart = ({ outputSchema: _outputSchema, ...rest }: Listed) => rest
const bytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value))

/** Facts a model needs to use each tool well, and where tools/list must say them (tool: [what, pattern]). */
const facts: ReadonlyArray<readonly [string, string, RegExp]> = [
  // The seeds' sandbox_exec description (seeds-inventory: Kilntainers' tool).
  ["sandbox_exec", "the shell it runs in", /Commands run in \/bin\/bash/],
  ["sandbox_exec", "its default timeout", /time out after 120 seconds by default/],
  ["sandbox_exec", "calls share files, not shell state", /persist/],
  ["sandbox_exec", "where home is", /\/home\/agent/],
  ["sandbox_exec", "how a file is written", /cat > /],
  ["sandbox_exec", "what a timeout does", /124/],
  ["sandbox_exec", "where long or interactive work goes", /spawn/],
  ["sandbox_exec", "the network setting", /[Nn]etwork/],
  ["spawn", "when it returns", /pattern/],
  ["spawn", "that a process runs on after the call", /background/],
  ["spawn", "the handle for later calls", /pid/],
  ["spawn", "terminals for interactive programs", /tty=true/],
  ["spawn", "its default wait", /default 10000/],
  ["spawn", "that a pattern is a regular expression", /RE2/],
  ["stdin", "the escapes it takes", /\\x03/],
  ["stdin", "closing stdin", /eof/],
  ["stdout", "reading on from a cursor", /next/],
  ["wait", "its outcomes", /quiet/],
  ["kill", "the default signal", /SIGTERM/],
  ["kill", "that SIGKILL ends the tree", /SIGKILL/],
  ["file_read", "relative paths", /working directory/],
  ["file_write", "binary content", /base64/],
  ["computer_create", "keeping a computer", /temporary/],
  ["computer_list", "the audit entries on request", /audit/],
  ["computer_create", "forking a checkpoint", /from_checkpoint/],
  ["computer_checkpoint", "that processes are not captured", /not its processes/],
  ["computer_checkpoint", "how long a checkpoint lives", /end with this session/],
  ["computer_expose", "that the computer needs no network", /no network/],
  ["computer_expose", "that a preview expires", /[Ee]xpires/],
  ["computer_unexpose", "what it takes", /preview_id or URL/],
  ["terminal", "how a person sees a terminal", /action=link/],
  ["terminal", "that a link expires", /expiring after minutes/],
  ["terminal", "what a person's take-over does to stdin", /your stdin waits/]
]

describe("the tool surface", () => {
  let tools: ReadonlyArray<Listed>
  let close: () => Promise<void>
  beforeAll(async () => {
    // A server with the defaults the CLI starts with: their numbers are in the descriptions.
    const { spawnTimeoutMs, maxTimeoutMs, timeout, killGraceMs } = defaultSettings
    const mcp = await connectInProcess({ spawnTimeoutMs, maxTimeoutMs, timeout, killGraceMs, network: false })
    close = mcp.close
    tools = (await mcp.client.listTools()).tools
  })
  afterAll(() => close?.())

  it(`the input part of tools/list stays within ${BUDGET} bytes, and each tool added since within its own`, () => {
    const original = tools.filter((tool) => !(tool.name in ADDED))
    const total = bytes(original.map(inputPart))
    const each = original.map((tool) => `${tool.name} ${bytes(inputPart(tool))}`).join(", ")
    assert.isAtMost(total, BUDGET, `tools/list without output schemas: ${total} bytes (${each})`)
    // Still every tool: nothing was cut by dropping one.
    assert.lengthOf(original, 15)
    for (const [name, budget] of Object.entries(ADDED)) {
      const tool = tools.find((t) => t.name === name)
      assert.isDefined(tool, name)
      assert.isAtMost(bytes(inputPart(tool!)), budget, name)
    }
  })

  it("says once, in the tool that needs it, what a model must know", () => {
    for (const [name, what, pattern] of facts) {
      const tool = tools.find((t) => t.name === name)
      assert.isDefined(tool, name)
      assert.match(JSON.stringify(inputPart(tool!)), pattern, `${name} says ${what}`)
    }
  })

  it("describes an argument only where its name, type and the tool's description leave a doubt", () => {
    const described = tools.flatMap((tool) =>
      Object.entries((tool.inputSchema.properties ?? {}) as Record<string, { description?: string }>)
        .flatMap(([field, schema]) => schema.description === undefined ? [] : [`${tool.name}.${field}: ${schema.description}`])
    )
    // Where a process runs: said on the two tools that start one, and nowhere else.
    assert.sameMembers(described.map((line) => line.split(":")[0]!), [
      "spawn.computer_id",
      "spawn.temporary",
      "sandbox_exec.computer_id",
      "sandbox_exec.temporary"
    ])
    // No Effect-internal titles (`int`, `between(2, 1000)`) or default refinement words either.
    assert.notMatch(JSON.stringify(tools.map(inputPart)), /"title":"(int|greaterThanOrEqualTo|between)|an integer/)
  })
})
