/**
 * Fewer turns for an agent (issue 23's agent tasks), through the MCP SDK's client and the built CLI,
 * on Docker and on the host backend: `spawn` types its `input` at start or once its pattern matched
 * (vim edited and saved, a REPL answered, in one call), and `kill` returns the output no earlier
 * result showed (a web server's request log comes with its stop).
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { existsSync } from "node:fs"
import { COMPUTER_IMAGE, engineWorks, removeOurContainersOn } from "../support/Docker.js"
import { binPath, type Harness, startServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const backends = [
  {
    name: "docker",
    args: [],
    available: engineWorks("docker", COMPUTER_IMAGE) && engineWorks("docker"),
    needs: `a Docker engine with ${COMPUTER_IMAGE}`
  },
  { name: "host", args: ["--backend", "host"], available: bwrapWorks, needs: "bubblewrap" }
] as const

const ok = (result: { isError?: boolean; text: string }) => assert.isFalse(result.isError, result.text)

for (const backend of backends) {
  describeIf(backend.available && existsSync(binPath), `${backend.needs} and a built CLI`)(`one call where it took several, on ${backend.name}`, () => {
    let server: Harness
    const exec = async (command: string) => {
      const result = await server.call("sandbox_exec", { command })
      ok(result)
      return result.structured as { stdout: string; exit_code: number }
    }
    beforeAll(async () => {
      server = await startServer([...backend.args])
    }, 180_000)
    afterAll(async () => {
      await server?.client.close()
      if (backend.name === "docker") await removeOurContainersOn("docker")()
    })

    describe("spawn's input", () => {
      it("vim: drawn, edited, saved and quit in one spawn; the result is its exit", async () => {
        await exec("printf 'hello\\n' > one-call.txt")
        const vim = await server.call("spawn", {
          command: "vim one-call.txt",
          tty: true,
          pattern: "one-call.txt",
          input: "A world\\e:wq\\r",
          timeoutMs: 20_000
        })
        ok(vim)
        assert.strictEqual(vim.structured.match, "one-call.txt", vim.text)
        assert.strictEqual(vim.structured.status, "terminated", vim.text)
        assert.strictEqual(vim.structured.exitCode, 0, vim.text)
        assert.isUndefined(vim.structured.note, vim.text)
        assert.strictEqual((await exec("cat one-call.txt")).stdout, "hello world\n")
      }, 60_000)

      it("a REPL on pipes, without a pattern: the input is typed at start and the call returns at its exit", async () => {
        // Interactive (-i) on a pipe: python reads line by line, prompting on stderr.
        const repl = await server.call("spawn", { command: "python3 -q -i", input: "x = 6*7\\nprint(x*2)\\nexit()\\n" })
        ok(repl)
        assert.strictEqual(repl.structured.status, "terminated", repl.text)
        assert.strictEqual(repl.structured.exitCode, 0, repl.text)
        assert.strictEqual(repl.structured.stdout, "84\n", repl.text)
        assert.strictEqual(repl.structured.stderr, ">>> >>> >>> ", repl.text)
      }, 60_000)

      it("after a pattern, the call returns once the answer settles, as stdin does; the process runs on", async () => {
        const repl = await server.call("spawn", { command: "python3 -q -i", pattern: ">>> ", input: "print(6*7)\\n" })
        ok(repl)
        assert.strictEqual(repl.structured.status, "running", repl.text)
        assert.strictEqual(repl.structured.stdout, "42\n", repl.text)
        assert.strictEqual(repl.structured.stderr, ">>> >>> ", repl.text)
        await server.call("kill", { id: repl.structured.pid, signal: "SIGKILL" })
      }, 60_000)

      it("a pattern that does not come: nothing is typed, and the note says so", async () => {
        const waiting = await server.call("spawn", { command: "cat", pattern: "never", input: "typed\\n", timeoutMs: 500 })
        ok(waiting)
        assert.strictEqual(waiting.structured.status, "running", waiting.text)
        assert.strictEqual(waiting.structured.stdout, "", waiting.text)
        assert.include(waiting.structured.note, "input not written: the pattern was not seen", waiting.text)
        const later = await server.call("stdout", { id: waiting.structured.pid })
        assert.strictEqual(later.structured.stdout, "", later.text)
        await server.call("kill", { id: waiting.structured.pid, signal: "SIGKILL" })
      }, 60_000)
    })

    describe("kill's output", () => {
      it("a web server's stop returns the request log that no earlier result showed, and only that", async () => {
        await exec("mkdir -p site && printf 'one call\\n' > site/index.html")
        const served = await server.call("spawn", {
          command: "python3 -m http.server 8731 --bind 127.0.0.1 --directory site",
          pattern: "Serving HTTP",
          timeoutMs: 20_000
        })
        ok(served)
        assert.include(served.structured.stdout, "Serving HTTP", served.text)
        const got = await exec("curl -s http://127.0.0.1:8731/index.html")
        assert.strictEqual(got.stdout, "one call\n")
        const killed = await server.call("kill", { id: served.structured.pid })
        ok(killed)
        assert.strictEqual(killed.structured.status, "terminated", killed.text)
        assert.include(killed.structured.stderr, "GET /index.html", killed.text)
        // What the spawn's result showed is not shown again.
        assert.notInclude(`${killed.structured.stdout ?? ""}${killed.structured.stderr}`, "Serving HTTP", killed.text)
      }, 60_000)

      it("a sandbox_exec that returned still running: kill returns only what came after its result", async () => {
        // A server whose calls return after 1.5 s: the command outlives its sandbox_exec call.
        const short = await startServer([...backend.args, "--max-call-ms", "1500"])
        try {
          const ran = await short.call("sandbox_exec", { command: "echo before; sleep 3; echo after; exec sleep 60" })
          ok(ran)
          assert.strictEqual(ran.structured.exit_code, null, ran.text)
          assert.strictEqual(ran.structured.stdout, "before\n", ran.text)
          await new Promise((resolve) => setTimeout(resolve, 3000))
          const killed = await short.call("kill", { id: ran.structured.pid })
          ok(killed)
          assert.strictEqual(killed.structured.stdout, "after\n", killed.text)
        } finally {
          await short.client.close()
        }
      }, 120_000)

      it("a process whose output was all shown: kill returns none", async () => {
        const quiet = await server.call("spawn", { command: "echo shown; exec sleep 60", pattern: "shown" })
        ok(quiet)
        const killed = await server.call("kill", { id: quiet.structured.pid })
        ok(killed)
        assert.strictEqual(killed.structured.status, "terminated", killed.text)
        assert.isUndefined(killed.structured.stdout, killed.text)
        assert.isUndefined(killed.structured.stderr, killed.text)
      }, 60_000)
    })
  })
}
