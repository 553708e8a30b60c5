/**
 * The egress and audit flags, resolved and checked in process (as `kilntainers` does before
 * serving): patterns, pins and header rules read or refused with a clear message, the secret read
 * once from the environment, process-mcp's SANDBOX_ALLOWED_DOMAINS honoured, and an allowlist
 * refused wherever it would not be enforced.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Redacted } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { chooseBackend } from "../../src/cli/BackendChoice.js"
import { readFlags } from "../../src/cli/Cli.js"
import { startupChecks } from "../../src/cli/StartupChecks.js"
import { toSettings } from "../../src/cli/ToSettings.js"

const dir = mkdtempSync(join(tmpdir(), "kt-egress-flags-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** Resolves and checks like `kilntainers` does; the settings and warnings, or the refusal's message. */
const configure = (argv: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const resolved = yield* readFlags([...argv, "--state-dir", join(dir, "state")])
    const choice = yield* chooseBackend(resolved.values)
    const settings = { ...(yield* toSettings(resolved.values)), backend: choice.backend }
    const warnings = yield* startupChecks(resolved, choice, settings)
    return { settings, warnings }
  }).pipe(
    Effect.mapError((error) => error.message),
    Effect.either,
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
  )

const refused = (argv: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  Effect.map(configure(argv, env), (result) => (Either.isLeft(result) ? result.left : assert.fail(`accepted: ${argv.join(" ")}`)))
const accepted = (argv: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  Effect.map(configure(argv, env), (result) => (Either.isRight(result) ? result.right : assert.fail(result.left)))

describe("the egress flags", () => {
  it.effect("read patterns from the flag, comma lists, KILNTAINERS_ALLOW_HOSTS and SANDBOX_ALLOWED_DOMAINS", () =>
    Effect.gen(function*() {
      const flags = yield* accepted(["--backend", "host", "--allow-host", "pypi.org,files.pythonhosted.org", "--allow-host", "*.github.com"])
      assert.deepStrictEqual(flags.settings.egress.allowHosts, ["pypi.org", "files.pythonhosted.org", "*.github.com"])
      const ours = yield* accepted(["--backend", "host"], { KILNTAINERS_ALLOW_HOSTS: "a.test, b.test", SANDBOX_ALLOWED_DOMAINS: "c.test" })
      assert.deepStrictEqual(ours.settings.egress.allowHosts, ["a.test", "b.test"])
      const theirs = yield* accepted(["--backend", "host"], { SANDBOX_ALLOWED_DOMAINS: "*" })
      assert.deepStrictEqual(theirs.settings.egress.allowHosts, ["*"])
      const none = yield* accepted(["--backend", "host"])
      assert.deepStrictEqual(none.settings.egress.allowHosts, [])
    }))

  it.effect("refuse a bad pattern, pin or header rule, naming it", () =>
    Effect.gen(function*() {
      assert.include(yield* refused(["--backend", "host", "--allow-host", "https://pypi.org"]), "--allow-host: 'https://pypi.org' is a URL")
      assert.include(yield* refused(["--backend", "host"], { SANDBOX_ALLOWED_DOMAINS: "ok.test,a.*.test" }), "SANDBOX_ALLOWED_DOMAINS: 'a.*.test'")
      assert.include(yield* refused(["--backend", "host", "--allow-host", "x.test", "--egress-resolve", "x.test=nope"]), "--egress-resolve: 'x.test=nope'")
      assert.include(
        yield* refused(["--backend", "host", "--allow-host", "x.test", "--egress-header", "x.test:Authorization=Bearer abc"]),
        "not an environment variable name"
      )
    }))

  it.effect("read the header's secret once from the server's environment, and refuse a missing one", () =>
    Effect.gen(function*() {
      const args = ["--backend", "host", "--allow-host", "api.github.com", "--egress-header", "api.github.com:Authorization=GH_AUTH"]
      assert.include(yield* refused(args), "the server's environment has no GH_AUTH; export it before starting kilntainers")
      assert.include(yield* refused(args, { GH_AUTH: "a\nb" }), "GH_AUTH contains a line break")
      const ok = yield* accepted(args, { GH_AUTH: "Bearer ghp_x" })
      assert.strictEqual(ok.settings.egress.headers.length, 1)
      assert.strictEqual(Redacted.value(ok.settings.egress.headers[0]!.value), "Bearer ghp_x")
      assert.notInclude(JSON.stringify(ok.settings), "ghp_x", "the secret is redacted when settings are printed")
      assert.include(
        yield* refused([...args, "--env", "GH_AUTH=Bearer ghp_x"], { GH_AUTH: "Bearer ghp_x" }),
        "GH_AUTH is also given to computers by --env"
      )
      const uncovered = yield* accepted(["--backend", "host", "--allow-host", "pypi.org", "--egress-header", "api.github.com:Authorization=GH_AUTH"], { GH_AUTH: "t" })
      assert.isTrue(uncovered.warnings.some((warning) => warning.includes("no --allow-host rule allows api.github.com:443, so it is never sent")))
    }))

  it.effect("refuse what cannot be enforced: other backends, --network, no sandbox, extras without a list", () =>
    Effect.gen(function*() {
      for (const backend of ["fly", "wasm", "toolset"]) {
        const env = { FLY_API_TOKEN: "t", E2B_API_KEY: "k" }
        const message = yield* refused(["--backend", backend, "--allow-host", "pypi.org", "--fly-app", "a", "--wasm-path", "/bin/true"], env)
        assert.include(message, `--allow-host cannot be enforced on --backend ${backend}`, backend)
      }
      const star = yield* accepted(["--backend", "e2b", "--allow-host", "*"], { E2B_API_KEY: "k" })
      assert.isTrue(star.warnings.some((warning) => warning.includes("--allow-host '*' has no effect on --backend e2b")))
      assert.include(yield* refused(["--backend", "host", "--allow-host", "pypi.org", "--network"]), "use one or the other")
      assert.include(yield* refused(["--backend", "host", "--allow-host", "pypi.org", "--unsafe-no-sandbox"]), "--unsafe-no-sandbox")
      assert.include(yield* refused(["--backend", "host", "--egress-resolve", "a.test=10.0.0.1"]), "--egress-resolve needs --allow-host")
    }))

  it.effect("accept on E2B and Modal what their own egress rules carry, and refuse the rest with the reason", () =>
    Effect.gen(function*() {
      const e2b = { E2B_API_KEY: "k", GH_AUTH: "Bearer ghp_x", MODAL_TOKEN_ID: "ak-x", MODAL_TOKEN_SECRET: "as-x" }
      const allowed = yield* accepted(
        ["--backend", "e2b", "--allow-host", "pypi.org,*.github.com", "--egress-header", "api.github.com:Authorization=GH_AUTH"],
        e2b
      )
      assert.deepStrictEqual(allowed.settings.egress.allowHosts, ["pypi.org", "*.github.com"])
      assert.isFalse(allowed.warnings.some((warning) => /--(allow-host|egress-header) does not apply/.test(warning)), allowed.warnings.join("; "))
      yield* accepted(["--backend", "modal", "--allow-host", "pypi.org,10.0.0.5"], e2b)
      assert.include(yield* refused(["--backend", "e2b", "--allow-host", "pypi.org:8443"], e2b), "E2B's egress rules cannot restrict a port")
      assert.include(
        yield* refused(["--backend", "modal", "--allow-host", "pypi.org", "--egress-resolve", "pypi.org=10.0.0.1"], e2b),
        "--egress-resolve cannot be carried by Modal"
      )
      assert.include(
        yield* refused(["--backend", "modal", "--allow-host", "api.github.com", "--egress-header", "api.github.com:Authorization=GH_AUTH"], e2b),
        "--egress-header cannot be carried by Modal"
      )
      assert.include(yield* refused(["--backend", "e2b", "--allow-host", "pypi.org", "--network"], e2b), "use one or the other")
      const star = yield* accepted(["--backend", "modal", "--allow-host", "*"], e2b)
      assert.isTrue(star.warnings.some((warning) => warning.includes("--allow-host '*' has no effect on --backend modal")))
    }))

  it.effect("check the upstream CA files and the audit log's place and size", () =>
    Effect.gen(function*() {
      const notPem = join(dir, "not.pem")
      writeFileSync(notPem, "hello")
      assert.include(yield* refused(["--backend", "host", "--allow-host", "x.test", "--egress-ca-file", notPem]), `--egress-ca-file ${notPem}: no PEM certificate in it`)
      assert.include(yield* refused(["--backend", "host", "--audit-log", "/nonexistent/dir/audit.log"]), "the directory /nonexistent/dir does not exist")
      assert.include(yield* refused(["--backend", "host", "--audit-log", dir]), "is not a regular file")
      assert.include(yield* refused(["--backend", "host", "--audit-log-max-size", "1k"]), "--audit-log-max-size must be a size of at least 4k")
      const ok = yield* accepted(["--backend", "fly", "--fly-app", "a", "--audit-log", join(dir, "audit.log"), "--audit-log-max-size", "1m"], { FLY_API_TOKEN: "t" })
      assert.deepStrictEqual(ok.settings.auditLog, { path: join(dir, "audit.log"), maxBytes: 1024 * 1024, keep: 3 })
    }))
})
