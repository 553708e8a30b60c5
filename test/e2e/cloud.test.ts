import { afterAll, assert, beforeAll, it } from "vitest"
import { existsSync } from "node:fs"
import * as E2BFake from "../support/E2BFake.js"
import type { FlyFake } from "../support/FlyFake.js"
import { startFlyFake } from "../support/FlyFake.js"
import { binPath, startServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

// The built CLI with --backend fly / e2b, configured only through its flags and environment, driven
// over stdio MCP, against the local fakes of the providers.
describeIf(bwrapWorks && existsSync(binPath), "bubblewrap (the fakes run commands in it) and a built CLI")("cloud backends through the CLI", () => {
  let fly: FlyFake | undefined
  let e2b: E2BFake.E2BFake | undefined
  beforeAll(async () => {
    fly = await startFlyFake({ token: "fly-e2e-token", app: "kt-e2e" })
    e2b = await E2BFake.start()
  })
  afterAll(async () => {
    await fly?.close()
    await e2b?.close()
  })

  const exercise = async (args: ReadonlyArray<string>, env: Record<string, string>) => {
    const server = await startServer(args, env)
    try {
      const exec = await server.call("sandbox_exec", { command: "echo from-the-cloud; echo oops >&2; exit 5" })
      assert.isFalse(exec.isError, exec.text)
      assert.strictEqual(exec.structured.stdout, "from-the-cloud\n")
      assert.strictEqual(exec.structured.stderr, "oops\n")
      assert.strictEqual(exec.structured.exit_code, 5)
      const wrote = await server.call("file_write", { path: "cloud.txt", content: "persisted" })
      assert.isFalse(wrote.isError, wrote.text)
      const read = await server.call("file_read", { path: "cloud.txt" })
      assert.strictEqual(read.structured.content, "persisted")
      const bg = await server.call("spawn", { command: "sleep 0.3; echo later", timeoutMs: 50 })
      const waited = await server.call("wait", { id: bg.structured.id, timeoutMs: 20_000 })
      assert.strictEqual(waited.structured.reason, "exited")
      const listed = await server.call("computer_list", {})
      assert.strictEqual(listed.structured.count, 1)
      return server.stderr()
    } finally {
      await server.client.close()
    }
  }

  it("serves MCP on Fly Machines, with the token only in the environment", async () => {
    const log = await exercise(
      ["--backend", "fly", "--fly-app", "kt-e2e", "--fly-api-url", fly!.url],
      { FLY_API_TOKEN: "fly-e2e-token" }
    )
    assert.notInclude(log, "fly-e2e-token")
    assert.isAbove(fly!.requests.length, 0)
  }, 120_000)

  it("serves MCP on E2B through the real SDK", async () => {
    const log = await exercise(
      ["--backend", "e2b", "--e2b-api-url", e2b!.url, "--e2b-sandbox-url", e2b!.url, "--e2b-home", E2BFake.FAKE_HOME],
      { E2B_API_KEY: e2b!.apiKey }
    )
    assert.notInclude(log, e2b!.apiKey)
    assert.isAbove(e2b!.requests.length, 0)
  }, 120_000)
})
