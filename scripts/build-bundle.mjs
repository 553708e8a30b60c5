#!/usr/bin/env node
// Bundles the `kilntainers` command (dist/src/cli/bin.js, compiled by tsc) with esbuild into
// dist/bin/kilntainers.mjs plus chunks for what it loads lazily (backends, HTTP, egress, traces).
// A stdio server then starts from a handful of files instead of ~750 modules (effect, the MCP SDK,
// zod, fast-check): issue 12's startup budget. The library (dist/src) is not bundled. Dependencies
// only lazily loaded code needs — the cloud and container SDKs, OpenTelemetry, the X.509 library —
// stay external and load from node_modules when their backend or feature is chosen.
import { build } from "esbuild"
import { readFileSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const { dependencies } = JSON.parse(readFileSync(join(root, "package.json"), "utf8"))
/** Bundled: what every start needs. Everything else a dependency is stays external. */
const bundled = new Set([
  "effect",
  "@effect/platform",
  "@effect/platform-node",
  "@effect/cli",
  "@effect/printer",
  "@effect/printer-ansi",
  "@effect/typeclass",
  "@modelcontextprotocol/server",
  "@modelcontextprotocol/core",
  "zod",
  "re2js"
])
const external = [
  ...Object.keys(dependencies).filter((name) => !bundled.has(name)).flatMap((name) => [name, `${name}/*`]),
  // Loaded on first use only (LazyJsonSchemaValidator), from node_modules.
  "@modelcontextprotocol/server/validators/ajv"
]
const outdir = join(root, "dist", "bin")
// The SDK's Server imports its Ajv validator eagerly (~290 KB of Ajv, its formats and fast-uri, and
// an Ajv instance per Server, through `@modelcontextprotocol/server/_shims`): a start would pay for
// it though only elicitation uses it. Our Server is always given
// src/layers/mcp/LazyJsonSchemaValidator.ts, which requires the SDK's own validator on first use
// (`@modelcontextprotocol/server/validators/ajv`, external); the bundled SDK gets a stand-in that
// refuses to be the default.
const sdkAjvStandIn = {
  name: "sdk-ajv-stand-in",
  setup(build) {
    build.onResolve({ filter: /^@modelcontextprotocol\/server\/_shims$/ }, () => ({ path: "shims", namespace: "sdk-ajv-stand-in" }))
    build.onLoad({ filter: /.*/, namespace: "sdk-ajv-stand-in" }, () => ({
      contents: "import process from 'node:process'; export { process }; " +
        "export class DefaultJsonSchemaValidator { constructor() { throw new Error(" +
        "'kilntainers bundle: pass jsonSchemaValidator (LazyJsonSchemaValidator) to the MCP Server') } }",
      loader: "js"
    }))
  }
}
// @effect/cli imports YAML, TOML and INI parsers for its file options (Options.fileParse), which the
// kilntainers command does not have: ~300 KB a start would parse for nothing. They become stand-ins
// that refuse to be used.
const configFileParsers = {
  name: "config-file-parsers-stand-in",
  setup(build) {
    build.onResolve({ filter: /^(yaml|toml|ini)$/ }, (args) =>
      args.importer.includes(join("@effect", "cli")) ? { path: args.path, namespace: "config-file-parsers-stand-in" } : undefined)
    build.onLoad({ filter: /.*/, namespace: "config-file-parsers-stand-in" }, (args) => ({
      contents: `export const parse = () => { throw new Error("kilntainers bundle: no ${args.path} files are read") }`,
      loader: "js"
    }))
  }
}
rmSync(outdir, { recursive: true, force: true })
const result = await build({
  entryPoints: { kilntainers: join(root, "dist", "src", "cli", "bin.js") },
  outdir,
  outExtension: { ".js": ".mjs" },
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  external,
  minifySyntax: true,
  minifyWhitespace: true,
  chunkNames: "chunks/[name]-[hash]",
  // CommonJS dependencies bundled into ESM (ajv) call require().
  banner: { js: "import { createRequire as __ktCreateRequire } from 'node:module'; const require = __ktCreateRequire(import.meta.url);" },
  metafile: true,
  plugins: [sdkAjvStandIn, configFileParsers],
  logLevel: "warning"
})
const bytes = Object.values(result.metafile.outputs).reduce((sum, output) => sum + output.bytes, 0)
console.error(`build-bundle: dist/bin/kilntainers.mjs and ${Object.keys(result.metafile.outputs).length - 1} chunks, ${bytes} bytes`)
// What went where, for whoever weighs the startup path: `npx esbuild --analyze`-style input lists.
writeFileSync(join(root, "dist", "bundle-meta.json"), JSON.stringify(result.metafile))
