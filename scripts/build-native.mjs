#!/usr/bin/env node
// The native helpers (native/kt-agent.c with native/kt-agent/*.c, and native/kt-sandbox.c with native/kt-sandbox/*.c, the host
// sandbox's launcher) for this machine.
//
// When prebuilt/ (scripts/build-prebuilt.mjs; shipped in the npm package) holds them for this
// platform, built from these very sources, they are used as they are and nothing is compiled.
// Otherwise, or with --from-source, they are compiled with the machine's C compiler (`CC`, default
// `cc`) into native/build/, with a manifest of their SHA-256 (native/build/manifest.json), which
// the server checks before running them and prefers to prebuilt/. A static binary is preferred (the
// agent is copied into containers); dynamic is the fallback.
//
//   node scripts/build-native.mjs [--from-source] [--force]
import { spawnSync } from "node:child_process"
import { existsSync, mkdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import {
  intact,
  MANIFEST_SCHEMA,
  nativeDir,
  OPTIMISE,
  platformKey,
  programs,
  readManifest,
  root,
  sha256,
  sourcesDigest,
  WARNINGS
} from "./native-sources.mjs"

const buildDir = join(nativeDir, "build")
const manifestPath = join(buildDir, "manifest.json")
const prebuiltDir = join(root, "prebuilt")
const cc = process.env.CC || "cc"
const fromSource = process.argv.includes("--from-source")
const force = process.argv.includes("--force")
const platform = platformKey()
const FLAGS = [...OPTIMISE, ...WARNINGS]

if (process.platform !== "linux") {
  // Linux programs (namespaces, seccomp, epoll): nothing to build here. A Docker engine's Linux
  // computers get the agent from prebuilt/.
  console.error(`build-native: the native helpers are Linux programs; nothing to build on ${platform}`)
  process.exit(0)
}

const prebuilt = readManifest(join(prebuiltDir, "manifest.json"))
const prebuiltFits = prebuilt !== undefined && intact(prebuilt, prebuiltDir, platform) &&
  prebuilt.sources === sourcesDigest(prebuilt.flags ?? [])
const local = readManifest(manifestPath)
const localDigest = sourcesDigest(FLAGS)
const localFits = local !== undefined && local.sources === localDigest && intact(local, buildDir, platform)

const removeLocal = () => {
  for (const file of ["manifest.json", ...programs().map((p) => p.name)]) rmSync(join(buildDir, file), { force: true })
}

if (!fromSource && !force && localFits) process.exit(0)
if (!fromSource && prebuiltFits) {
  // A stale local build would shadow the prebuilt binaries (the server prefers native/build).
  if (local !== undefined || existsSync(join(buildDir, "kt-agent"))) removeLocal()
  console.error(`build-native: using the prebuilt helpers in prebuilt/${platform} (--from-source compiles them instead)`)
  process.exit(0)
}

const compile = (sources, output, extra) => {
  const tmp = `${output}.tmp-${process.pid}`
  const result = spawnSync(cc, [...FLAGS, ...extra, "-o", tmp, ...sources], { cwd: nativeDir, encoding: "utf8" })
  if (result.error && result.error.code === "ENOENT") {
    console.error(
      `build-native: no C compiler found ('${cc}') and no prebuilt helpers for ${platform} (prebuilt/ holds linux-x64 and linux-arm64 in the npm package). ` +
        `Install one, e.g. 'sudo apt-get install build-essential', then run 'npm run build:native'.`
    )
    process.exit(1)
  }
  if (result.status === 0) {
    renameSync(tmp, output)
    return { ok: true, stderr: result.stderr }
  }
  rmSync(tmp, { force: true })
  return { ok: false, stderr: `${result.stderr}${result.error ? String(result.error) : ""}` }
}

removeLocal()
mkdirSync(buildDir, { recursive: true })
const files = {}
for (const { name, sources } of programs()) {
  const output = join(buildDir, name)
  let linkage = "static"
  let result = compile(sources, output, ["-static"])
  if (!result.ok) {
    result = compile(sources, output, [])
    linkage = "dynamic"
  }
  if (!result.ok) {
    console.error(`build-native: compiling ${name} failed:\n${result.stderr}`)
    process.exit(1)
  }
  const warnings = result.stderr.split("\n").filter((line) => line.includes("warning:") && !line.includes("statically linked"))
  if (warnings.length > 0) console.error(result.stderr)
  files[name] = { sha256: sha256(output), bytes: statSync(output).size, linkage }
  console.error(`build-native: built native/build/${name} (${linkage})`)
}
const version = spawnSync(cc, ["--version"], { encoding: "utf8" }).stdout?.split("\n")[0]?.trim() ?? cc
const manifest = {
  schema: MANIFEST_SCHEMA,
  generator: "scripts/build-native.mjs",
  sources: localDigest,
  flags: FLAGS,
  platforms: { [platform]: { dir: ".", compiler: version, files } }
}
writeFileSync(`${manifestPath}.tmp`, `${JSON.stringify(manifest, null, 2)}\n`)
renameSync(`${manifestPath}.tmp`, manifestPath)
