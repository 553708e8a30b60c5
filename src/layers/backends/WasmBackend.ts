/**
 * The WASM backends: computers that need no container engine and no network.
 *
 * - `toolset` (`--backend toolset`, alias `go_busybox`): a small shell (wasm/Shell.ts) running
 *   the bundled WASI toolset built by `wasm/build.sh` (toybox and original-awk compiled to
 *   wasm32-wasi): ls, cat, grep, sed, awk, sort, uniq, wc, head, tail, cut, tr, find, … with
 *   pipelines, redirections, `&&`/`||`/`;`, quoting, `$VAR` and globbing.
 * - `module` (`--backend wasm --wasm-path m.wasm`): every spawn runs that WASI module with the
 *   argv as its arguments (argv[0] as the program name), the env, stdin, and the computer's
 *   filesystem preopened at `/` (its working directory is `/` unless it reads `PWD`).
 *
 * A computer is a virtual filesystem in memory (wasm/Vfs.ts): nothing of the host is reachable,
 * `..` stops at `/`. Every process (every pipeline stage) is a module instance in a worker thread
 * (wasm/Runner.ts); killing it or running past `timeoutMs` terminates the worker. Memory: each
 * module's declared maximum is lowered to `maxMemoryMb` when over it or missing; a module that
 * needs more than that at start is refused (wasm/WasmModule.ts). There is no instruction
 * metering (fuel) in Node.
 *
 * Lifecycle: restart keeps the filesystem, factory reset returns it to the base image (an empty
 * /home/agent, /tmp, /etc/hostname). Permanent computers are saved to
 * `<stateDir>/wasm-computers/<id>.json` after every process and when released, and re-opened from
 * there by a later server; temporary ones live in memory only.
 */
import { Deferred, Effect, Exit, Layer, Mailbox, Option, Schema } from "effect"
import { existsSync } from "node:fs"
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { BackendError, SpawnFailed, Unsupported } from "../../domain/Errors.js"
import type {
  BackendComputer,
  BackendProcess,
  Capabilities,
  ComputerSpec,
  ExitInfo,
  ProcessEvent,
  ProviderComputer,
  SpawnSpec
} from "../../services/Backend.js"
import { Backend } from "../../services/Backend.js"
import { Feed, WorkerPool } from "./wasm/Runner.js"
import { Cancelled, Control, Shell } from "./wasm/Shell.js"
import { dir, resolvePath, Vfs, deserialize, serialize, type VDir } from "./wasm/Vfs.js"
import { capMemory } from "./wasm/WasmModule.js"

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
}

const HOME = "/home/agent"
const COMPUTER_ID = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/
/** Signals that end a process (by terminating its workers); no other signal exists in WASI. */
const TERMINATING = new Set(["SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"])

/** What `--wasm-fuel` gets: Node has no instruction metering. */
export const fuelUnsupported =
  "--wasm-fuel is not supported: Node.js has no WebAssembly instruction metering; use --wasm-timeout-ms (wall clock) instead"

/** The capabilities of the toolset backend. */
export const toolsetCapabilities: Capabilities = {
  pty: false,
  stdin: true,
  signals: false,
  restart: true,
  factoryReset: true,
  persistence: true,
  files: true,
  networkControl: false
}

/** The capabilities of a user module: no shell, so the runtime cannot move files with `sh -c`. */
export const moduleCapabilities: Capabilities = { ...toolsetCapabilities, files: false }

const nameOf = (options: WasmBackendOptions) => (options.mode === "toolset" ? "toolset" : "wasm")

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

const Snapshot = Schema.Struct({
  id: Schema.String,
  createdAt: Schema.String,
  fs: Schema.Unknown
})
const decodeSnapshot = Schema.decodeUnknownOption(Schema.parseJson(Snapshot))

const baseImage = (id: string): VDir => {
  const root = dir()
  const make = (path: string) => {
    let node = root
    for (const part of path.split("/").filter(Boolean)) {
      let next = node.entries.get(part)
      if (next === undefined) {
        next = dir()
        node.entries.set(part, next)
      }
      node = next as VDir
    }
    return node
  }
  make(HOME)
  make("/tmp")
  make("/bin")
  make("/etc").entries.set("hostname", { kind: "file", data: new TextEncoder().encode(`${id}\n`) })
  return root
}

