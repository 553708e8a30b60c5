/**
 * Finds the native helpers (kt-agent, kt-sandbox) in the package, checked against their manifest
 * (NativeChecksums.ts), compiling them first where none are there; hands out the bytes it checked.
 */
import * as Effect from "effect/Effect"
import { execFile } from "node:child_process"
import { existsSync } from "node:fs"
import { join } from "node:path"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import { packageRoot } from "../../server/PackageRoot.js"
import * as NativeChecksums from "./NativeChecksums.js"

/** A native helper as it was checked against its manifest: where it was found, and the bytes hashed. */
export interface VerifiedHelper {
  /** The package's copy: read once; what changes there later changes nothing that runs. */
  readonly path: string
  /** What the server runs or copies (PrivateHelpers.ts, DockerAgent.ts): exactly the bytes it hashed. */
  readonly bytes: Uint8Array
}

/** The in-computer agent (native/kt-agent.c), a static binary where the toolchain allows, checked against its manifest. */
export interface NativeBinaries {
  /** Where it was found (tests run it from there). */
  readonly agent: string
  /** The bytes checked at startup: what goes into computers. */
  readonly agentBytes: Uint8Array
}

export { packageRoot } from "../../server/PackageRoot.js"

/**
 * Finds native helper `name` (`kt-agent`, `kt-sandbox`) for `platform` (default: this machine's),
 * checked against its manifest's SHA-256 (NativeChecksums.ts): compiled here (native/build) or
 * prebuilt (prebuilt/<platform>). When neither has it, it is compiled from source with
 * `scripts/build-native.mjs` (a fresh checkout, or a Linux machine the package has no prebuilt
 * helpers for), which needs a C compiler. Fails with reason "Invalid" when a helper is there but
 * fails the check (changed, or missing though its manifest lists it), "Unavailable" when there is none.
 */
export const locateHelper = (
  backend: string,
  name: string,
  platform: string = NativeChecksums.platformKey()
): Effect.Effect<VerifiedHelper, ProviderError> =>
  Effect.gen(function*() {
    const unavailable = (detail: string, cause?: unknown) => providerError(backend, "find the native helpers", "Unavailable", detail, cause)
    const root = packageRoot()
    if (root === undefined) return yield* unavailable("cannot find the kilntainers package directory (package.json)")
    const found = yield* NativeChecksums.find(backend, root, name, platform)
    if (found._tag === "Verified") return { path: found.path, bytes: found.bytes }
    const script = join(root, "scripts", "build-native.mjs")
    if (platform !== NativeChecksums.platformKey() || !platform.startsWith("linux-") || !existsSync(script)) {
      return yield* unavailable(found.reason)
    }
    const output = yield* Effect.async<string, ProviderError>((resume) => {
      const child = execFile(process.execPath, [script], { cwd: root, timeout: 120_000 }, (error, _stdout, stderr) => {
        if (error) {
          resume(Effect.fail(unavailable(`${found.reason}. Building them failed: ${stderr.trim() || error.message}`, error)))
        } else {
          resume(Effect.succeed(stderr))
        }
      })
      return Effect.sync(() => child.kill("SIGKILL"))
    })
    const built = yield* NativeChecksums.find(backend, root, name, platform)
    if (built._tag !== "Verified") {
      return yield* unavailable(`building the native helpers produced no ${name}: ${output.trim()}`)
    }
    return { path: built.path, bytes: built.bytes }
  })

/** Locates `kt-agent` (see `locateHelper`). */
export const locate = (backend: string, platform?: string): Effect.Effect<NativeBinaries, ProviderError> =>
  locateHelper(backend, "kt-agent", platform).pipe(Effect.map((agent) => ({ agent: agent.path, agentBytes: agent.bytes })))
