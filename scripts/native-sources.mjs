// What the native helpers are built from, shared by build-native.mjs (a local build from source into
// native/build) and build-prebuilt.mjs (the static binaries shipped in prebuilt/): the programs,
// their sources, the compiler flags, the platform names, and the manifest both write.
//
// A manifest (native/build/manifest.json, prebuilt/manifest.json) records, per platform, each
// helper's SHA-256; the server checks a helper against it before running it
// (src/layers/backends/agent/NativeChecksums.ts). It also records `sources`, the SHA-256 of the
// sources and flags it was built from, so a build can tell whether binaries are stale.
import { createHash } from "node:crypto"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

export const root = join(dirname(fileURLToPath(import.meta.url)), "..")
export const nativeDir = join(root, "native")

export const MANIFEST_SCHEMA = 1

/** Warnings on; the rest is the same for every build so that equal sources give equal binaries. */
export const WARNINGS = ["-Wall", "-Wextra", "-Wno-sign-compare", "-Wno-unused-parameter"]
export const OPTIMISE = ["-O2"]

/** The helper programs and their sources, relative to native/ (sorted: the link order is fixed). */
export const programs = () => {
  const inDir = (dir, suffix) =>
    readdirSync(join(nativeDir, dir)).filter((file) => file.endsWith(suffix)).sort().map((file) => `${dir}/${file}`)
  return [
    { name: "kt-agent", sources: ["kt-agent.c", ...inDir("kt-agent", ".c")], headers: inDir("kt-agent", ".h") },
    { name: "kt-sandbox", sources: ["kt-sandbox.c", ...inDir("kt-sandbox", ".c")], headers: inDir("kt-sandbox", ".h") }
  ]
}

/** SHA-256 of every source and header, with their names, and of the flags given. */
export const sourcesDigest = (flags) => {
  const hash = createHash("sha256")
  const files = [...new Set(programs().flatMap((p) => [...p.sources, ...p.headers]))].sort()
  for (const file of files) {
    hash.update(`${file}\0`)
    hash.update(readFileSync(join(nativeDir, file)))
    hash.update("\0")
  }
  hash.update(JSON.stringify(flags))
  return hash.digest("hex")
}

export const sha256 = (path) => createHash("sha256").update(readFileSync(path)).digest("hex")

/** Node's platform and arch as a helper platform name: linux-x64, linux-arm64, darwin-arm64, … */
export const platformKey = (platform = process.platform, arch = process.arch) => `${platform}-${arch}`

/** The platforms prebuilt/ carries, and the Debian compilers that build them. */
export const prebuiltTargets = [
  { platform: "linux-x64", cc: "x86_64-linux-gnu-gcc", libcPackages: ["libc6-dev-amd64-cross", "libc6-dev"], elfMachine: 62 },
  { platform: "linux-arm64", cc: "aarch64-linux-gnu-gcc", libcPackages: ["libc6-dev-arm64-cross", "libc6-dev"], elfMachine: 183 }
]

export const readManifest = (path) => {
  if (!existsSync(path)) return undefined
  try {
    const manifest = JSON.parse(readFileSync(path, "utf8"))
    return manifest && manifest.schema === MANIFEST_SCHEMA ? manifest : undefined
  } catch {
    return undefined
  }
}

/**
 * Every helper a manifest (in `manifestDir`) lists for the platform exists and has the recorded
 * SHA-256.
 */
export const intact = (manifest, manifestDir, platform) => {
  const entry = manifest?.platforms?.[platform]
  const files = entry?.files
  if (!files || typeof entry.dir !== "string") return false
  return programs().every(({ name }) => {
    const path = join(manifestDir, entry.dir, name)
    return files[name] !== undefined && existsSync(path) && sha256(path) === files[name].sha256
  })
}
