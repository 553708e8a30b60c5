import { assert, it } from "vitest"
import { describeIf } from "../support/Requirements.js"
import { built, errorLine, printConfig, runCli } from "./CliRunner.js"

describeIf(built, "a built CLI (npm run build)")("Kilntainers' flags on the built CLI", () => {
  it("reads both value forms to the same configuration", async () => {
    const spaced = await printConfig([
      "--image", "alpine:3", "--timeout", "300", "--docker-run-flag", "--read-only", "--e2b-metadata", "team=a",
      "--modal-cpu", "0.5", "--gpu", "T4", "--region", "us-east", "--sandbox-timeout", "600", "--engine", "podman",
      "--docker-host", "tcp://127.0.0.1:2375", "--cpu", "1.5", "--memory", "512m", "--fly-cli", "fly"
    ])
    const joined = await printConfig([
      "--image=alpine:3", "--timeout=300", "--docker-run-flag=--read-only", "--e2b-metadata=team=a",
      "--modal-cpu=0.5", "--gpu=T4", "--region=us-east", "--sandbox-timeout=600", "--engine=podman",
      "--docker-host=tcp://127.0.0.1:2375", "--cpu=1.5", "--memory=512m", "--fly-cli=fly"
    ])
    assert.deepStrictEqual(spaced, joined)
    assert.deepStrictEqual(spaced.flags["docker-run-flag"]!.value, ["--read-only"])
    assert.deepStrictEqual(spaced.flags["e2b-metadata"]!.value, { team: "a" })
    assert.strictEqual(spaced.flags.cpu!.value, 1.5)
    assert.strictEqual(spaced.flags.timeout!.from, "command line")
  })

  it("takes argparse's --docker-run-flag=--label=x form and repeats in order", async () => {
    const config = await printConfig(["--docker-run-flag=--label=x", "--docker-run-flag", "--cap-add SYS_PTRACE"])
    assert.deepStrictEqual(config.flags["docker-run-flag"]!.value, ["--label=x", "--cap-add SYS_PTRACE"])
  })

  it("has the fork's --network/--no-network pair, off by default", async () => {
    assert.strictEqual((await printConfig([])).flags.network!.value, false)
    assert.strictEqual((await printConfig(["--network"])).flags.network!.value, true)
    assert.strictEqual((await printConfig(["--network", "--no-network"])).flags.network!.value, false)
  })

  it("prints what auto chooses as the backend", async () => {
    const config = await printConfig(["--backend", "go_busybox"])
    assert.strictEqual(config.backend, "toolset")
    assert.strictEqual(config.flags.backend!.value, "go_busybox")
  })

  it("refuses what it cannot read with exit code 2 and one line", async () => {
    for (const [args, message] of [
      [["--backend", "invalid"], "argument --backend: invalid choice: 'invalid' (choose from auto,"],
      [["--transport", "websocket"], "argument --transport: invalid choice: 'websocket'"],
      [["--port", "http"], "argument --port: invalid int value: 'http'"],
      [["--frobnicate"], "unrecognized argument: --frobnicate"],
      [["--image"], "argument --image: expected one argument"],
      [["--env", "NOEQUALS"], "argument --env: expected KEY=VALUE, got 'NOEQUALS'"]
    ] as const) {
      const run = await runCli(args)
      assert.strictEqual(run.code, 2, args.join(" "))
      const line = errorLine(run)
      assert.include(line, message)
      assert.match(line, /\(see 'kilntainers --help'\)$/)
      assert.strictEqual(run.stdout, "")
    }
  })
})
