/**
 * Where kilntainers is installed: the nearest ancestor directory whose package.json is named
 * `kilntainers`. Files the server reads at run time (the dashboard page, the native helpers, the
 * WASM toolset and worker programs) are found from here, so the same lookups work from the
 * sources, the compiled `dist/src` tree and the bundled CLI in `dist/bin`.
 */
import { existsSync, readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

export const packageRoot = (from: string = fileURLToPath(import.meta.url)): string | undefined => {
  let dir = dirname(from)
  for (;;) {
    const manifest = join(dir, "package.json")
    if (existsSync(manifest)) {
      try {
        if ((JSON.parse(readFileSync(manifest, "utf8")) as { name?: unknown }).name === "kilntainers") return dir
      } catch {
        // not ours; keep walking up
      }
    }
    const parent = dirname(dir)
    if (parent === dir) return undefined
    dir = parent
  }
}

/** A path inside the installed package, when the package can be found. */
export const inPackage = (...parts: ReadonlyArray<string>): string | undefined => {
  const root = packageRoot()
  return root === undefined ? undefined : join(root, ...parts)
}
