/**
 * The dashboard resource's page: the one `npm run build` bundles from src/dashboard, read by the
 * server from its own package (here, from the sources, the checkout's dist/).
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import * as Dashboard from "../../../src/layers/mcp/Dashboard.js"
import { root } from "../../support/McpHarness.js"
import { describeIf } from "../../support/Requirements.js"

const built = join(root, "dist", "src", "dashboard", "dashboard.html")

describeIf(existsSync(built), `the built dashboard (${built}; npm run build)`)("Dashboard.page", () => {
  it.effect("is the page the build wrote", () =>
    Effect.gen(function*() {
      const page = yield* Dashboard.page
      assert.strictEqual(page, readFileSync(built, "utf8"))
      assert.match(page, /^<!doctype html>/)
      assert.include(page, "kilntainers-dashboard")
    }))
})
