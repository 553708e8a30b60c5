/**
 * Issue 21 (and 23 item 3): on a computer that keeps its processes' output (host, Docker), a result
 * whose output was cut points `next` at the first byte it left out, and `stdout` from a cursor
 * returns exactly that range from the computer's store — through the MCP SDK's client and the built
 * CLI, so a client pages through a 5 MB output, middle included, byte for byte.
 */
import { afterAll, assert, it } from "vitest"
import { createHash } from "node:crypto"
import { engineWorks, requirement, TEST_IMAGE } from "../support/Docker.js"
import { type Harness, startServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

/** `seq -w 1 750000`: 750,000 lines of 7 bytes. */
const LINES = 750_000
const TOTAL = LINES * 7
const expected = () => {
  const parts: Array<string> = []
  for (let i = 1; i <= LINES; i++) parts.push(`${String(i).padStart(6, "0")}\n`)
  return parts.join("")
}

const backends = [
  { name: "host", args: ["--backend", "host"], available: bwrapWorks, needs: "bubblewrap" },
  { name: "docker", args: ["--backend", "docker", "--image", TEST_IMAGE], available: engineWorks("docker"), needs: requirement("docker") }
] as const

interface Page {
  readonly stdout: string
  readonly next?: { readonly stdout: number; readonly stderr: number }
  readonly omitted?: { readonly stdout?: number }
}

for (const backend of backends) {
  describeIf(backend.available, backend.needs)(`output read through cursors from the computer's store: ${backend.name}`, () => {
    let server: Harness | undefined
    afterAll(async () => {
      await server?.client.close().catch(() => undefined)
    })

    it("a 5 MB output is read in full through cursors, middle included, byte for byte", async () => {
      // sandbox_exec's output limit above the output, so the command runs to its end.
      server = await startServer([...backend.args, "--output-limit", String(16 * 1024 * 1024)])
      const want = expected()
      const exec = await server.call("sandbox_exec", { command: `seq -w 1 ${LINES}`, timeout: 120 })
      assert.isFalse(exec.isError, exec.text)
      const result = exec.structured as { stdout: string; exit_code: number; truncated?: boolean; stdout_bytes?: number; pid?: string; next?: { stdout: number } }
      assert.strictEqual(result.exit_code, 0)
      assert.isTrue(result.truncated)
      assert.strictEqual(result.stdout_bytes, TOTAL)
      // The inline head ends where the cursor points: the first byte left out.
      const head = result.stdout.split("\n[…")[0]!
      assert.strictEqual(result.next!.stdout, Buffer.byteLength(head), `next ${result.next!.stdout} follows the head shown`)
      assert.strictEqual(head, want.slice(0, head.length))

      // A range in the middle is exactly the bytes asked for.
      const middle = await server.call("stdout", { id: result.pid, stdoutCursor: 2_500_003, maxBytes: 70 })
      assert.isFalse(middle.isError, middle.text)
      const slice = middle.structured as Page
      assert.strictEqual(slice.stdout, want.slice(2_500_003, 2_500_073))
      assert.strictEqual(slice.next!.stdout, 2_500_073)
      assert.isUndefined(slice.omitted)

      // Paged from the inline result's cursor to the end: every byte once.
      const hash = createHash("sha256").update(head)
      let cursor = result.next!.stdout
      for (let page = 0; cursor < TOTAL && page < 100; page++) {
        const read = await server.call("stdout", { id: result.pid, stdoutCursor: cursor, maxBytes: 1_000_000 })
        assert.isFalse(read.isError, read.text)
        const got = read.structured as Page
        assert.isUndefined(got.omitted, `nothing left out at ${cursor}`)
        const bytes = Buffer.from(got.stdout, "utf8")
        assert.isAbove(bytes.length, 0)
        // The last page may say no more (nothing follows); every other says where the next begins.
        const next = got.next?.stdout ?? cursor + bytes.length
        assert.strictEqual(next, cursor + bytes.length, "a page is exactly the range asked")
        hash.update(bytes)
        cursor = next
      }
      assert.strictEqual(cursor, TOTAL)
      assert.strictEqual(hash.digest("hex"), createHash("sha256").update(want).digest("hex"))
    }, 300_000)
  })
}
