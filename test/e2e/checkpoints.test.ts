import { assert, it } from "vitest"
import { existsSync } from "node:fs"
import { binPath, startServer } from "../support/McpHarness.js"
import { engineWorks, requirement, TEST_IMAGE } from "../support/Docker.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const backends = [
  { name: "docker", args: ["--backend", "docker", "--image", TEST_IMAGE], available: engineWorks("docker"), requirement: requirement("docker") },
  { name: "host", args: ["--backend", "host"], available: bwrapWorks, requirement: "bubblewrap" }
] as const

for (const backend of backends) {
  describeIf(backend.available && existsSync(binPath), `${backend.requirement} and a built CLI`)(
    `checkpoints and forks over stdio MCP (${backend.name})`,
    () => {
      it("an agent checkpoints a prepared computer, forks it three times, changes each fork alone, and deletes the checkpoint", async () => {
        const server = await startServer([...backend.args, "--max-checkpoints", "2"])
        try {
          const { tools } = await server.client.listTools()
          assert.include(tools.map((t) => t.name), "computer_checkpoint")
          const created = await server.call("computer_create", {})
          const original = created.structured.computer_id as string
          const setup = await server.call("sandbox_exec", {
            computer_id: original,
            command: "echo prepared > note && mkdir -p .local/bin && printf '#!/bin/sh\\necho tool works\\n' > .local/bin/tool && chmod +x .local/bin/tool"
          })
          assert.strictEqual(setup.structured.exit_code, 0, setup.text)

          const taken = await server.call("computer_checkpoint", { computer_id: original, name: "prepared" })
          assert.isFalse(taken.isError, taken.text)
          const checkpoint = taken.structured.checkpoint.checkpoint_id as string
          assert.include(taken.structured.checkpoint.note, "not")

          const forks: Array<string> = []
          for (let n = 0; n < 3; n++) {
            const fork = await server.call("computer_create", { from_checkpoint: checkpoint })
            assert.isFalse(fork.isError, fork.text)
            forks.push(fork.structured.computer_id)
          }
          for (const [n, fork] of forks.entries()) {
            const seen = await server.call("sandbox_exec", { computer_id: fork, command: `cat note && .local/bin/tool && echo fork-${n} > note` })
            assert.strictEqual(seen.structured.stdout, "prepared\ntool works\n")
          }
          for (const [n, fork] of forks.entries()) {
            assert.strictEqual((await server.call("sandbox_exec", { computer_id: fork, command: "cat note" })).structured.stdout, `fork-${n}\n`)
          }
          assert.strictEqual((await server.call("sandbox_exec", { computer_id: original, command: "cat note" })).structured.stdout, "prepared\n")

          const listed = await server.call("computer_checkpoint", { action: "list" })
          assert.deepStrictEqual(listed.structured.checkpoints.map((c: { checkpoint_id: string }) => c.checkpoint_id), [checkpoint])
          await server.call("computer_checkpoint", { computer_id: original })
          const refused = await server.call("computer_checkpoint", { computer_id: original })
          assert.isTrue(refused.isError)
          assert.include(refused.text, "--max-checkpoints 2")

          const deleted = await server.call("computer_checkpoint", { action: "delete", checkpoint_id: checkpoint })
          assert.isFalse(deleted.isError, deleted.text)
          const gone = await server.call("computer_create", { from_checkpoint: checkpoint })
          assert.isTrue(gone.isError)
          assert.include(gone.text, `no checkpoint with id '${checkpoint}'`)
        } finally {
          await server.client.close()
        }
      }, 180_000)
    }
  )
}
