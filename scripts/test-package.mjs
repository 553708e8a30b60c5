#!/usr/bin/env node
// Tests the npm package as users get it (`npm run test:package`; CI runs it after `npm test`):
//   1. the prebuilt helpers' own tests (test/package/prebuilt.test.ts: reproducible, static, the
//      arm64 agent under qemu), with the machine's compilers;
//   2. `npm pack` (prepack: the WASI toolset, prebuilt helpers, build, check-package), then `npm install` of the
//      tarball into an empty directory with a PATH on which cc, gcc, clang (and c++, g++, clang++)
//      are shims that fail, so nothing can be compiled;
//   3. with that PATH, the installed copy's tests (test/package/installed.test.ts) and the end-to-end
//      suites (stdio, HTTP, computers, toolset) against the installed CLI (KILNTAINERS_TEST_BIN), and
//      the server image (test/package/image.test.ts: Dockerfile, compose up, HTTP, compose down).
//
//   node scripts/test-package.mjs [--keep] [--cold-cache] [vitest file filters...]
//     --keep        keep the temporary directory (tarball, install) and print it
//     --cold-cache  install with an empty npm cache (what a first-time user waits for)
import { spawnSync } from "node:child_process"
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(fileURLToPath(import.meta.url), "..", "..")
const args = process.argv.slice(2)
const keep = args.includes("--keep")
const coldCache = args.includes("--cold-cache")
const filters = args.filter((arg) => !arg.startsWith("--"))
const npm = process.platform === "win32" ? "npm.cmd" : "npm"

const step = (title) => console.error(`\ntest-package: ${title}`)
const run = (command, commandArgs, options = {}) => {
  const started = process.hrtime.bigint()
  const result = spawnSync(command, commandArgs, { stdio: "inherit", ...options })
  const seconds = Number(process.hrtime.bigint() - started) / 1e9
  if (result.status !== 0) {
    console.error(`test-package: '${command} ${commandArgs.join(" ")}' failed (exit ${result.status ?? result.signal})`)
    process.exit(1)
  }
  return seconds
}

const work = mkdtempSync(join(tmpdir(), "kt-package-"))
const timings = {}
try {
  // 1. The prebuilt helpers, built and tested with the compilers this machine has.
  const vitest = join(root, "node_modules", ".bin", "vitest")
  const config = join(root, "test", "package", "vitest.config.ts")
  if (filters.length === 0 || filters.some((f) => "test/package/prebuilt.test.ts".includes(f))) {
    step("the prebuilt helpers (reproducible, static, arm64 under qemu)")
    timings.prebuiltTests = run(vitest, ["run", "--config", config, "test/package/prebuilt.test.ts"], { cwd: root })
  }

  // 2. Pack, then install into an empty directory where no compiler works.
  step("npm pack")
  const packDir = join(work, "pack")
  mkdirSync(packDir)
  timings.pack = run(npm, ["pack", "--pack-destination", packDir], { cwd: root })
  const tarball = join(packDir, readdirSync(packDir).find((file) => file.endsWith(".tgz")))
  const tarballBytes = statSync(tarball).size

  const shims = join(work, "no-compiler")
  mkdirSync(shims)
  for (const name of ["cc", "gcc", "clang", "c++", "g++", "clang++", "gcc-12", "clang-14"]) {
    writeFileSync(join(shims, name), `#!/bin/sh\necho "${name}: no compiler on this machine (kilntainers package test)" >&2\nexit 1\n`)
    chmodSync(join(shims, name), 0o755)
  }
  const env = { ...process.env, PATH: `${shims}:${process.env.PATH ?? "/usr/bin:/bin"}`, CC: join(shims, "cc"), CXX: join(shims, "c++") }
  if (coldCache) env.npm_config_cache = join(work, "npm-cache")

  step(`npm install ${tarball} (${(tarballBytes / 1e6).toFixed(2)} MB) into an empty directory, with cc/gcc/clang failing`)
  const install = join(work, "install")
  mkdirSync(install)
  writeFileSync(join(install, "package.json"), `${JSON.stringify({ name: "kilntainers-install-test", private: true }, null, 2)}\n`)
  timings.install = run(npm, ["install", "--no-audit", "--no-fund", tarball], { cwd: install, env })

  // 3. The installed copy, under the same PATH.
  step("the installed copy: its own tests, the end-to-end suites against it, and the server image")
  const files = filters.length > 0
    ? filters.filter((f) => !"test/package/prebuilt.test.ts".includes(f))
    : [
      "test/package/installed.test.ts",
      "test/e2e/stdio.test.ts",
      "test/e2e/http.test.ts",
      "test/e2e/computers.test.ts",
      "test/e2e/toolset.test.ts",
      "test/package/image.test.ts"
    ]
  if (files.length > 0) {
    timings.installedTests = run(vitest, ["run", "--config", config, ...files], {
      cwd: root,
      env: {
        ...env,
        KILNTAINERS_TEST_BIN: join(install, "node_modules", "kilntainers", "dist", "bin", "kilntainers.mjs"),
        KILNTAINERS_TEST_INSTALL: install,
        KILNTAINERS_TEST_TARBALL: tarball
      }
    })
  }

  const format = (s) => (s === undefined ? "-" : `${s.toFixed(1)} s`)
  console.error(
    `\ntest-package: passed. tarball ${tarballBytes} bytes; pack ${format(timings.pack)}; install without a compiler ${format(timings.install)}` +
      `${coldCache ? " (cold npm cache)" : ""}; prebuilt tests ${format(timings.prebuiltTests)}; installed tests ${format(timings.installedTests)}`
  )
} finally {
  if (keep) console.error(`test-package: kept ${work}`)
  else rmSync(work, { recursive: true, force: true })
}