interface Computer {
  readonly id: string
  readonly temporary: boolean
  readonly createdAt: string
  readonly vfs: Vfs
  readonly controls: Set<Control>
  destroyed: boolean
}

/** The backend itself (a Layer below). */
export const make = (options: WasmBackendOptions) =>
  Effect.gen(function*() {
    const name = nameOf(options)
    const fail = (reason: string) => new BackendError({ backend: name, reason })
    if (!(options.maxMemoryMb > 0)) return yield* fail(`--wasm-max-memory must be a positive number of MiB (got ${options.maxMemoryMb})`)
    const maxBytes = Math.floor(options.maxMemoryMb * 1024 * 1024)

    const load = (path: string) =>
      Effect.gen(function*() {
        const bytes = yield* Effect.tryPromise({
          try: () => readFile(path),
          catch: (error) => fail(`cannot read the WebAssembly module ${path}: ${String(error)}`)
        })
        const capped = capMemory(new Uint8Array(bytes), maxBytes)
        if (capped._tag === "Refused") return yield* fail(`${path}: ${capped.reason}`)
        if (capped.capped) {
          yield* Effect.logInfo(
            `${name} backend: ${path} declares ${capped.declared.maximumPages === undefined ? "no maximum memory" : `a maximum of ${(capped.declared.maximumPages * 64) / 1024} MiB`}; capped at ${options.maxMemoryMb} MiB (--wasm-max-memory)`
          )
        }
        return yield* Effect.tryPromise({
          try: () => WebAssembly.compile(Uint8Array.from(capped.bytes)),
          catch: (error) => fail(`${path} is not a valid WebAssembly module: ${String(error)}`)
        })
      })

    const commands = new Map<string, WebAssembly.Module>()
    let userModule: WebAssembly.Module | undefined
    if (options.mode === "module") {
      if (options.modulePath === undefined) return yield* fail("--wasm-path is required with --backend wasm")
      userModule = yield* load(resolve(options.modulePath))
    } else {
      const toolsetDir = findToolsetDir()
      if (toolsetDir === undefined) {
        return yield* fail("the WASI toolset is not built: run 'bash wasm/build.sh' (Debian bookworm; it installs clang-14 and wasi-libc as root)")
      }
      const text = yield* Effect.tryPromise({
        try: () => readFile(join(toolsetDir, "toolset.json"), "utf8"),
        catch: (error) => fail(`cannot read ${toolsetDir}/toolset.json: ${String(error)}`)
      })
      const manifest = yield* Schema.decodeUnknown(Schema.parseJson(Manifest))(text).pipe(
        Effect.mapError(() => fail(`${toolsetDir}/toolset.json is not a toolset manifest; rebuild with 'bash wasm/build.sh'`))
      )
      for (const [file, names] of Object.entries(manifest.modules)) {
        const module = yield* load(join(toolsetDir, file))
        for (const command of names) commands.set(command, module)
      }
    }

    const pool = yield* Effect.acquireRelease(Effect.sync(() => new WorkerPool(2)), (pool) => Effect.sync(() => pool.close()))
    const snapshotsDir = resolve(options.stateDir, "wasm-computers")
    const snapshotPath = (id: string) => join(snapshotsDir, `${id}.json`)
    const open = new Map<string, Computer>()

    const readSnapshot = (id: string) =>
      Effect.promise(() => readFile(snapshotPath(id), "utf8").catch(() => undefined)).pipe(
        Effect.map((text) => (text === undefined ? Option.none() : decodeSnapshot(text)))
      )

    // Saves are chained so a later one never lands before an earlier one.
    let saving: Promise<void> = Promise.resolve()
    const save = (computer: Computer) => {
      if (computer.temporary || computer.destroyed) return Promise.resolve()
      const text = JSON.stringify({ id: computer.id, createdAt: computer.createdAt, fs: serialize(computer.vfs.root) })
      saving = saving.then(async () => {
        if (computer.destroyed) return
        await mkdir(snapshotsDir, { recursive: true })
        const tmp = `${snapshotPath(computer.id)}.${process.pid}.tmp`
        await writeFile(tmp, text)
        await rename(tmp, snapshotPath(computer.id))
      }).catch(() => undefined)
      return saving
    }
    const saveNow = (computer: Computer) =>
      Effect.tryPromise({ try: () => save(computer), catch: (error) => fail(`cannot save computer '${computer.id}': ${String(error)}`) })

    const list = Effect.gen(function*() {
      const found: Array<ProviderComputer> = []
      for (const computer of open.values()) {
        found.push({ id: computer.id, temporary: computer.temporary, providerId: `wasm:${computer.id}`, image: name, createdAt: computer.createdAt, state: "running" })
      }
      const files = yield* Effect.promise(() => readdir(snapshotsDir).catch(() => [] as Array<string>))
      for (const file of files) {
        const id = file.replace(/\.json$/, "")
        if (!file.endsWith(".json") || !COMPUTER_ID.test(id) || open.has(id)) continue
        const snapshot = yield* readSnapshot(id)
        if (Option.isNone(snapshot)) continue
        found.push({ id, temporary: false, providerId: `wasm:${id}`, image: name, createdAt: snapshot.value.createdAt, state: "stopped" })
      }
      return found as ReadonlyArray<ProviderComputer>
    })

    const spawnIn = (computer: Computer, spec: SpawnSpec) =>
      Effect.gen(function*() {
        const command = spec.argv.join(" ")
        if (computer.destroyed) return yield* fail(`computer '${computer.id}' was destroyed`)
        if (spec.tty !== undefined) {
          return yield* new SpawnFailed({ command, reason: `the ${name} backend has no terminals (WASI has no TTY); run without tty` })
        }
        if (spec.argv.length === 0) return yield* new SpawnFailed({ command, reason: "empty argv" })
        const cwd = "/" + resolvePath("/", spec.cwd).join("/")
        if (!computer.vfs.isDir("/", cwd)) {
          return yield* new SpawnFailed({ command, reason: `no such directory in the computer: ${cwd}` })
        }
        const events = yield* Mailbox.make<ProcessEvent>()
        const stdin = new Feed()
        const control = new Control()
        computer.controls.add(control)
        let killedBy: string | undefined
        let timedOut = false
        const out = (data: Uint8Array) => void events.unsafeOffer({ _tag: "Stdout", data })
        const err = (data: Uint8Array) => void events.unsafeOffer({ _tag: "Stderr", data })
        const env = { ...spec.env, PWD: cwd }

        const running: Promise<number> = userModule !== undefined
          ? (async () => {
            const run = pool.run({
              module: userModule,
              args: spec.argv,
              env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
              tree: computer.vfs.view(),
              stdin,
              onStdout: out,
              onStderr: err,
              onChanges: (changes) => computer.vfs.apply(changes)
            })
            control.runs.add(run)
            if (control.cancelled) run.terminate()
            const outcome = await run.done
            if (control.cancelled) throw new Cancelled()
            if (outcome.trap !== undefined) err(new TextEncoder().encode(`[kilntainers: WebAssembly trap: ${outcome.trap}]\n`))
            return outcome.code
          })()
          : new Shell({ vfs: computer.vfs, hostname: computer.id, commands, pool }, control).runArgv(spec.argv, env, cwd, { stdin, stdout: out, stderr: err })

        const timer = options.timeoutMs > 0
          ? setTimeout(() => {
            timedOut = true
            err(new TextEncoder().encode(`[kilntainers: wall-clock limit of ${options.timeoutMs} ms reached; process terminated]\n`))
            control.cancel()
          }, options.timeoutMs)
          : undefined
        const finish = (exit: ExitInfo) => {
          if (timer !== undefined) clearTimeout(timer)
          computer.controls.delete(control)
          stdin.end()
          void events.unsafeOffer({ _tag: "Exit", exit })
          void events.unsafeDone(Exit.void)
          void save(computer)
        }
        running.then(
          (code) => finish(control.cancelled ? { exitCode: null, signal: killedBy ?? "SIGKILL" } : { exitCode: code & 255, signal: null }),
          (error: unknown) => {
            if (error instanceof Cancelled || control.cancelled) return finish({ exitCode: null, signal: timedOut ? "SIGKILL" : killedBy ?? "SIGKILL" })
            err(new TextEncoder().encode(`[kilntainers: ${error instanceof Error ? error.message : String(error)}]\n`))
            finish({ exitCode: 1, signal: null })
          }
        )
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            control.cancel()
            stdin.end()
          })
        )
        const process: BackendProcess = {
          pid: null,
          events: Mailbox.toStream(events),
          write: (data) => Effect.sync(() => stdin.push(data.slice())),
          closeStdin: Effect.sync(() => stdin.end()),
          signal: (signal) =>
            TERMINATING.has(signal)
              ? Effect.sync(() => {
                killedBy ??= signal
                control.cancel()
              })
              : Effect.fail(new Unsupported({ backend: name, feature: `the signal ${signal} (WASI has no signals; SIGTERM/SIGKILL/SIGINT/SIGHUP terminate)` })),
          resize: () => Effect.fail(new Unsupported({ backend: name, feature: "terminals (resize)" }))
        }
        return process
      })

    const openComputer = (spec: ComputerSpec) =>
      Effect.gen(function*() {
        if (!COMPUTER_ID.test(spec.id)) return yield* fail(`invalid computer id '${spec.id}'`)
        if (open.has(spec.id)) return yield* fail(`computer '${spec.id}' is already open`)
        const snapshot = yield* readSnapshot(spec.id)
        if (Option.isSome(snapshot) && spec.temporary) {
          return yield* fail(`computer '${spec.id}' exists and is permanent; open it with temporary: false, or use another id`)
        }
        let root: VDir
        try {
          root = Option.isSome(snapshot) ? (deserialize(snapshot.value.fs) as VDir) : baseImage(spec.id)
        } catch {
          return yield* fail(`the snapshot of computer '${spec.id}' (${snapshotPath(spec.id)}) is damaged`)
        }
        const computer: Computer = {
          id: spec.id,
          temporary: spec.temporary,
          createdAt: Option.isSome(snapshot) ? snapshot.value.createdAt : new Date().toISOString(),
          vfs: new Vfs(root),
          controls: new Set(),
          destroyed: false
        }
        yield* Effect.acquireRelease(
          Effect.sync(() => open.set(spec.id, computer)),
          () =>
            Effect.gen(function*() {
              for (const control of computer.controls) control.cancel()
              yield* saveNow(computer).pipe(Effect.ignore)
              open.delete(spec.id)
            })
        )
        if (!spec.temporary) yield* saveNow(computer)
        const endAll = Effect.sync(() => {
          for (const control of computer.controls) control.cancel()
          computer.controls.clear()
        })
        const lifecycle = yield* Effect.makeSemaphore(1)
        const usable = Effect.suspend(() => (computer.destroyed ? fail(`computer '${spec.id}' was destroyed`) : Effect.void))
        const lost = yield* Deferred.make<string>()
        const backendComputer: BackendComputer = {
          providerId: `wasm:${spec.id}`,
          home: HOME,
          image: name,
          spawn: (processSpec) => spawnIn(computer, processSpec),
          restart: lifecycle.withPermits(1)(usable.pipe(Effect.zipRight(endAll), Effect.zipRight(saveNow(computer)))),
          factoryReset: lifecycle.withPermits(1)(Effect.gen(function*() {
            yield* usable
            yield* endAll
            computer.vfs.root = baseImage(spec.id)
            yield* saveNow(computer)
          })),
          destroy: lifecycle.withPermits(1)(Effect.gen(function*() {
            if (computer.destroyed) return
            yield* endAll
            computer.destroyed = true
            yield* Effect.tryPromise({
              try: () => saving.then(() => rm(snapshotPath(spec.id), { force: true })),
              catch: (error) => fail(`cannot remove ${snapshotPath(spec.id)}: ${String(error)}`)
            })
          })),
          lost: Deferred.await(lost)
        }
        return backendComputer
      }).pipe(Effect.withSpan("WasmBackend.open"))

    return Backend.of({
      name,
      capabilities: options.mode === "toolset" ? toolsetCapabilities : moduleCapabilities,
      open: openComputer,
      list
    })
  })

/** The WASM backend (toolset or user module) as a Layer; fails when the modules cannot be loaded. */
export const layer = (options: WasmBackendOptions): Layer.Layer<Backend, BackendError> => Layer.scoped(Backend, make(options))
