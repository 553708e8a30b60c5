/**
 * `npm pack` from a clone makes everything it ships (issue 23: it stopped until `bash wasm/build.sh`
 * was run by hand). The package's files that are built, not checked in — the WASI toolset, the
 * prebuilt helpers, dist — each have a step in `prepack` before check-package, which refuses a
 * package without them. Packing a clean clone for real (minutes, as root for the toolchain) is done
 * by hand; `npm run test:package` packs a built tree.
 */
import { assert, it } from "vitest"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { root } from "./support/McpHarness.js"

const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  readonly files: ReadonlyArray<string>
  readonly scripts: Readonly<Record<string, string>>
}

/** What makes each built part of the package, and the packed path that shows it is shipped. */
const MAKERS: ReadonlyArray<readonly [step: string, shipped: string]> = [
  ["bash wasm/build.sh", "wasm/build/toolset.json"],
  ["node scripts/build-prebuilt.mjs", "prebuilt"],
  ["npm run build", "dist/bin"]
]

it("npm pack builds the toolset, the prebuilt helpers and dist before check-package looks for them", () => {
  const steps = manifest.scripts["prepack"]!.split("&&").map((step) => step.trim())
  assert.strictEqual(steps.at(-1), "node scripts/check-package.mjs", steps.join(" && "))
  for (const [step, shipped] of MAKERS) {
    assert.include(manifest.files, shipped, `the package ships ${shipped}`)
    assert.include(steps.slice(0, -1), step, `prepack runs ${step} before check-package`)
  }
  // The toolset's build keeps a tree that is up to date, so packing a built clone stays quick.
  assert.include(readFileSync(join(root, "wasm", "build.sh"), "utf8"), "up to date")
})
