/**
 * `kilntainers image build` as a user meets it: its help, its mistakes, a base that is not on the
 * engine (said plainly, with how to get it), and the recipe it builds, found in the package.
 */
import { assert, describe, it } from "vitest"
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { COMPUTER_IMAGE, DEFAULT_BASE, recipeDirectory } from "../../src/cli/ImageCommand.js"
import { dockerWorks, requirement, TEST_ENGINE } from "../support/Docker.js"
import { root } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"
import { built, runCli } from "./CliRunner.js"

describe("the computer image's recipe", () => {
  it("is images/computer in the package, found from the CLI's module", () => {
    assert.strictEqual(recipeDirectory(), join(root, "images", "computer"))
    assert.strictEqual(recipeDirectory(join(root, "dist", "src", "cli", "ImageCommand.js")), join(root, "images", "computer"))
    assert.isUndefined(recipeDirectory("/nonexistent/a/b/c.js"))
  })

  it("builds on BASE, has the tools agents expect and the user agent (uid 1000, /home/agent)", () => {
    const dockerfile = readFileSync(join(root, "images", "computer", "Dockerfile"), "utf8")
    assert.include(dockerfile, `ARG BASE=${DEFAULT_BASE}`)
    assert.include(dockerfile, "FROM ${BASE}")
    for (const tool of ["git", "curl", "ca-certificates", "python3", "python3-pip", "nodejs", "npm", "build-essential", "vim", "less", "procps", "jq", "unzip"]) {
      assert.match(dockerfile, new RegExp(`\\s${tool.replace(/[-]/g, "\\-")}(\\s|;|\\\\)`), tool)
    }
    assert.include(dockerfile, "useradd --uid 1000 --gid 1000 --create-home --home-dir /home/agent --shell /bin/bash agent")
    assert.notMatch(dockerfile, /^USER /m, "processes run as root unless --user asks otherwise")
  })
})

describeIf(built, "a built CLI (npm run build)")("kilntainers image", () => {
  it("--help says what it builds and how to use it, in 100 columns, on stdout", async () => {
    for (const args of [["image", "--help"], ["image", "build", "--help"], ["image"]]) {
      const run = await runCli(args)
      assert.strictEqual(run.code, 0, run.stderr)
      assert.match(run.stdout, /^usage: kilntainers image build /)
      for (const flag of ["--engine {docker,podman}", "--docker-host URL", "--tag TAG", "--base IMAGE"]) assert.include(run.stdout, flag)
      const words = run.stdout.replace(/\s+/g, " ")
      assert.include(words, `(default: ${COMPUTER_IMAGE})`)
      assert.include(words, `(default: ${DEFAULT_BASE})`)
      assert.include(words, "scripts/docker-test-image.sh")
      for (const line of run.stdout.split("\n")) assert.isAtMost(line.length, 100, line)
      assert.strictEqual(run.stderr, "")
    }
    const main = await runCli(["--help"])
    assert.include(main.stdout, "kilntainers image build")
  })

  it("refuses what it cannot do, in one line, pointing at its own help", async () => {
    const unknown = await runCli(["image", "frob"])
    assert.strictEqual(unknown.code, 2)
    assert.strictEqual(unknown.stderr, "kilntainers: error: unknown command: kilntainers image frob (the one there is: kilntainers image build) (see 'kilntainers image --help')\n")
    const flag = await runCli(["image", "build", "--image", "x"])
    assert.strictEqual(flag.code, 2)
    assert.match(flag.stderr, /^kilntainers: error: unrecognized argument: --image/)
    const address = await runCli(["image", "build", "--docker-host", "ftp://engine"])
    assert.strictEqual(address.code, 1)
    assert.match(address.stderr, /^kilntainers: error: --docker-host: unsupported engine address 'ftp:\/\/engine'/)
    const nowhere = await runCli(["image", "build", "--docker-host", "unix:///nonexistent/docker.sock"])
    assert.strictEqual(nowhere.code, 1)
    assert.include(nowhere.stderr, "no docker engine answers at unix:///nonexistent/docker.sock")
    assert.strictEqual(nowhere.stdout, "")
  })
})

describeIf(built && dockerWorks, `${requirement()} and a built CLI`)("kilntainers image build on an engine", () => {
  it("a base that is not on the engine is said plainly, with how to get one (a pull, or the script here)", async () => {
    const run = await runCli(["image", "build", "--engine", TEST_ENGINE, "--base", "kilntainers-test/no-such-base:1", "--tag", "kilntainers-test/never-built:1"])
    assert.strictEqual(run.code, 1)
    assert.strictEqual(run.stdout, "")
    assert.include(run.stderr, `its base image 'kilntainers-test/no-such-base:1' is not on the ${TEST_ENGINE} engine`)
    assert.include(run.stderr, `\`${TEST_ENGINE} pull kilntainers-test/no-such-base:1\``)
    assert.include(run.stderr, "scripts/docker-test-image.sh")
    assert.isTrue(existsSync(join(root, "scripts", "docker-test-image.sh")))
  })
})
