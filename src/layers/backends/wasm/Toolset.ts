/**
 * The WebAssembly modules a WASM backend runs: the bundled WASI toolset built by `wasm/build.sh`
 * (toybox and original-awk for wasm32-wasi; `wasm/build/toolset.json` says which command runs
 * which module) or the user's module (`--wasm-path`). Each is compiled once, with its memory
 * capped at `--wasm-max-memory` (WasmModule.ts).
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { existsSync } from "node:fs"
import { readFile } from "node:fs/promises"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { type ProviderFailure, providerError } from "../../../domain/Errors.js"
import { capMemory } from "./WasmModule.js"

/** wasm/build of this checkout or package (from src/… or dist/src/…). */
export const findToolsetDir = (): string | undefined => {
  let at = dirname(fileURLToPath(import.meta.url))
  for (let i = 0; i < 6; i++) {
    const candidate = join(at, "wasm", "build")
    if (existsSync(join(candidate, "toolset.json"))) return candidate
    at = dirname(at)
  }
  return undefined
}

const Manifest = Schema.Struct({
  modules: Schema.Record({ key: Schema.String, value: Schema.Array(Schema.String) })
})

/** Reads, caps and compiles one module. */
export const loadModule = (backend: string, path: string, maxMemoryMb: number) =>
  Effect.gen(function*() {
    const fail = (detail: string, reason: ProviderFailure = "Invalid", cause?: unknown) =>
      providerError(backend, "load the WebAssembly module", reason, detail, cause)
    const bytes = yield* Effect.tryPromise({
      try: () => readFile(path),
      catch: (error) => fail(`cannot read ${path}: ${String(error)}`, "Unavailable", error)
    })
    const capped = capMemory(new Uint8Array(bytes), Math.floor(maxMemoryMb * 1024 * 1024))
    if (capped._tag === "Refused") return yield* fail(`${path}: ${capped.reason}`)
    if (capped.capped) {
      const declared = capped.declared.maximumPages === undefined ? "no maximum memory" : `a maximum of ${(capped.declared.maximumPages * 64) / 1024} MiB`
      yield* Effect.logInfo(`${backend} backend: ${path} declares ${declared}; capped at ${maxMemoryMb} MiB (--wasm-max-memory)`)
    }
    return yield* Effect.tryPromise({
      try: () => WebAssembly.compile(Uint8Array.from(capped.bytes)),
      catch: (error) => fail(`${path} is not a valid WebAssembly module: ${String(error)}`, "Invalid", error)
    })
  })

/** Command name → compiled module, for every command of the toolset. */
export const loadToolset = (backend: string, maxMemoryMb: number) =>
  Effect.gen(function*() {
    const fail = (detail: string, cause?: unknown) => providerError(backend, "load the WASI toolset", "Unavailable", detail, cause)
    const toolsetDir = findToolsetDir()
    if (toolsetDir === undefined) {
      return yield* fail("the WASI toolset is not built: run 'bash wasm/build.sh' (Debian bookworm; it installs clang-14 and wasi-libc as root)")
    }
    const text = yield* Effect.tryPromise({
      try: () => readFile(join(toolsetDir, "toolset.json"), "utf8"),
      catch: (error) => fail(`cannot read ${toolsetDir}/toolset.json: ${String(error)}`, error)
    })
    const manifest = yield* Schema.decodeUnknown(Schema.parseJson(Manifest))(text).pipe(
      Effect.mapError(() => fail(`${toolsetDir}/toolset.json is not a toolset manifest; rebuild with 'bash wasm/build.sh'`))
    )
    const commands = new Map<string, WebAssembly.Module>()
    for (const [file, names] of Object.entries(manifest.modules)) {
      const module = yield* loadModule(backend, join(toolsetDir, file), maxMemoryMb)
      for (const command of names) commands.set(command, module)
    }
    return commands as ReadonlyMap<string, WebAssembly.Module>
  })
