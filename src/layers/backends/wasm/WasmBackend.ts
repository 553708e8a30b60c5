/**
 * The WASM backends: computers that need no container engine and no network.
 *
 * - `toolset` (`--backend toolset`, alias `go_busybox`): our shell (Shell.ts) running the bundled
 *   WASI toolset (Toolset.ts: toybox and original-awk compiled to wasm32-wasi): ls, cat, grep,
 *   sed, awk, sort, uniq, wc, head, tail, cut, tr, find, … with pipelines, redirections,
 *   `&&`/`||`/`;`, quoting, `$VAR` and globbing.
 * - `module` (`--backend wasm --wasm-path m.wasm`): every spawn runs that WASI module with the
 *   argv as its arguments (argv[0] as the program name), the env, stdin, and the computer's
 *   filesystem preopened at `/` (its working directory is `/` unless it reads `PWD`).
 *
 * Threads: the server's thread runs no guest work. A toolset process is a shell worker
 * (ShellProcess.ts, ShellWorker.ts) whose tools are tool workers of its own (Runner.ts); a module
 * process is a tool worker (Launcher.ts). Killing a process or running past `timeoutMs`
 * terminates its threads (WasmProcess.ts), which stops even a tight loop.
 *
 * A computer is a filesystem in memory (WasmComputer.ts, ComputerFs.ts, Vfs.ts): nothing of the
 * host is reachable, `..` stops at `/`; its size is bounded by `maxDiskBytes` (Quota.ts: ENOSPC
 * past it). Memory: each module's declared maximum is lowered to `maxMemoryMb` (WasmModule.ts).
 * There is no instruction metering (fuel) in Node.
 *
 * As a provider: the computers it holds in memory are `running`; permanent ones are also saved to
 * `<stateDir>/wasm-computers/<id>.json` (SnapshotStore.ts) and, once the kernel lets go of them
 * (`suspend`), live there alone, `stopped` until `start` reads them back. Restart keeps the
 * filesystem; the kernel's factory reset removes the computer and creates it again from the base
 * image (an empty /home/agent, /tmp, /etc/hostname). No `adopt`: a WASM computer costs nothing to
 * make, so a warm pool would gain nothing (the kernel refuses `--warm-pool`). Checkpoints
 * (WasmCheckpoints.ts) are clones of a computer's tree, held in memory.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import type { ComputerMetadata } from "../../../domain/ComputerMetadata.js"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import { Backend, type Capabilities, type Instance, type Query, capabilitiesWithout } from "../../../services/Backend.js"
import * as Launcher from "./Launcher.js"
import { formatSize } from "../../../domain/Size.js"
import { DEFAULT_MAX_DISK_BYTES } from "./Quota.js"
import { baseImage } from "./Snapshot.js"
import type { VDir } from "./Vfs.js"
import * as WasmCheckpoints from "./WasmCheckpoints.js"
import * as SnapshotStore from "./SnapshotStore.js"
import * as WasmComputer from "./WasmComputer.js"
import { connect } from "./WasmConnection.js"

export { findToolsetDir } from "./Toolset.js"

export interface WasmBackendOptions {
  readonly mode: "toolset" | "module"
  /** --wasm-path (mode module). */
  readonly modulePath: string | undefined
  /** --wasm-max-memory, default 256. */
  readonly maxMemoryMb: number
  /** Wall clock per process (the runtime's timeouts also apply); 0 = none. */
  readonly timeoutMs: number
  /** Permanent computers' snapshots live in `<stateDir>/wasm-computers`. */
  readonly stateDir: string
  /** --wasm-max-disk: bytes of one computer's filesystem (default 256 MiB). */
  readonly maxDiskBytes?: number | undefined
}

/** The capabilities of the toolset backend. */
export const toolsetCapabilities: Capabilities = capabilitiesWithout({ pty: false, signals: false, networkControl: false, previews: false })

/** The capabilities of a user module: no shell, so the runtime cannot move files with `sh -c`. */
export const moduleCapabilities: Capabilities = { ...toolsetCapabilities, files: false }

const matches = (query: Query) => (metadata: ComputerMetadata) =>
  (query.id === undefined || metadata.id === query.id) &&
  (query.temporary === undefined || metadata.temporary === query.temporary)

