import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { program } from "../examples/library.js"
import { root } from "./support/McpHarness.js"
import { bwrapWorks, describeIf } from "./support/Requirements.js"

describeIf(bwrapWorks, "bubblewrap")("the library example of the README", () => {
  it("is in the README verbatim", () => {
    const example = readFileSync(join(root, "examples", "library.ts"), "utf8")
    const readme = readFileSync(join(root, "README.md"), "utf8")
    const body = example.slice(0, example.indexOf("// Run it:")).trim()
    assert.include(readme, body)
  })

  it.live("runs: a command, a process that moves to the background, a wait on its output", () =>
    Effect.gen(function*() {
      const result = yield* program
      assert.strictEqual(result.hello, "hello from my-app")
      assert.strictEqual(result.backgrounded, "running")
      assert.strictEqual(result.ready, "matched")
    }))
})
