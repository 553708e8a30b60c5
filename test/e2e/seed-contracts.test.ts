/**
 * The seeds' behaviours that issue 26 restored, as our own tests on the built CLI (the seeds' files
 * cannot run in CI and never enter this repository): Kilntainers' `--output-limit` (its
 * `TestSharedOutputLimit`), a computer whose lifecycle mode is asked to change (the fork's words),
 * on host, Docker and Podman; and a user's own label that merely starts with "kilntainers" (the
 * fork's HTTP lifecycle test), one word and two, on Docker and Podman.
 */
import { assert, it } from "vitest"
import { existsSync } from "node:fs"
import { errorLine, runCli } from "../cli/CliRunner.js"
import { binPath, startServer } from "../support/McpHarness.js"
import { computerIds, docker, engineWorks, requirement, TEST_IMAGE, type TestEngine } from "../support/Docker.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const backends = [
  { name: "host", args: ["--backend", "host"], available: bwrapWorks, requirement: "bubblewrap" },
  { name: "docker", args: ["--backend", "docker", "--image", TEST_IMAGE], available: engineWorks("docker"), requirement: requirement("docker") },
  {
    name: "podman",
    args: ["--backend", "docker", "--engine", "podman", "--image", TEST_IMAGE],
    available: engineWorks("podman"),
    requirement: requirement("podman")
  }
] as const

const id = computerIds()

for (const backend of backends) {
  describeIf(backend.available && existsSync(binPath), `${backend.requirement} and a built CLI`)(`the seeds' contracts (${backend.name})`, () => {
    it("--output-limit 1024: 2048 bytes end with a non-zero exit and 'output limit exceeded', head and tail kept, counts exact", async () => {
      const server = await startServer([...backend.args, "--output-limit", "1024", "--log-level", "error"])
      try {
        const result = await server.call("sandbox_exec", { command: "head -c 2048 /dev/zero | tr '\\0' 'a'", timeout: 5 })
        assert.isFalse(result.isError, result.text)
        assert.notStrictEqual(result.structured.exit_code, 0)
        assert.include(result.structured.stderr, "output limit exceeded")
        assert.isTrue(result.structured.output_limit_exceeded)
        assert.strictEqual(result.structured.stdout_bytes, 2048)
        const omitted = /\n\[… (\d+) bytes omitted …\]\n/.exec(result.structured.stdout)
        assert.isNotNull(omitted, result.structured.stdout)
        assert.isAtMost(Buffer.byteLength(result.structured.stdout.replace(omitted![0], "")), 1024)
        assert.match(result.structured.stdout, /^a+\n\[… \d+ bytes omitted …\]\na+$/)
        const fits = await server.call("sandbox_exec", { command: "printf %1000s | tr ' ' b" })
        assert.strictEqual(fits.structured.exit_code, 0)
        assert.strictEqual(fits.structured.stdout, "b".repeat(1000))
      } finally {
        await server.client.close()
      }
    }, 120_000)

    it("an existing computer's lifecycle mode cannot be changed", async () => {
      const server = await startServer([...backend.args, "--log-level", "error"])
      const fixed = id("fixed")
      try {
        const made = await server.call("computer_create", { computer_id: fixed, temporary: false })
        assert.isFalse(made.isError, made.text)
        const refused = await server.call("sandbox_exec", { command: "true", computer_id: fixed, temporary: true })
        assert.isTrue(refused.isError)
        assert.include(refused.text, "lifecycle mode cannot be changed")
      } finally {
        await server.call("computer_delete", { computer_id: fixed }).catch(() => undefined)
        await server.client.close()
      }
    }, 120_000)
  })
}

for (const engine of ["docker", "podman"] as const satisfies ReadonlyArray<TestEngine>) {
  describeIf(engineWorks(engine) && existsSync(binPath), `${requirement(engine)} and a built CLI`)(`a user's labels (${engine})`, () => {
    it("a label that merely starts with 'kilntainers' is the user's, one word and two; ours stay reserved", async () => {
      const run = Math.random().toString(36).slice(2, 10)
      const spellings = [
        ["--docker-run-flag", "--label", "--docker-run-flag", `kilntainers-http-test=${run}-two`],
        [`--docker-run-flag=--label=kilntainers-http-test=${run}-one`]
      ]
      for (const [i, flags] of spellings.entries()) {
        const server = await startServer(["--backend", "docker", "--engine", engine, "--image", TEST_IMAGE, "--log-level", "error", ...flags])
        try {
          const result = await server.call("sandbox_exec", { command: "true" })
          assert.isFalse(result.isError, result.text)
          const labelled = await docker(engine).listContainers({ filters: { label: [`kilntainers-http-test=${run}-${i === 0 ? "two" : "one"}`] } })
          assert.strictEqual(labelled.length, 1, flags.join(" "))
          assert.strictEqual(labelled[0]!.Labels["kilntainers.computer-id"], result.structured.computer_id)
        } finally {
          await server.client.close()
        }
      }
      const reserved = await runCli(["--backend", "docker", "--engine", engine, "--image", TEST_IMAGE, "--docker-run-flag=--label=kilntainers.computer-id=x"])
      assert.strictEqual(reserved.code, 1)
      assert.include(errorLine(reserved), "--label kilntainers.computer-id: the label 'kilntainers' and keys under 'kilntainers.' are kilntainers' own")
    }, 180_000)
  })
}
