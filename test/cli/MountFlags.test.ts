/**
 * The filesystem flags, resolved and checked in process as `kilntainers` does before serving:
 * --mount and its variables (KILNTAINERS_MOUNT, SANDBOX_ALLOW_WRITE, DEFAULT_WORKDIR, DOCKER_VOLUME,
 * DOCKER_CONTAINER with DOCKER_USE_EXISTING), the values refused at startup, symlinks inside a
 * writable mount (never followed), and the state directory and the audit log kept out of mounts.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either } from "effect"
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { chooseBackend } from "../../src/cli/BackendChoice.js"
import { readFlags } from "../../src/cli/Cli.js"
import { startupChecks } from "../../src/cli/StartupChecks.js"
import { toSettings } from "../../src/cli/ToSettings.js"
import { binPath, built, runCli } from "./CliRunner.js"

const dir = mkdtempSync(join(tmpdir(), "kt-mount-flags-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const project = join(dir, "project")
const state = join(dir, "state")
mkdirSync(join(project, "secret"), { recursive: true })
writeFileSync(join(dir, "file.txt"), "x")
symlinkSync(project, join(dir, "link"))

const configure = (argv: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const resolved = yield* readFlags([...argv, "--state-dir", state])
    const choice = yield* chooseBackend(resolved.values)
    const settings = { ...(yield* toSettings(resolved.values, resolved.sources)), backend: choice.backend }
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

describe("the filesystem flags", () => {
  it.effect("--mount is repeatable, a comma list in KILNTAINERS_MOUNT, with symlinks resolved and :ro read", () =>
    Effect.gen(function*() {
      const flags = yield* accepted(["--backend", "host", "--mount", `${join(dir, "link")}:/home/agent/p`, "--mount", `${dir}/file.txt:/data/f:ro`])
      assert.deepStrictEqual(flags.settings.filesystem.mounts, [
        { source: project, target: "/home/agent/p", readOnly: false },
        { source: join(dir, "file.txt"), target: "/data/f", readOnly: true }
      ])
      const fromVariable = yield* accepted(["--backend", "docker"], { KILNTAINERS_MOUNT: `${project}:/a,${project}:/b:ro` })
      assert.deepStrictEqual(fromVariable.settings.filesystem.mounts.map((m) => [m.target, m.readOnly]), [["/a", false], ["/b", true]])
    }))

  it.effect("process-mcp's variables map onto the flags", () =>
    Effect.gen(function*() {
      const flags = yield* accepted([], {
        PROCESS_MODE: "docker",
        DOCKER_IMAGE: "ubuntu:22.04",
        DOCKER_VOLUME: "process-mcp-volume",
        DEFAULT_WORKDIR: "/workspace",
        SANDBOX_ALLOW_WRITE: project,
        SANDBOX_DENY_WRITE: join(project, "secret"),
        SANDBOX_DENY_READ: `${join(project, "secret")},/etc/ssh`
      })
      assert.strictEqual(flags.settings.backend, "docker")
      assert.strictEqual(flags.settings.image, "ubuntu:22.04")
      assert.strictEqual(flags.settings.workdir, "/workspace")
      assert.deepStrictEqual(flags.settings.filesystem.mounts, [
        { source: project, target: project, readOnly: false },
        { source: "process-mcp-volume", target: "/workspace", readOnly: false, volume: true }
      ])
      assert.deepStrictEqual(flags.settings.filesystem.denyWrite, [join(project, "secret")])
      assert.strictEqual(flags.settings.filesystem.denyRead[0], join(project, "secret"))
    }))

  it.effect("DOCKER_CONTAINER adopts only with DOCKER_USE_EXISTING=true; --docker-container always", () =>
    Effect.gen(function*() {
      const alone = yield* accepted(["--backend", "docker"], { DOCKER_CONTAINER: "process-mcp-main" })
      assert.isUndefined(alone.settings.dockerContainer)
      const existing = yield* accepted(["--backend", "docker"], { DOCKER_CONTAINER: "process-mcp-main", DOCKER_USE_EXISTING: "true" })
      assert.strictEqual(existing.settings.dockerContainer, "process-mcp-main")
      const flag = yield* accepted(["--backend", "docker", "--docker-container", "box"])
      assert.strictEqual(flag.settings.dockerContainer, "box")
    }))

  it.effect("a symlink inside a writable mount is never followed: a source behind one is refused, a deny path keeps its name", () =>
    Effect.gen(function*() {
      const shared = join(dir, "shared")
      mkdirSync(join(shared, "real"), { recursive: true })
      symlinkSync("/etc", join(shared, "nested"))
      symlinkSync(join(shared, "real"), join(shared, "inside"))
      const nested = yield* refused(["--backend", "host", "--mount", `${shared}:/home/agent/s`, "--mount", `${shared}/nested:/home/agent/n`])
      assert.match(nested, new RegExp(`${shared}/nested is a symbolic link inside a writable mount`))
      const readOnly = yield* accepted(["--backend", "host", "--mount", `${shared}:/home/agent/s:ro`, "--mount", `${shared}/inside:/home/agent/i`])
      assert.strictEqual(readOnly.settings.filesystem.mounts[1]!.source, join(shared, "real"), "outside a writable mount, the operator's link is followed")
      const denied = yield* accepted(["--backend", "host", "--mount", `${shared}:/home/agent/s`, "--deny-read", `${shared}/nested/shadow`])
      assert.deepStrictEqual(denied.settings.filesystem.denyRead, [`${shared}/nested/shadow`])
    }))

  it.effect("the state directory and the audit log stay out of every mount, on Docker too", () =>
    Effect.gen(function*() {
      assert.match(yield* refused(["--backend", "docker", "--mount", `${dir}:/d`]), /state directory/)
      assert.match(yield* refused(["--backend", "docker", `--docker-run-flag=--volume=${state}:/s`]), /--volume .* state directory/)
      assert.match(
        yield* refused(["--backend", "host", "--mount", `${project}:/home/agent/p`, "--audit-log", join(project, "audit.log")]),
        /--audit-log .* computers see/
      )
      mkdirSync(join(state, "computers"), { recursive: true })
      assert.match(yield* refused(["--backend", "host", "--audit-log", join(state, "computers", "audit.log")]), /--audit-log .* computers see/)
    }))

  it.effect("bad values are refused with a clear message", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [ReadonlyArray<string>, RegExp]> = [
        [["--mount", "relative:/x"], /host path of 'relative:\/x' must be absolute/],
        [["--mount", `${project}:relative`], /must be absolute/],
        [["--mount", `${project}:/x:rx`], /must be ro or rw/],
        [["--mount", `${dir}/missing:/x`], /does not exist/],
        [["--mount", `${project}:/proc`], /would hide the computer's \/proc/],
        [["--mount", `${project}:/dev/shm/x`], /would hide the computer's \/dev/],
        [["--mount", `${project}:/`], /replace the computer's whole filesystem/],
        [["--mount", "/:/host"], /whole machine/],
        [["--mount", "/proc:/p"], /\/proc of this machine/],
        [["--mount", `${project}:/home/agent`], /its home and workspace/],
        [["--mount", `${project}:/run/kt-agent`], /the agent/],
        [["--mount", `${state}:/s`], /state directory/],
        [["--mount", `${dir}:/d`], /state directory/],
        [["--mount", `${project}:/a`, "--mount", `${project}:/a`], /two mounts at \/a/],
        [["--mount", `${project}:/a`, "--deny-read", dir], /hides the whole of --mount/],
        [["--deny-read", "etc/ssh"], /must be an absolute host path/],
        [["--workdir", "work"], /must be an absolute path/],
        [["--workdir", "/srv/project"], /does not exist in host computers/],
        [["--mount", `${project}:/a`, "--unsafe-no-sandbox"], /need the sandbox/]
      ]
      for (const [argv, said] of cases) assert.match(yield* refused(["--backend", "host", ...argv]), said, argv.join(" "))
      assert.match(yield* refused(["--backend", "docker", "--mount", "/var/run/docker.sock:/s"]), /engine's socket/)
      assert.match(yield* refused(["--backend", "docker", "--mount", `${project}:/.kilntainers/x`]), /the agent/)
      for (const backend of ["e2b", "fly", "modal", "toolset"]) {
        const extra = backend === "fly"
          ? ["--fly-app", "a", "--fly-token", "t"]
          : backend === "e2b"
          ? ["--e2b-api-key", "k"]
          : backend === "modal"
          ? ["--modal-token-id", "ak-x", "--modal-token-secret", "as-x"]
          : []
        assert.match(yield* refused(["--backend", backend, ...extra, "--mount", `${project}:/p`]), /cannot apply to --backend/)
      }
    }))

  it.effect("what is accepted: a workdir in a mount, a volume at home, deny lists with warnings", () =>
    Effect.gen(function*() {
      const host = yield* accepted(["--backend", "host", "--mount", `${project}:/srv/p`, "--workdir", "/srv/p/src", "--deny-read", `${dir}/nope`])
      assert.strictEqual(host.settings.workdir, "/srv/p/src")
      assert.isTrue(host.warnings.some((w) => /--deny-read .*nope: no such path/.test(w)))
      const docker = yield* accepted(["--backend", "docker", "--docker-volume", "vol", "--deny-write", project])
      assert.deepStrictEqual(docker.settings.filesystem.mounts, [{ source: "vol", target: "/home/agent", readOnly: false, volume: true }])
      assert.isTrue(docker.warnings.some((w) => /in no writable mount/.test(w)))
    }))
})

describe.skipIf(!built)(`the built CLI (${binPath})`, () => {
  it("refuses a bad mount at startup with one error line and exit code 1", async () => {
    const result = await runCli(["--backend", "host", "--state-dir", state, "--mount", `${dir}/missing:/x`])
    assert.strictEqual(result.code, 1)
    assert.match(result.stderr, /^kilntainers: error: --mount .*missing:\/x: the host path .* does not exist/m)
    assert.strictEqual(result.stdout, "")
  }, 30_000)
})
