#!/usr/bin/env node
// Cross-compiles the native helpers (kt-agent, kt-sandbox) as static binaries for every platform
// the package ships, with Debian's compilers, reproducibly, into prebuilt/:
//
//   prebuilt/linux-x64/{kt-agent,kt-sandbox}     x86_64-linux-gnu-gcc  (Debian: gcc, or gcc-x86-64-linux-gnu
//                                                                      and libc6-dev-amd64-cross on arm64)
//   prebuilt/linux-arm64/{kt-agent,kt-sandbox}   aarch64-linux-gnu-gcc (Debian: gcc-aarch64-linux-gnu and
//                                                                      libc6-dev-arm64-cross)
//   prebuilt/manifest.json                       SHA-256 and size of each, the compiler and C library
//                                                used, the digest of the sources and flags
//   prebuilt/NOTICE.md                           the C library linked in, its licence and where its
//                                                source is
//
// Reproducible: fixed flags, stripped, a content-derived build id, a clean environment (LC_ALL=C,
// TZ=UTC, SOURCE_DATE_EPOCH), and every build in a fresh temporary copy of the sources compiled by
// relative paths, so no path of the machine that built it reaches a binary.
//
//   node scripts/build-prebuilt.mjs           build (kept when prebuilt/ matches the sources)
//   node scripts/build-prebuilt.mjs --force   rebuild
//   node scripts/build-prebuilt.mjs --check   rebuild twice, in two different directories, and fail
//                                             unless both builds are byte-identical and hold no
//                                             build path
import { execFileSync, spawnSync } from "node:child_process"
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, relative } from "node:path"
import {
  intact,
  MANIFEST_SCHEMA,
  nativeDir,
  OPTIMISE,
  prebuiltTargets,
  programs,
  readManifest,
  root,
  sha256,
  sourcesDigest,
  WARNINGS
} from "./native-sources.mjs"

const outDir = join(root, "prebuilt")
const manifestPath = join(outDir, "manifest.json")
const force = process.argv.includes("--force")
const check = process.argv.includes("--check")

/** Everything that decides the bytes of a binary, besides the sources and the compiler. */
const FLAGS = [...OPTIMISE, ...WARNINGS, "-static", "-s", "-Wl,--build-id=sha1"]

const fail = (message) => {
  console.error(`build-prebuilt: ${message}`)
  process.exit(1)
}

/** The commit time of the last change to native/, else 0: recorded, and given to the compiler. */
const sourceDateEpoch = () => {
  if (process.env.SOURCE_DATE_EPOCH) return process.env.SOURCE_DATE_EPOCH
  const git = spawnSync("git", ["log", "-1", "--format=%ct", "--", "native"], { cwd: root, encoding: "utf8" })
  const epoch = git.status === 0 ? git.stdout.trim() : ""
  return /^\d+$/.test(epoch) ? epoch : "0"
}

const cleanEnv = (epoch) => ({
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  LC_ALL: "C",
  TZ: "UTC",
  SOURCE_DATE_EPOCH: epoch
})

const run = (command, args, options = {}) => {
  const result = spawnSync(command, args, { encoding: "utf8", ...options })
  if (result.error?.code === "ENOENT") return { ok: false, missing: true, output: "" }
  return { ok: result.status === 0, missing: false, output: `${result.stdout ?? ""}${result.stderr ?? ""}` }
}

/** The compiler's version line and the Debian package (and version) of the C library it links. */
const toolchain = (target) => {
  const version = run(target.cc, ["--version"])
  if (version.missing || !version.ok) {
    const packages = target.platform === "linux-arm64"
      ? "gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
      : "gcc-x86-64-linux-gnu libc6-dev-amd64-cross (or gcc on an x86-64 machine)"
    fail(`${target.cc} is not installed; on Debian: apt-get install ${packages}`)
  }
  const libcPath = execFileSync(target.cc, ["-print-file-name=libc.a"], { encoding: "utf8" }).trim()
  if (!existsSync(libcPath)) fail(`${target.cc} has no static C library (libc.a); install ${target.libcPackages[0]}`)
  const owner = run("dpkg-query", ["-S", realpathSync(libcPath)])
  const pkg = owner.ok ? owner.output.split(":")[0].trim() : undefined
  const pkgVersion = pkg ? run("dpkg-query", ["-W", "-f", "${Version}", pkg]).output.trim() : undefined
  return {
    compiler: version.output.split("\n")[0].trim(),
    libc: pkg ? `glibc, Debian package ${pkg} ${pkgVersion}` : `glibc (${realpathSync(libcPath)})`
  }
}

/** Builds every program for one target in a fresh copy of native/ under `workDir`; returns their paths. */
const buildTarget = (target, workDir, epoch) => {
  const src = join(workDir, "src")
  cpSync(nativeDir, src, { recursive: true, filter: (path) => !path.startsWith(join(nativeDir, "build")) })
  const built = {}
  for (const program of programs()) {
    const output = join(workDir, program.name)
    const result = run(target.cc, [...FLAGS, "-o", output, ...program.sources], { cwd: src, env: cleanEnv(epoch) })
    if (!result.ok) fail(`compiling ${program.name} for ${target.platform} with ${target.cc} failed:\n${result.output}`)
    const warnings = result.output.split("\n").filter((line) => line.includes("warning:") && !line.includes("statically linked"))
    if (warnings.length > 0) console.error(result.output)
    built[program.name] = output
  }
  return built
}

