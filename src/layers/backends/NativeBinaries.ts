import { Effect } from "effect"
import { execFile } from "node:child_process"
import { existsSync, readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { BackendError } from "../../domain/Errors.js"

/** Paths of the native helper programs built from `native/`. */
export interface NativeBinaries {
  readonly agent: string
  readonly exec: string
}

/** The package root: the nearest ancestor whose package.json is named `kilntainers` (works from `src/` and `dist/src/`). */
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

const paths = (root: string): NativeBinaries => ({
  agent: join(root, "native", "build", "kt-agent"),
  exec: join(root, "native", "build", "kt-exec")
})

const present = (binaries: NativeBinaries) => existsSync(binaries.agent) && existsSync(binaries.exec)

/**
 * Locates `kt-agent` and `kt-exec`, building them with `scripts/build-native.mjs` when they are
 * missing (a fresh checkout, or an install that skipped the build).
 */
export const locate = (backend: string): Effect.Effect<NativeBinaries, BackendError> =>
  Effect.gen(function*() {
    const root = packageRoot()
    if (root === undefined) {
      return yield* new BackendError({ backend, reason: "cannot find the kilntainers package directory (package.json)" })
    }
    const binaries = paths(root)
    if (present(binaries)) return binaries
    const script = join(root, "scripts", "build-native.mjs")
    if (!existsSync(script)) {
      return yield* new BackendError({
        backend,
        reason: `the native helpers are missing (${binaries.agent}) and so is ${script}; reinstall kilntainers`
      })
    }
    const output = yield* Effect.async<string, BackendError>((resume) => {
      const child = execFile(process.execPath, [script], { cwd: root, timeout: 120_000 }, (error, _stdout, stderr) => {
        if (error) {
          resume(Effect.fail(new BackendError({ backend, reason: `building the native helpers failed: ${stderr.trim() || error.message}` })))
        } else {
          resume(Effect.succeed(stderr))
        }
      })
      return Effect.sync(() => child.kill("SIGKILL"))
    })
    if (!present(binaries)) {
      return yield* new BackendError({ backend, reason: `building the native helpers produced no binaries: ${output.trim()}` })
    }
    return binaries
  })
