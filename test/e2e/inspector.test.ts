import { assert, it } from "vitest"
import { execFile } from "node:child_process"
import { existsSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describeTools, haveInspector, inspectorBin, node22 } from "../support/CiTools.js"
import { binPath, startHttpServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

// The MCP Inspector's CLI (its current release, on Node 22), an independent client. It prints the
// result as JSON on stdout (its own failures as a JSON line on stderr), and exits 5 for a tool
// result with isError, so the assertions read both.
const inspector = (args: ReadonlyArray<string>) =>
  new Promise<any>((resolve, reject) => {
    execFile(node22, [inspectorBin, "--cli", ...args], { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      try {
        const json = stdout.trim() !== "" ? stdout : stderr.trim().split("\n").pop() ?? ""
        resolve({ ...JSON.parse(json), exitCode: error?.code ?? 0 })
      } catch {
        reject(new Error(`inspector printed no JSON (${error?.message ?? "exit 0"}): ${stdout}\n${stderr}`))
      }
    })
  })

const stdioTarget = () => [process.execPath, binPath, "--backend", "host", "--state-dir", mkdtempSync(join(tmpdir(), "kt-insp-"))]

describeIf(bwrapWorks && existsSync(binPath) && haveInspector, `bubblewrap, a built CLI and ${describeTools}`)("the MCP Inspector CLI as a client", () => {
  it("lists the tools over stdio", async () => {
    const listed = await inspector([...stdioTarget(), "--method", "tools/list"])
    const names = listed.tools.map((t: any) => t.name)
    for (const name of ["sandbox_exec", "spawn", "ps", "stdin", "stdout", "kill", "wait", "computer_list", "file_read"]) {
      assert.include(names, name)
    }
  })

  it("calls a tool over stdio", async () => {
    const result = await inspector([...stdioTarget(), "--method", "tools/call", "--tool-name", "sandbox_exec", "--tool-arg", "command=echo inspected; exit 3"])
    assert.strictEqual(result.structuredContent.stdout, "inspected\n")
    assert.strictEqual(result.structuredContent.exit_code, 3)
    const failed = await inspector([...stdioTarget(), "--method", "tools/call", "--tool-name", "stdout", "--tool-arg", "id=p404"])
    assert.isTrue(failed.isError)
    assert.strictEqual(failed.exitCode, 5)
    assert.match(failed.content[0].text, /^ProcessNotFound: no process with id 'p404'/)
  })

  it("lists and calls tools over Streamable HTTP with the bearer token, and is refused without it", async () => {
    const token = "inspector-test-token_0123456789"
    const server = await startHttpServer(["--backend", "host"], { KILNTAINERS_AUTH_TOKEN: token })
    try {
      const bearer = ["--header", `Authorization: Bearer ${token}`]
      const listed = await inspector([server.url, "--transport", "http", ...bearer, "--method", "tools/list"])
      assert.include(listed.tools.map((t: any) => t.name), "sandbox_exec")
      const called = await inspector([server.url, "--transport", "http", ...bearer, "--method", "tools/call", "--tool-name", "spawn", "--tool-arg", "command=echo via-http"])
      assert.strictEqual(called.structuredContent.status, "terminated")
      assert.strictEqual(called.structuredContent.stdout, "via-http\n")
      // Without the token the server answers 401, and the Inspector (which would start OAuth) says so.
      const refused = await inspector([server.url, "--transport", "http", "--method", "tools/list"])
      assert.strictEqual(refused.error?.code, "auth_required")
      assert.notProperty(refused, "tools")
    } finally {
      await server.stop()
    }
  }, 90_000)
})