/** The ELF header says the binary is for the target, and it has no program interpreter (static). */
const checkElf = (path, target) => {
  const bytes = readFileSync(path)
  if (bytes.readUInt32BE(0) !== 0x7f454c46 || bytes[4] !== 2 || bytes[5] !== 1) fail(`${path} is not a 64-bit little-endian ELF file`)
  const machine = bytes.readUInt16LE(18)
  if (machine !== target.elfMachine) fail(`${path} is for ELF machine ${machine}, not ${target.elfMachine} (${target.platform})`)
  const phoff = Number(bytes.readBigUInt64LE(32))
  const phentsize = bytes.readUInt16LE(54)
  const phnum = bytes.readUInt16LE(56)
  for (let i = 0; i < phnum; i++) {
    if (bytes.readUInt32LE(phoff + i * phentsize) === 3) fail(`${path} has a program interpreter: it is not static`)
  }
}

const digest = sourcesDigest(FLAGS)
const current = readManifest(manifestPath)
const upToDate = current?.sources === digest &&
  prebuiltTargets.every((target) => intact(current, outDir, target.platform))
if (upToDate && !force && !check) {
  console.error(`build-prebuilt: prebuilt/ is up to date (sources ${digest.slice(0, 12)})`)
  process.exit(0)
}

const epoch = sourceDateEpoch()
const work = mkdtempSync(join(tmpdir(), "kt-prebuilt-"))
try {
  const platforms = {}
  const staged = join(work, "out")
  for (const target of prebuiltTargets) {
    const { compiler, libc } = toolchain(target)
    const first = buildTarget(target, mkdtempSync(join(work, "a-")), epoch)
    if (check) {
      // A second build in a directory of another name and depth: equal bytes mean no path, time or
      // other accident of the build reached the binaries.
      const otherDir = join(mkdtempSync(join(work, "second-build-")), "deeper")
      mkdirSync(otherDir)
      const second = buildTarget(target, otherDir, epoch)
      for (const [name, path] of Object.entries(first)) {
        if (!readFileSync(path).equals(readFileSync(second[name]))) fail(`${target.platform}/${name}: two builds differ; the build is not reproducible`)
        const text = readFileSync(path).toString("latin1")
        for (const leak of [work, root, tmpdir() + "/kt-prebuilt"]) {
          if (text.includes(leak)) fail(`${target.platform}/${name} contains the build path ${leak}`)
        }
      }
    }
    const files = {}
    mkdirSync(join(staged, target.platform), { recursive: true })
    for (const [name, path] of Object.entries(first)) {
      checkElf(path, target)
      const dest = join(staged, target.platform, name)
      cpSync(path, dest)
      files[name] = { sha256: sha256(dest), bytes: statSync(dest).size }
    }
    platforms[target.platform] = { dir: target.platform, compiler, libc, linkage: "static", files }
    const summary = Object.entries(files).map(([name, f]) => `${name} ${f.bytes} bytes ${f.sha256.slice(0, 12)}`).join(", ")
    console.error(`build-prebuilt: ${target.platform}: ${summary}${check ? " (built twice: identical)" : ""}`)
  }
  const manifest = {
    schema: MANIFEST_SCHEMA,
    generator: "scripts/build-prebuilt.mjs",
    sources: digest,
    sourceDateEpoch: Number(epoch),
    flags: FLAGS,
    platforms
  }
  writeFileSync(join(staged, "manifest.json"), `${JSON.stringify(manifest, null, 2)}\n`)
  writeFileSync(join(staged, "NOTICE.md"), notice(platforms))
  // Replace prebuilt/ whole, so it never mixes two builds.
  if (check && current?.sources === digest && JSON.stringify(current.platforms) !== JSON.stringify(platforms)) {
    console.error("build-prebuilt: note: these binaries differ from the ones in prebuilt/ (another compiler or C library?)")
  }
  rmSync(outDir, { recursive: true, force: true })
  renameSync(staged, outDir)
  console.error(`build-prebuilt: wrote ${relative(root, outDir)}/ (sources ${digest.slice(0, 12)}, SOURCE_DATE_EPOCH=${epoch})`)
} finally {
  rmSync(work, { recursive: true, force: true })
}

function notice(platforms) {
  const lines = Object.entries(platforms).map(([platform, entry]) => `- ${platform}: ${entry.libc}; compiled by ${entry.compiler}`)
  return `# The prebuilt native helpers

\`kt-agent\` and \`kt-sandbox\` (the sources are \`native/\` in this package, MIT) are linked
statically with the GNU C Library, which is licensed under the GNU Lesser General Public License,
version 2.1 or later:

${lines.join("\n")}

The C library's source is Debian's \`glibc\` source package of that version
(https://sources.debian.org/src/glibc/). To relink the helpers against another C library, build them
from source: \`node scripts/build-native.mjs --from-source\` (in a clone: \`npm run build:native --
--from-source\`) compiles \`native/\` with the machine's C compiler into \`native/build/\`, which the
server then uses instead of these. \`scripts/build-prebuilt.mjs\` (in the repository) rebuilds these
binaries byte for byte with the compilers named above.
`
}
