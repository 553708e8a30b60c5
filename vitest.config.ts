import { configDefaults, defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The package's own tests run against a packed and installed copy: npm run test:package.
    exclude: [...configDefaults.exclude, "test/package/**"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Two at once even on two cores (vitest's default there is one): most files wait on containers,
    // sandboxes and fakes, not on the CPU. The whole suite: 927 s beside 1,490 s with one, same machine.
    maxWorkers: 2,
    minWorkers: 1,
    reporters: ["default"]
  }
})
