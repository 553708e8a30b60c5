import { assert, it } from "vitest"
import { existsSync } from "node:fs"
import { join } from "node:path"
import { binPath, root, startServer } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"

const built = existsSync(join(root, "wasm", "build", "toolset.json"))

describeIf(built && existsSync(binPath), "the WASM toolset (bash wasm/build.sh) and a built CLI")("the toolset backend through the CLI", () => {
  it("runs pipelines of WebAssembly tools over MCP, under its Kilntainers name too", async () => {
    for (const backend of ["toolset", "go_busybox"]) {
      const server = await startServer(["--backend", backend])
      try {
        const counted = await server.call("sandbox_exec", { command: "printf 'a\\nbb\\nccc\\n' > f.txt && cat f.txt | grep -v bb | wc -l" })
        assert.isFalse(counted.isError, counted.text)
        assert.strictEqual(counted.structured.stdout.trim(), "2")
        const sorted = await server.call("sandbox_exec", { command: "sort -r f.txt | head -n 1; ls /etc/passwd 2>&1 || echo no-host-files" })
        assert.match(sorted.structured.stdout, /^ccc\n/)
        assert.match(sorted.structured.stdout, /no-host-files/)
        const read = await server.call("file_read", { path: "f.txt" })
        assert.strictEqual(read.structured.content, "a\nbb\nccc\n")
      } finally {
        await server.client.close()
      }
    }
  }, 60_000)

  it("refuses --wasm-fuel with a clear message", async () => {
    const { spawnSync } = await import("node:child_process")
    const result = spawnSync(process.execPath, [binPath, "--backend", "wasm", "--wasm-fuel", "1000"], { input: "", encoding: "utf8", timeout: 20_000 })
    assert.strictEqual(result.status, 1)
    assert.match(result.stderr, /fuel/i)
    assert.strictEqual(result.stdout, "")
  })
})
