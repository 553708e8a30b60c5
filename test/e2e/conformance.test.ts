/**
 * The official MCP conformance suite (@modelcontextprotocol/conformance, on Node 22) against the
 * HTTP server: every server scenario passes except those that call the suite's own reference
 * tools, prompts and resources, listed in conformance/expected-failures.yml. The suite fails the run
 * on an unexpected failure and on a listed scenario that passes (a stale entry).
 */
import { execFile } from "node:child_process"
import { existsSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { assert, it } from "vitest"
import { conformanceBin, describeTools, haveConformance, node22 } from "../support/CiTools.js"
import { binPath, startHttpServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const expectedFailures = join(dirname(fileURLToPath(import.meta.url)), "conformance", "expected-failures.yml")

const conformance = (url: string) =>
  new Promise<{ code: number; output: string }>((resolve) => {
    // Its results directory goes to a scratch working directory, not the checkout.
    execFile(node22, [conformanceBin, "server", "--url", url, "--expected-failures", expectedFailures], {
      cwd: mkdtempSync(join(tmpdir(), "kt-conformance-")),
      timeout: 600_000,
      maxBuffer: 64 * 1024 * 1024
    }, (error, stdout, stderr) => resolve({ code: typeof error?.code === "number" ? error.code : error ? 1 : 0, output: stdout + stderr }))
  })

describeIf(bwrapWorks && existsSync(binPath) && haveConformance, `bubblewrap, a built CLI and ${describeTools}`)("the MCP conformance suite", () => {
  it("passes every server scenario that needs none of the suite's own tools, logging-set-level included", async () => {
    const server = await startHttpServer(["--backend", "host"])
    try {
      const run = await conformance(server.url)
      const summary = run.output.slice(run.output.indexOf("=== SUMMARY ==="))
      assert.strictEqual(run.code, 0, summary)
      assert.include(run.output, "Baseline check passed")
      for (const scenario of ["server-initialize", "logging-set-level", "ping", "tools-list", "resources-list", "prompts-list", "dns-rebinding-protection"]) {
        assert.match(summary, new RegExp(`✓ ${scenario}: \\d+ passed, 0 failed`), scenario)
      }
    } finally {
      await server.stop()
    }
  }, 660_000)
})
