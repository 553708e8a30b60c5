import { defineConfig } from "vitest/config"

// The package's tests (scripts/test-package.mjs): the prebuilt helpers, the installed copy, the
// server image, and the end-to-end suites run again against the installed CLI. Kept out of the
// default run (vitest.config.ts), which tests this checkout's build.
export default defineConfig({
  test: {
    root: new URL("../..", import.meta.url).pathname,
    include: ["test/package/**/*.test.ts", "test/e2e/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 600_000,
    pool: "forks",
    fileParallelism: false,
    reporters: ["default"]
  }
})
