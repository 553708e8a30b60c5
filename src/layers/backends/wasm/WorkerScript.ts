/**
 * Where the program of a worker thread (ShellWorker.ts, ToolWorker.ts) comes from. Built, it is
 * the compiled module next to this one (`dist/…/ShellWorker.js`); from the TypeScript sources
 * (vitest), it is bundled once per process with esbuild (a development dependency) and started
 * with `eval: true`.
 */
import { existsSync } from "node:fs"
import { createRequire } from "node:module"
import { fileURLToPath } from "node:url"
import { inPackage } from "../../server/PackageRoot.js"

/** A worker program: an absolute file path, or the source of a CommonJS bundle. */
export interface WorkerScript {
  readonly source: string
  readonly eval: boolean
}

const bundles = new Map<string, WorkerScript>()

interface Esbuild {
  readonly buildSync: (options: Record<string, unknown>) => { readonly outputFiles: ReadonlyArray<{ readonly text: string }> }
}

export const workerScript = (name: "ShellWorker" | "ToolWorker"): WorkerScript => {
  const beside = new URL(`./${name}.js`, import.meta.url)
  if (!import.meta.url.endsWith(".ts") && existsSync(beside)) return { source: fileURLToPath(beside), eval: false }
  // Bundled into the CLI (dist/bin): the compiled worker programs of the installed package.
  const installed = import.meta.url.endsWith(".ts") ? undefined : inPackage("dist", "src", "layers", "backends", "wasm", `${name}.js`)
  if (installed !== undefined && existsSync(installed)) return { source: installed, eval: false }
  let script = bundles.get(name)
  if (script === undefined) {
    const esbuild = createRequire(import.meta.url)("esbuild") as Esbuild
    const built = esbuild.buildSync({
      entryPoints: [fileURLToPath(new URL(`./${name}.ts`, import.meta.url))],
      bundle: true,
      platform: "node",
      format: "cjs",
      target: "node20",
      write: false,
      logLevel: "silent"
    })
    script = { source: built.outputFiles[0]!.text, eval: true }
    bundles.set(name, script)
  }
  return script
}
