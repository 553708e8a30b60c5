#!/usr/bin/env node
// Run by `npm pack` and `npm publish` (prepack): refuses to pack a package that would not run on a
// machine without a compiler — the built CLI and dashboard, the prebuilt native helpers of every
// shipped platform, intact and built from the sources being packed, and the WASI toolset with its
// licence texts.
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { intact, prebuiltTargets, readManifest, root, sourcesDigest } from "./native-sources.mjs"

const problems = []
const need = (condition, message) => {
  if (!condition) problems.push(message)
}

const bin = join(root, "dist", "bin", "kilntainers.mjs")
need(existsSync(bin) && readFileSync(bin, "utf8").startsWith("#!/usr/bin/env node\n"), "dist/bin/kilntainers.mjs is missing or has no '#!/usr/bin/env node' line: npm run build")
need(existsSync(join(root, "dist", "src", "dashboard", "dashboard.html")), "the dashboard page is not built: npm run build")

const prebuiltDir = join(root, "prebuilt")
const manifest = readManifest(join(prebuiltDir, "manifest.json"))
if (manifest === undefined) {
  problems.push("prebuilt/manifest.json is missing: node scripts/build-prebuilt.mjs")
} else {
  need(manifest.sources === sourcesDigest(manifest.flags ?? []), "prebuilt/ was built from other sources than native/: node scripts/build-prebuilt.mjs")
  for (const { platform } of prebuiltTargets) {
    need(intact(manifest, prebuiltDir, platform), `prebuilt/${platform} is missing or differs from prebuilt/manifest.json: node scripts/build-prebuilt.mjs --force`)
  }
}

const toolsetDir = join(root, "wasm", "build")
const toolsetPath = join(toolsetDir, "toolset.json")
if (!existsSync(toolsetPath)) {
  problems.push("the WASI toolset is not built (wasm/build/toolset.json): bash wasm/build.sh (Debian bookworm; as root it installs clang-14 and wasi-libc)")
} else {
  const toolset = JSON.parse(readFileSync(toolsetPath, "utf8"))
  for (const module of Object.keys(toolset.modules ?? {})) need(existsSync(join(toolsetDir, module)), `wasm/build/${module} is missing: bash wasm/build.sh`)
  for (const source of toolset.sources ?? []) {
    need(typeof source.licenceFile === "string" && existsSync(join(toolsetDir, source.licenceFile)), `the licence of ${source.package} is not recorded in wasm/build: FORCE=1 bash wasm/build.sh`)
  }
}

if (problems.length > 0) {
  console.error(`check-package: not packing:\n  - ${problems.join("\n  - ")}`)
  process.exit(1)
}
console.error(`check-package: ready (prebuilt ${prebuiltTargets.map((t) => t.platform).join(", ")}; WASI toolset; dist)`)