/** The backend itself (a Layer below); fails when the options are wrong or the modules cannot be loaded. */
export const make = (options: WasmBackendOptions) =>
  Effect.gen(function*() {
    const name = options.mode === "toolset" ? "toolset" : "wasm"
    const invalid = (detail: string) => providerError(name, "start", "Invalid", detail)
    if (!(options.maxMemoryMb > 0)) return yield* invalid(`--wasm-max-memory must be a positive number of MiB (got ${options.maxMemoryMb})`)
    const maxDisk = options.maxDiskBytes ?? DEFAULT_MAX_DISK_BYTES
    if (!(maxDisk > 0)) return yield* invalid(`--wasm-max-disk must be a positive size (got ${maxDisk})`)
    if (options.mode === "module" && options.modulePath === undefined) return yield* invalid("--wasm-path is required with --backend wasm")
    const launcher = options.mode === "module"
      ? yield* Launcher.module(name, options.modulePath!, options.maxMemoryMb)
      : yield* Launcher.toolset(name, options.maxMemoryMb)
    const store = SnapshotStore.make(name, options.stateDir)
    /** The computers in memory (running); permanent ones not here are only on disk (stopped). */
    const computers = new Map<string, WasmComputer.WasmComputer>()

    const instance = (metadata: ComputerMetadata, state: Instance["state"]): Instance => ({ providerId: `wasm:${metadata.id}`, metadata, state })
    const running = (computer: WasmComputer.WasmComputer) => instance(computer.metadata, "running")

    const find = (query: Query) =>
      Effect.gen(function*() {
        const held = [...computers.values()].map((computer) => computer.metadata).filter(matches(query))
        // Temporary computers are never saved: they are all in memory.
        if (query.temporary === true) return held.map((metadata) => instance(metadata, "running"))
        const ids = query.id === undefined ? yield* store.ids : [query.id]
        const saved: Array<Instance> = []
        for (const id of ids) {
          if (computers.has(id)) continue
          const metadata = Option.flatMap(yield* store.header(id), (header) => WasmComputer.metadataOf(header, name))
          if (Option.isSome(metadata) && matches(query)(metadata.value)) saved.push(instance(metadata.value, "stopped"))
        }
        return [...held.map((metadata) => instance(metadata, "running")), ...saved] as ReadonlyArray<Instance>
      })

    /** A new computer with the filesystem `root` (the base image, or a checkpoint's clone). */
    const create = (metadata: ComputerMetadata, root: VDir = baseImage(metadata.id)) =>
      Effect.gen(function*() {
        const id = metadata.id
        if (computers.has(id) || (yield* store.exists(id))) {
          return yield* providerError(name, `create computer ${id}`, "Conflict", "a computer of this id exists")
        }
        const computer = WasmComputer.make(metadata, root, maxDisk)
        computers.set(id, computer)
        // A permanent computer is on disk from the start: a server that dies keeps it.
        yield* WasmComputer.save(store, computer, true).pipe(
          Effect.tapError(() => Effect.sync(() => void computers.delete(id)))
        )
        return running(computer)
      })

    /** The computer in memory, read back from its snapshot when it is only on disk. */
    const held = (target: Instance) =>
      Effect.gen(function*() {
        const id = target.metadata.id
        const inMemory = computers.get(id)
        if (inMemory !== undefined) return inMemory
        if (target.metadata.temporary) return yield* providerError(name, `open computer ${id}`, "NotFound", "it is gone")
        const { header, root } = yield* store.load(id)
        const already = computers.get(id)
        if (already !== undefined) return already
        const metadata = Option.getOrElse(WasmComputer.metadataOf(header, name), () => target.metadata)
        const computer = WasmComputer.make(metadata, root, maxDisk)
        computer.savedGeneration = computer.fs.generation
        if (computer.fs.usage > maxDisk) {
          yield* Effect.logWarning(
            `${name} backend: computer '${id}' uses ${formatSize(computer.fs.usage)}, over --wasm-max-disk ${formatSize(maxDisk)}: writes fail until files are removed`
          )
        }
        computers.set(id, computer)
        return computer
      })

    const remove = (target: Instance) =>
      Effect.gen(function*() {
        const id = target.metadata.id
        const computer = computers.get(id)
        if (computer !== undefined) {
          computer.removed = true
          computers.delete(id)
          for (const attached of [...computer.attached]) attached.lose("the computer was removed")
        }
        if (!target.metadata.temporary) yield* store.remove(id)
      })

    /** A permanent computer no one holds leaves memory; its snapshot is up to date first. */
    const suspend = (target: Instance) =>
      Effect.gen(function*() {
        const computer = computers.get(target.metadata.id)
        if (computer === undefined || computer.metadata.temporary || computer.attached.size > 0) return
        yield* WasmComputer.save(store, computer)
        if (computer.attached.size === 0 && computers.get(target.metadata.id) === computer) computers.delete(target.metadata.id)
      })

    return Backend.of({
      name,
      capabilities: options.mode === "toolset" ? toolsetCapabilities : moduleCapabilities,
      labelStyle: "dashed",
      image: name,
      find,
      create: (metadata) => create(metadata),
      start: (target) => Effect.map(held(target), running),
      connect: (target) =>
        Effect.flatMap(held(target), (computer) => connect(computer, { backend: name, launcher, store, timeoutMs: options.timeoutMs })),
      // The kernel has ended the processes and closed the connection, which saved the filesystem.
      restart: (target) => Effect.map(held(target), running),
      remove,
      suspend,
      checkpoints: WasmCheckpoints.make({
        backend: name,
        treeOf: (target) => Effect.map(held(target), (computer) => computer.fs.vfs.root),
        create
      })
    })
  })

/** The WASM backend (toolset or user module) as a Layer; fails when its options or modules are wrong. */
export const layer = (options: WasmBackendOptions): Layer.Layer<Backend, ProviderError> => Layer.scoped(Backend, make(options))
