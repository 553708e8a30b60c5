import { spawnSync } from "node:child_process"
import { existsSync } from "node:fs"
import { assert, it } from "vitest"
import { binPath, startHttpServer } from "../support/McpHarness.js"
import { postJson } from "../support/RawHttp.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const start = (args: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  spawnSync(process.execPath, [binPath, "--transport", "http", "--port", "0", "--backend", "host", ...args], {
    encoding: "utf8",
    timeout: 20_000,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: "/tmp", ...env }
  })

const initialize = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "auth-attack", version: "1" } }
}

describeIf(existsSync(binPath), "a built CLI (npm run build)")("an empty or blank token is no authentication", () => {
  const blanks: ReadonlyArray<readonly [string, ReadonlyArray<string>, Record<string, string>]> = [
    ["--auth-token \"\"", ["--auth-token", ""], {}],
    ["--auth-token \" \"", ["--auth-token", " "], {}],
    ["--auth-token NBSP", ["--auth-token", "\u00a0"], {}],
    ["KILNTAINERS_AUTH_TOKEN=\"\"", [], { KILNTAINERS_AUTH_TOKEN: "" }],
    ["KILNTAINERS_AUTH_TOKEN=\" \"", [], { KILNTAINERS_AUTH_TOKEN: " " }],
    ["KILNTAINERS_AUTH_TOKEN=tab and ideographic space", [], { KILNTAINERS_AUTH_TOKEN: "\t\u3000" }]
  ]
  for (const [name, args, env] of blanks) {
    it(`refuses to start with ${name}`, () => {
      // On 0.0.0.0, as attacked; the first case also on loopback, where a token is just as meaningless.
      for (const host of name === blanks[0]![0] ? ["0.0.0.0", "127.0.0.1"] : ["0.0.0.0"]) {
        const refused = start(["--host", host, ...args], env)
        // A flag the command line cannot take is a usage error (2); a refused variable, 1.
        assert.include([1, 2], refused.status, refused.stderr)
        assert.match(refused.stderr, /^kilntainers: error: .*(auth-token|AUTH_TOKEN).*(must not be empty|is empty or blank)/m)
        assert.notMatch(refused.stderr, /MCP over HTTP|bearer auth/)
        assert.strictEqual(refused.stdout, "")
      }
    })
  }

  it("refuses a token no client could send in a bearer header", () => {
    const refused = start(["--host", "0.0.0.0"], { KILNTAINERS_AUTH_TOKEN: "two words" })
    assert.strictEqual(refused.status, 1)
    assert.match(refused.stderr, /RFC 6750 b64token/)
  })
})

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("bearer headers are parsed strictly", () => {
  it("accepts only `Bearer <token>`, and /healthz tells nothing but ok", async () => {
    const token = "s3cret-Token_1.2~3+4/5="
    const server = await startHttpServer(["--backend", "host"], { KILNTAINERS_AUTH_TOKEN: token })
    try {
      const refused = [
        `Bearer \u00a0`,
        "Bearer ",
        "Bearer",
        `Bearer  ${token}`,
        `Bearer ${token} extra`,
        `Bearer ${token},`,
        `Bearer\t${token}`,
        `Basic ${token}`,
        token,
        `Bearer ${token.slice(0, -1)}`,
        `Bearer ${token}x`
      ]
      for (const authorization of refused) {
        const answer = await postJson(server.port, { authorization }, initialize)
        assert.strictEqual(answer.status, 401, JSON.stringify(authorization))
      }
      assert.strictEqual((await postJson(server.port, {}, initialize)).status, 401)
      for (const scheme of ["Bearer", "bearer", "BEARER"]) {
        const accepted = await postJson(server.port, { authorization: `${scheme} ${token}` }, initialize)
        assert.strictEqual(accepted.status, 200, scheme)
      }
      // Three sessions are open now: an unauthenticated caller still learns nothing but "ok".
      const health = await fetch(`http://127.0.0.1:${server.port}/healthz`)
      assert.strictEqual(health.status, 200)
      assert.strictEqual(await health.text(), "{\"status\":\"ok\"}")
      assert.notInclude(server.stderr(), token)
    } finally {
      await server.stop()
    }
  }, 60_000)
})
