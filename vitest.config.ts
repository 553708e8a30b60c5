import { configDefaults, defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The package's own tests run against a packed and installed copy: npm run test:package.
    exclude: [...configDefaults.exclude, "test/package/**"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    reporters: ["default"]
  }
})
