import { chmodSync, existsSync, symlinkSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { assert, it } from "vitest"
import { describeIf } from "../support/Requirements.js"
import { built, errorLine, runCli, tempDir } from "./CliRunner.js"

/** Runs the CLI (stdin closed) and returns its error line after checking exit code 1. */
const refusal = async (args: ReadonlyArray<string>, env: Record<string, string> = {}) => {
  const run = await runCli(args, { env })
  assert.strictEqual(run.code, 1, `${args.join(" ")}: ${run.stderr}`)
  assert.strictEqual(run.stdout, "")
  return errorLine(run)
}

describeIf(built, "a built CLI (npm run build)")("startup checks", () => {
  it("checks ports and numbers without a stack trace", async () => {
    assert.include(await refusal(["--transport", "http", "--port", "99999"]), "--port must be between 0 and 65535 (got 99999)")
    assert.include(await refusal(["--transport", "http", "--port=-1"]), "--port must be between 0 and 65535 (got -1)")
    assert.include(await refusal(["--timeout", "0"]), "--timeout must be at least 1 second (got 0)")
    assert.include(await refusal(["--output-limit", "0"]), "--output-limit must be at least 1 byte (got 0)")
    assert.include(await refusal(["--sandbox-timeout", "86401", "--backend", "modal"]), "--sandbox-timeout must be between 1 and 86400 seconds")
    assert.include(await refusal(["--memory", "lots"]), "--memory must be a size such as 512m or 2g (got 'lots')")
    assert.include(await refusal(["--cpu", "0"]), "--cpu must be greater than 0 (got 0)")
    assert.include(await refusal(["--backend", "e2b", "--e2b-api-url", "ftp://x"]), "--e2b-api-url must be an http:// or https:// URL")
    for (const backend of ["docker", "auto"]) {
      assert.include(await refusal(["--backend", backend, "--docker-host", "tcp://[nope"]), "--docker-host: invalid engine address")
    }
  })

  it("refuses HTTP options under stdio, as Kilntainers does, but not their variables", async () => {
    for (const args of [["--host", "0.0.0.0"], ["--port", "9090"], ["--session-timeout", "60"], ["--auth-token", "t"], ["--allow-unauthenticated-http"]]) {
      const line = await refusal(args)
      assert.include(line, `${args[0]} is only valid with --transport http`)
      assert.include(line, "stdio")
    }
    assert.include(await refusal(["--host", "0.0.0.0", "--port", "1"]), "--host, --port are only valid with --transport http")
    // A variable shared by several configurations is no mistake: stdio starts (and ends with stdin).
    const run = await runCli(["--backend", "toolset", "--log-level", "error"], { env: { KILNTAINERS_PORT: "9090", KILNTAINERS_AUTH_TOKEN: "x" } })
    assert.notInclude(run.stderr, "only valid with --transport http")
  })

  it("refuses a non-loopback HTTP listener without a token", async () => {
    assert.include(await refusal(["--transport", "http", "--host", "0.0.0.0"]), "a non-loopback --host (0.0.0.0)")
  })

  it("refuses principals whose token is missing, unusable, shared or whose name is taken", async () => {
    const http = ["--transport", "http", "--backend", "toolset", "--port", "0"]
    const env = { KILNTAINERS_AUTH_TOKEN: "alice-t0ken", BOB: "b0b-token", CAROL: "b0b-token", BLANK: " " }
    assert.include(
      await refusal([...http, "--auth-principal", "bob=NOPE"], env),
      "--auth-principal bob=NOPE: the server's environment has no NOPE"
    )
    assert.include(await refusal([...http, "--auth-principal", "bob=BLANK"], env), "--auth-principal bob=BLANK: BLANK is empty or blank")
    assert.include(
      await refusal([...http, "--auth-principal", "bob=BOB", "--auth-principal", "carol=CAROL"], env),
      "--auth-principal carol=CAROL: CAROL is another principal's token too"
    )
    assert.include(await refusal([...http, "--auth-principal", "default=BOB"], env), "and not default or anonymous")
    assert.include(await refusal([...http, "--auth-principal", "b b=BOB"], env), "a principal is named with letters")
    assert.include(
      await refusal([...http, "--max-body-memory", "128", "--max-body-memory-per-principal", "200"], env),
      "--max-body-memory-per-principal (200 MiB) is more than --max-body-memory (128 MiB)"
    )
    assert.include(await refusal([...http, "--max-body-memory", "64"], env), "--max-body-memory must be at least 96 MiB (got 64)")
  })

  it("refuses both tool description flags with Kilntainers' words", async () => {
    assert.include(
      await refusal(["--tool-instruction-override", "custom", "--extended-tool-instruction", "extra"]),
      "Cannot use both --tool-instruction-override and --extended-tool-instruction"
    )
  })

  it("checks the shell where the backend can see it", async () => {
    const dir = tempDir()
    const plain = join(dir, "not-executable")
    writeFileSync(plain, "#!/bin/sh\n")
    chmodSync(plain, 0o644)
    const outside = join(dir, "sh")
    symlinkSync("/bin/sh", outside)
    const state = ["--state-dir", join(dir, "state")]
    assert.include(await refusal(["--backend", "host", "--shell", "/nonexistent", ...state]), "--shell /nonexistent does not exist on this machine")
    assert.include(await refusal(["--backend", "host", "--shell", plain, ...state]), `--shell ${plain} is not executable`)
    assert.include(await refusal(["--backend", "host", "--shell", "/usr", ...state]), "--shell /usr is not a file")
    assert.include(await refusal(["--backend", "host", "--shell", outside, ...state]), "is not visible inside the host sandbox")
    assert.include(await refusal(["--backend", "docker", "--shell", "bash"]), "--shell must be an absolute path (got 'bash')")
    assert.include(await refusal(["--backend", "toolset", "--shell", "/bin/zsh", ...state]), "the toolset backend runs its own shell")
  })

  it("creates the state directory and refuses one that cannot be", async () => {
    const dir = tempDir()
    const file = join(dir, "file")
    writeFileSync(file, "")
    assert.include(await refusal(["--backend", "host", "--state-dir", join(file, "state")]), `--state-dir ${join(file, "state")} cannot be used: ENOTDIR`)
    const fresh = join(dir, "a", "b")
    const run = await runCli(["--backend", "toolset", "--state-dir", fresh, "--log-level", "error"])
    assert.notInclude(run.stderr, "--state-dir")
    assert.isTrue(existsSync(fresh), "created by the startup checks")
  })

  it("refuses what the chosen backend cannot start without", async () => {
    assert.include(await refusal(["--backend", "wasm"]), "--backend wasm needs --wasm-path")
    assert.include(await refusal(["--backend", "wasm", "--wasm-path", "/nonexistent.wasm"]), "--wasm-path /nonexistent.wasm cannot be read: ENOENT")
    assert.include(await refusal(["--backend", "fly"]), "--backend fly needs --fly-app (or FLY_APP_NAME)")
    assert.include(await refusal(["--backend", "fly", "--fly-app", "a"]), "--backend fly needs a token")
    assert.include(await refusal(["--backend", "e2b"]), "--backend e2b needs an API key")
    // Modal as Fly and E2B: at startup, not at the first tool call (issue 23).
    assert.include(await refusal(["--backend", "modal", "--modal-token-id", "ak-x"]), "--backend modal needs a token: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET")
    assert.include(await refusal(["--backend", "toolset", "--wasm-fuel", "100", "--state-dir", tempDir()]), "--wasm-fuel is not supported")
    assert.include(await refusal(["--backend", "docker", "--docker-run-flag=--privileged"]), "--docker-run-flag --privileged is not allowed")
  })

  it("reports a backend that cannot start: over HTTP at startup in the same one-line shape, over stdio on stderr at once", async () => {
    const http = await runCli(["--transport", "http", "--port", "0", "--backend", "docker", "--docker-host", "tcp://127.0.0.1:1"], { timeoutMs: 60_000 })
    assert.strictEqual(http.code, 1)
    assert.match(errorLine(http), /^kilntainers: error: docker backend: /)
    // stdio answers at once and refuses every call with the reason (test/e2e/stdio.test.ts), so the
    // failure is logged as soon as it is known; the server ends with its client.
    const stdio = await runCli(["--backend", "docker", "--docker-host", "tcp://127.0.0.1:1"], { timeoutMs: 60_000, initialize: true })
    assert.strictEqual(stdio.code, 0)
    assert.match(stdio.stderr, /the backend cannot start: docker backend: /)
  })
})
