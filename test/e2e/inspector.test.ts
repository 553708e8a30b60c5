import { assert, it } from "vitest"
import { execFile } from "node:child_process"
import { existsSync, mkdtempSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { binPath, startHttpServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

// The MCP Inspector's CLI, an independent client. Its exit code is 0 even when a tool fails, so
// the assertions read its JSON output.
const require = createRequire(import.meta.url)
const inspectorCli = join(dirname(require.resolve("@modelcontextprotocol/inspector/package.json")), "cli", "build", "cli.js")

const inspector = (args: ReadonlyArray<string>) =>
  new Promise<any>((resolve, reject) => {
    execFile(process.execPath, [inspectorCli, "--cli", ...args], { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) return reject(new Error(`inspector failed: ${error.message}\n${stderr}`))
      try {
        resolve(JSON.parse(stdout))
      } catch {
        reject(new Error(`inspector printed no JSON: ${stdout}\n${stderr}`))
      }
    })
  })

const stdioTarget = () => [process.execPath, binPath, "--backend", "host", "--state-dir", mkdtempSync(join(tmpdir(), "kt-insp-"))]

describeIf(bwrapWorks && existsSync(binPath) && existsSync(inspectorCli), "bubblewrap, a built CLI and the MCP Inspector")("the MCP Inspector CLI as a client", () => {
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
  })

  it("lists and calls tools over Streamable HTTP", async () => {
    const server = await startHttpServer(["--backend", "host"])
    try {
      const listed = await inspector([server.url, "--transport", "http", "--method", "tools/list"])
      assert.include(listed.tools.map((t: any) => t.name), "sandbox_exec")
      const called = await inspector([server.url, "--transport", "http", "--method", "tools/call", "--tool-name", "spawn", "--tool-arg", "command=echo via-http"])
      assert.strictEqual(called.structuredContent.status, "terminated")
      assert.strictEqual(called.structuredContent.stdout, "via-http\n")
    } finally {
      await server.stop()
    }
  }, 90_000)
})
