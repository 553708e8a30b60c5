import { afterAll, assert, beforeAll, it } from "vitest"
import { spawnSync } from "node:child_process"
import { existsSync } from "node:fs"
import * as E2BFake from "../support/E2BFake.js"
import * as ModalFake from "../support/ModalFake.js"
import type { FlyFake } from "../support/FlyFake.js"
import { startFlyFake } from "../support/FlyFake.js"
import { binPath, startServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

// The built CLI with --backend fly / e2b / modal, configured only through its flags and
// environment, driven over stdio MCP, against the local fakes of the providers: one exercise for
// every cloud backend, and what each provider's fake saw afterwards.

/** One agent's session on a cloud computer; answers the server's stderr. */
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
    const bg = await server.call("spawn", { command: "sleep 3; echo later", timeoutMs: 50 })
    assert.isFalse(bg.isError, bg.text)
    assert.strictEqual(bg.structured.status, "running", bg.text)
    const waited = await server.call("wait", { id: bg.structured.pid, timeoutMs: 20_000 })
    assert.isFalse(waited.isError, waited.text)
    assert.strictEqual(waited.structured.outcome, "exited")
    assert.strictEqual(waited.structured.exitCode, 0)
    const listed = await server.call("computer_list", {})
    assert.strictEqual(listed.structured.count, 1)
  } finally {
    await server.client.close()
  }
  return server.stderr()
}

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

  it("serves MCP on Fly Machines, with the token only in the environment", async () => {
    const log = await exercise(
      ["--backend", "fly", "--fly-app", "kt-e2e", "--fly-api-url", fly!.url],
      { FLY_API_TOKEN: "fly-e2e-token" }
    )
    assert.notInclude(log, "fly-e2e-token")
    assert.isAbove(fly!.requests.length, 0)
    assert.deepStrictEqual(fly!.violations, [], "every request and answer followed Fly's published contract")
    assert.strictEqual(fly!.requests.filter((request) => request.status === 429).length, 0, "within Fly's rate limit")
    assert.deepStrictEqual(fly!.live(), [], "the session's temporary machine went with the server")
  }, 120_000)

  it("serves MCP on E2B through the real SDK", async () => {
    const log = await exercise(
      ["--backend", "e2b", "--e2b-api-url", e2b!.url, "--e2b-sandbox-url", e2b!.url, "--e2b-home", E2BFake.FAKE_HOME, "--e2b-max-runtime", "3600"],
      { E2B_API_KEY: e2b!.apiKey }
    )
    assert.notInclude(log, e2b!.apiKey)
    assert.isAbove(e2b!.requests.length, 0)
    // No create or renewal asked E2B for more than the Base plan's hour.
    const asked = e2b!.requests.flatMap((r) => (r.body as { timeout?: unknown } | undefined)?.timeout ?? [])
    assert.isNotEmpty(asked)
    for (const timeout of asked) assert.isAtMost(Number(timeout), 3600)
    const refused = spawnSync(process.execPath, [binPath, "--backend", "e2b", "--e2b-max-runtime", "30"], {
      input: "",
      encoding: "utf8",
      timeout: 20_000,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", E2B_API_KEY: e2b!.apiKey }
    })
    assert.notStrictEqual(refused.status, 0)
    assert.match(refused.stderr, /--e2b-max-runtime must be at least 60 seconds \(got 30\)/)
  }, 120_000)
})

// Modal: the real `modal` SDK inside the CLI reaches the local gRPC fake through MODAL_SERVER_URL
// (the SDK's own variable).
describeIf(ModalFake.fakeWorks && existsSync(binPath), "bubblewrap and nsenter (the Modal fake runs commands in them) and a built CLI")("the Modal backend through the CLI", () => {
  let modal: ModalFake.ModalFake | undefined
  beforeAll(async () => {
    modal = await ModalFake.start()
  })
  afterAll(async () => {
    await modal?.close()
  })

  it("serves MCP on Modal through the real SDK, with the tokens only in the environment", async () => {
    const log = await exercise(["--backend", "modal", "--modal-app-name", "kt-e2e"], {
      MODAL_TOKEN_ID: modal!.tokenId,
      MODAL_TOKEN_SECRET: modal!.tokenSecret,
      MODAL_SERVER_URL: modal!.url
    })
    assert.notInclude(log, modal!.tokenSecret)
    assert.isAbove(modal!.callsOf("TaskExecStart").length, 0)
    assert.isAbove(modal!.callsOf("AuthTokenGet").length, 0, "the SDK authenticated with the tokens from the environment")
  }, 120_000)

  it("--allow-host reaches Modal as the sandbox's domain and CIDR allowlist, asked of its V1 backend", async () => {
    const before = modal!.callsOf("SandboxCreate").length
    await exercise(["--backend", "modal", "--modal-app-name", "kt-e2e-egress", "--allow-host", "pypi.org", "--allow-host", "*.github.com", "--allow-host", "10.1.2.3"], {
      MODAL_TOKEN_ID: modal!.tokenId,
      MODAL_TOKEN_SECRET: modal!.tokenSecret,
      MODAL_SERVER_URL: modal!.url
    })
    const created = modal!.callsOf("SandboxCreate").slice(before)
    assert.strictEqual(created.length, 1)
    assert.deepStrictEqual(created[0]!["definition"]["networkAccess"], {
      networkAccessType: 3,
      allowedCidrs: ["10.1.2.3/32"],
      allowedDomains: ["pypi.org", "*.github.com"]
    })
    const sandbox = [...modal!.sandboxes.values()].find((s) => s.definition["name"] === created[0]!["definition"]["name"])
    assert.isTrue(sandbox?.network.applied, "the fake applied the policy (a V1 sandbox)")
  }, 120_000)
})
