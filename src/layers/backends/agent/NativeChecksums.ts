/**
 * The native helpers' manifests, and the check that a helper is the one they record before it runs.
 *
 * Two places hold helpers, each with a `manifest.json` listing, per platform (`linux-x64`,
 * `linux-arm64`, …), each helper's SHA-256:
 *   - `native/build/`: compiled from source on this machine (`scripts/build-native.mjs`); preferred;
 *   - `prebuilt/`: the static binaries shipped in the npm package (`scripts/build-prebuilt.mjs`).
 * A helper whose bytes differ from its manifest's record, or that the manifest lists but is gone, is
 * refused: the server never runs a helper that changed after it was built. This guards against a
 * damaged or mixed-up install; whoever can rewrite the package can rewrite its manifest and its
 * JavaScript too, so it is not an authenticity check (npm's integrity hashes cover the tarball).
 * The check is made once, at startup, and bound to what runs: the bytes it hashed are returned, and
 * only they are run or copied (PrivateHelpers.ts, DockerAgent.ts), never the file read again.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { createHash } from "node:crypto"
import { existsSync } from "node:fs"
import { readFile } from "node:fs/promises"
import { dirname, join, relative } from "node:path"
import { providerError } from "../../../domain/Errors.js"

/** The platforms the npm package carries prebuilt helpers for. */
export const PREBUILT_PLATFORMS: ReadonlyArray<string> = ["linux-x64", "linux-arm64"]

/** Node's platform and architecture as a helper platform name (`linux-x64`, `darwin-arm64`, …). */
export const platformKey = (platform: string = process.platform, arch: string = process.arch): string => `${platform}-${arch}`

/**
 * The helper platform of a container engine's machine, from its `Architecture` (Docker reports
 * uname's `x86_64`/`aarch64`, Podman Go's `amd64`/`arm64`): the agent copied into containers must
 * be built for the engine, which need not be this machine.
 */
export const platformOfEngine = (architecture: string): string => {
  const arch = ({ x86_64: "x64", amd64: "x64", aarch64: "arm64", arm64: "arm64" } as Record<string, string>)[architecture.toLowerCase()]
  return platformKey("linux", arch ?? architecture)
}

const FileRecord = Schema.Struct({ sha256: Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/)), bytes: Schema.Number })

/** `manifest.json` of native/build or prebuilt (schema 1). */
export const Manifest = Schema.Struct({
  schema: Schema.Literal(1),
  platforms: Schema.Record({
    key: Schema.String,
    value: Schema.Struct({ dir: Schema.String, files: Schema.Record({ key: Schema.String, value: FileRecord }) })
  })
})
export type Manifest = typeof Manifest.Type

/** A helper checked against its manifest (`bytes`: those hashed), or why none was found (nothing here is a failure yet). */
export type Lookup =
  | { readonly _tag: "Verified"; readonly path: string; readonly sha256: string; readonly manifest: string; readonly bytes: Uint8Array }
  | { readonly _tag: "Absent"; readonly reason: string }

/** Where helpers may be, in the order they are preferred. */
export const manifestPaths = (root: string): ReadonlyArray<string> => [
  join(root, "native", "build", "manifest.json"),
  join(root, "prebuilt", "manifest.json")
]

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex")

/**
 * Finds helper `name` for `platform` in the package at `root` and checks its SHA-256. Fails, never
 * falling back to another copy, when a manifest lists it but the file is missing or differs.
 */
export const find = (backend: string, root: string, name: string, platform: string = platformKey()) =>
  Effect.gen(function*() {
    const fail = (reason: string) => providerError(backend, "check the native helpers", "Invalid", reason)
    const shown = (path: string) => relative(root, path) || path
    for (const manifestPath of manifestPaths(root)) {
      if (!existsSync(manifestPath)) continue
      const text = yield* Effect.tryPromise({
        try: () => readFile(manifestPath, "utf8"),
        catch: (error) => fail(`cannot read ${manifestPath}: ${String(error)}`)
      })
      const manifest = yield* Schema.decodeUnknown(Schema.parseJson(Manifest))(text).pipe(
        Effect.mapError(() => fail(`${manifestPath} is not a manifest of the native helpers; reinstall kilntainers or rebuild them (npm run build:native)`))
      )
      const entry = manifest.platforms[platform]
      const record = entry?.files[name]
      if (entry === undefined || record === undefined) continue
      const path = join(dirname(manifestPath), entry.dir, name)
      const bytes = yield* Effect.tryPromise({
        try: () => readFile(path),
        catch: () => fail(`the native helper ${shown(path)} is missing, though ${shown(manifestPath)} lists it; reinstall kilntainers`)
      })
      const actual = sha256(bytes)
      if (actual !== record.sha256) {
        return yield* fail(
          `refusing to run ${path}: its SHA-256 is ${actual}, but ${shown(manifestPath)} records ${record.sha256}. ` +
            `The file changed after it was built; reinstall kilntainers (from a clone: npm run build:native -- --from-source)`
        )
      }
      const verified: Lookup = { _tag: "Verified", path, sha256: actual, manifest: manifestPath, bytes }
      return verified
    }
    const absent: Lookup = { _tag: "Absent", reason: absence(platform) }
    return absent
  })

const absence = (platform: string) =>
  platform.startsWith("linux-")
    ? `no native helpers for ${platform}: the package ships them prebuilt for ${PREBUILT_PLATFORMS.join(" and ")}; ` +
      `elsewhere they are compiled from source (native/) on first use, which needs a C compiler (e.g. apt-get install build-essential)`
    : `the native helpers are Linux programs and this machine is ${platform}: the host backend needs Linux ` +
      `(prebuilt: ${PREBUILT_PLATFORMS.join(", ")})`
