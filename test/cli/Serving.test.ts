import { afterEach, assert, it } from "vitest"
import { type Harness, startServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"
import { built, runCli, tempDir } from "./CliRunner.js"

/** The network interfaces a computer sees, one per line. */
const INTERFACES = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"

describeIf(built && bwrapWorks, "bubblewrap and a built CLI (npm run build)")("the CLI's settings reach the server", () => {
  let server: Harness | undefined
  afterEach(async () => {
    await server?.client.close().catch(() => undefined)
    server = undefined
  })

  it("warns once about another backend's flags and serves anyway", async () => {
    const args = ["--backend", "host", "--state-dir", tempDir(), "--image", "alpine:3", "--docker-run-flag=--read-only", "--fly-app", "x"]
    const run = await runCli(args, { initialize: true })
    assert.strictEqual(run.code, 0, run.stderr)
    assert.include(run.stdout, `"serverInfo":{"name":"kilntainers"`)
    const warnings = run.stderr.split("\n").filter((line) => line.startsWith("kilntainers: warning:"))
    assert.deepStrictEqual(warnings, [
      "kilntainers: warning: --image, --docker-run-flag, --fly-app do not apply to --backend host: ignored"
    ])
    const quiet = await runCli([...args, "--log-level", "error"], { initialize: true })
    assert.strictEqual(quiet.stderr, "")
  })

  it("--no-network wins over KILNTAINERS_NETWORK=true: the computer has only loopback", async () => {
    server = await startServer(["--backend", "host", "--no-network", "--log-level", "error"], { KILNTAINERS_NETWORK: "true" })
    const off = await server.call("sandbox_exec", { command: INTERFACES })
    assert.strictEqual(off.structured.stdout, "lo\n")
    await server.client.close()
    server = await startServer(["--backend", "host", "--log-level", "error"], { KILNTAINERS_NETWORK: "true" })
    const on = await server.call("sandbox_exec", { command: INTERFACES })
    assert.notStrictEqual(on.structured.stdout, "lo\n", "KILNTAINERS_NETWORK=true alone gives the network")
  })

  it("KILNTAINERS_ENV sets every process's environment, one NAME=VALUE per line", async () => {
    server = await startServer(["--backend", "host", "--log-level", "error"], { KILNTAINERS_ENV: "FOO=bar\nGREETING=hello world" })
    const result = await server.call("sandbox_exec", { command: "echo \"$FOO/$GREETING\"" })
    assert.strictEqual(result.structured.stdout, "bar/hello world\n")
  })

  it("KILNTAINERS_SHELL picks the shell that runs command strings", async () => {
    server = await startServer(["--backend", "host", "--log-level", "error"], { KILNTAINERS_SHELL: "/bin/sh" })
    const result = await server.call("sandbox_exec", { command: "echo $0" })
    assert.strictEqual(result.structured.stdout, "/bin/sh\n")
  })
})
