import { spawnSync } from "node:child_process"
import { join } from "node:path"
import { assert, it } from "vitest"
import { root } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"
import { baseEnv, built, runCli } from "./CliRunner.js"

// The stand-in package through which scripts/seed-suites.sh runs Kilntainers' own tests.
const compat = join(root, "test", "compat")
const python = spawnSync("python3", ["--version"]).status === 0

const py = (args: ReadonlyArray<string>) =>
  spawnSync(args[0] === "uv" ? join(compat, "bin", "uv") : "python3", args[0] === "uv" ? args.slice(1) : args, {
    encoding: "utf8",
    timeout: 60_000,
    env: { ...baseEnv(), PYTHONDONTWRITEBYTECODE: "1", PYTHONPATH: compat, PATH: `${join(compat, "bin")}:${process.env.PATH ?? "/usr/bin:/bin"}` }
  })

describeIf(built && python, "python3 and a built CLI (npm run build)")("the kilntainers stand-in for Kilntainers' tests", () => {
  it("python -m kilntainers is our CLI, with its argv, output and exit code", async () => {
    const ours = await runCli(["--help"])
    const theirs = py(["-m", "kilntainers", "--help"])
    assert.strictEqual(theirs.status, 0)
    assert.strictEqual(theirs.stdout, ours.stdout)
    const refused = py(["uv", "run", "python", "-m", "kilntainers", "--transport", "websocket"])
    assert.strictEqual(refused.status, 2)
    assert.match(refused.stderr, /^kilntainers: error: argument --transport: invalid choice/)
  })

  it("build_parser() answers from --help and --print-config", () => {
    const script = [
      "from kilntainers.cli import build_parser",
      "p = build_parser()",
      "a = p.parse_args(['--backend', 'host', '--docker-run-flag', 'readonly', '--docker-run-flag=pids-limit=256', '--timeout', '300'])",
      "print(a.backend, a.docker_run_flags, a.timeout, a.image, a.network)",
      "print('core options:' in p.format_help())"
    ].join("\n")
    const run = py(["-c", script])
    assert.strictEqual(run.status, 0, run.stderr)
    assert.strictEqual(run.stdout, "host ['readonly', 'pids-limit=256'] 300 kilntainers-computer:bookworm False\nTrue\n")
    const bad = py(["-c", "from kilntainers.cli import build_parser\nbuild_parser().parse_args(['--port', 'x'])"])
    assert.strictEqual(bad.status, 2)
    assert.include(bad.stderr, "kilntainers: error: argument --port: invalid int value: 'x'")
  })
})
