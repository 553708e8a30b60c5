/**
 * Attack: smuggle a NUL byte into a toolset command, hoping it is silently cut there (`rm -rf
 * /home/agent/x\0/…`). A program receives C strings, so NUL is refused in commands, arguments,
 * environment and paths with a clear error, never truncated; in a command substitution's output
 * it is dropped with a warning, as bash does. As data (a file's bytes) it is fine.
 */
import { assert, it } from "vitest"
import { existsSync, rmSync } from "node:fs"
import { join } from "node:path"
import { afterAll } from "vitest"
import { Effect } from "effect"
import { binPath, root, startServer } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"
import { connection, stateDir } from "../support/WasmProvider.js"

afterAll(() => rmSync(stateDir, { recursive: true, force: true }))

const built = existsSync(join(root, "wasm", "build", "toolset.json"))

describeIf(built, "the WASI toolset (bash wasm/build.sh)")("NUL in a toolset process's spec", () => {
  it("is refused by the backend, naming where it is", async () => {
    const refused = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const computer = yield* connection()
      const attempt = (spec: { argv: ReadonlyArray<string>; env?: Record<string, string>; cwd?: string }) =>
        Effect.flip(computer.spawn({ argv: spec.argv, env: spec.env ?? {}, cwd: spec.cwd ?? "/home/agent" }))
      return yield* Effect.all([
        attempt({ argv: ["sh", "-c", "echo a\0b"] }),
        attempt({ argv: ["echo", "ok"], env: { X: "a\0b" } }),
        attempt({ argv: ["echo", "ok"], env: { "X\0Y": "z" } }),
        attempt({ argv: ["echo", "ok"], cwd: "/tmp\0/x" })
      ])
    })))
    const reasons = refused.map((error) => (error._tag === "SpawnFailed" ? error.reason : `${error._tag}`))
    assert.match(reasons[0]!, /argument 2 contains a NUL byte/)
    assert.match(reasons[1]!, /environment variable "X" contains a NUL byte/)
    assert.match(reasons[2]!, /environment variable "X\\\\0Y" contains a NUL byte/)
    assert.match(reasons[3]!, /working directory contains a NUL byte/)
    for (const reason of reasons) assert.match(reason, /NUL cannot be passed to a program/)
  }, 60_000)
})

describeIf(built && existsSync(binPath), "the WASI toolset and a built CLI (npm run build)")("NUL through the tools", () => {
  it("is refused in commands, arguments, environment and paths; dropped with a warning from $(…)", async () => {
    const server = await startServer(["--backend", "toolset"])
    try {
      await server.call("sandbox_exec", { command: "mkdir -p /home/agent/keep && echo precious > /home/agent/keep/file" })
      const attempts = [
        await server.call("sandbox_exec", { command: "rm -rf /home/agent/keep\0/nothing" }),
        await server.call("sandbox_exec", { args: ["rm", "-rf", "/home/agent/keep\0/nothing"] }),
        await server.call("sandbox_exec", { command: "echo $X", env: { X: "a\0b" } }),
        await server.call("spawn", { command: "rm -rf /home/agent/keep\0/nothing" }),
        await server.call("file_write", { path: "keep\0/x", content: "no" })
      ]
      for (const attempt of attempts) {
        assert.isTrue(attempt.isError, `refused: ${attempt.text}`)
        assert.match(attempt.text, /NUL/)
      }
      const kept = await server.call("sandbox_exec", { command: "cat /home/agent/keep/file" })
      assert.strictEqual(kept.structured.stdout, "precious\n", "nothing was truncated into a command that ran")
      const substituted = await server.call("sandbox_exec", { command: "x=$(printf 'a\\0b'); echo \"$x\"" })
      assert.strictEqual(substituted.structured.stdout, "ab\n")
      assert.match(substituted.structured.stderr, /ignored null byte/)
      const data = await server.call("sandbox_exec", { command: "printf 'a\\0b' > bytes; wc -c < bytes" })
      assert.strictEqual(data.structured.stdout, "3\n")
    } finally {
      await server.client.close()
    }
  }, 60_000)
})
