import { spawnSync } from "node:child_process"
import { describe } from "vitest"

const works = (command: string, args: ReadonlyArray<string>) => {
  const result = spawnSync(command, args, { stdio: "ignore" })
  return result.status === 0
}

/** bubblewrap is installed and can create a sandbox here. */
export const bwrapWorks = works("bwrap", ["--ro-bind", "/", "/", "--unshare-pid", "--dev", "/dev", "true"])

/**
 * A describe block that needs a tool: under CI=true a missing tool is a failure (the block runs and
 * fails loudly); locally the block is skipped with a message saying what is missing.
 */
export const describeIf = (available: boolean, what: string) => {
  if (available || process.env.CI === "true") {
    if (!available) {
      describe(`requirement: ${what}`, () => {
        throw new Error(`${what} is required under CI=true but is not available`)
      })
    }
    return describe
  }
  process.stderr.write(`skipping tests that need ${what}: not available on this machine\n`)
  return describe.skip
}
