#!/usr/bin/env node
// Compiles the native helpers (native/*.c) into native/build/, skipping those that are up to date.
// Static binaries are preferred (they are copied into containers later); dynamic is the fallback.
import { spawnSync } from "node:child_process"
import { existsSync, mkdirSync, renameSync, statSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const nativeDir = join(root, "native")
const buildDir = join(nativeDir, "build")
const programs = ["kt-agent", "kt-exec"]
const cc = process.env.CC || "cc"
const force = process.argv.includes("--force")

const mtime = (path) => (existsSync(path) ? statSync(path).mtimeMs : -1)

const compile = (source, output, extra) => {
  const tmp = `${output}.tmp-${process.pid}`
  const result = spawnSync(cc, ["-O2", "-Wall", "-Wextra", "-Wno-sign-compare", "-Wno-unused-parameter", ...extra, "-o", tmp, source], {
    encoding: "utf8"
  })
  if (result.error && result.error.code === "ENOENT") {
    console.error(
      `build-native: no C compiler found ('${cc}'). Install one, e.g. 'sudo apt-get install build-essential', then run 'npm run build:native'.`
    )
    process.exit(1)
  }
  if (result.status === 0) {
    renameSync(tmp, output)
    return { ok: true, stderr: result.stderr }
  }
  return { ok: false, stderr: result.stderr }
}

mkdirSync(buildDir, { recursive: true })
for (const name of programs) {
  const source = join(nativeDir, `${name}.c`)
  const output = join(buildDir, name)
  if (!force && mtime(output) >= mtime(source) && mtime(output) >= mtime(fileURLToPath(import.meta.url))) continue
  let result = compile(source, output, ["-static"])
  let linkage = "static"
  if (!result.ok) {
    result = compile(source, output, [])
    linkage = "dynamic"
  }
  if (!result.ok) {
    console.error(`build-native: compiling ${name} failed:\n${result.stderr}`)
    process.exit(1)
  }
  const warnings = result.stderr.split("\n").filter((line) => line.includes("warning:") && !line.includes("statically linked"))
  if (warnings.length > 0) console.error(result.stderr)
  console.error(`build-native: built native/build/${name} (${linkage})`)
}
