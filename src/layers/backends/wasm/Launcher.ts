/**
 * What runs a WASM computer's processes, made once per backend: for the toolset, a pool of shell
 * workers (ShellProcess.ts) with the compiled WASI tools; for a user module, a pool of tool workers
 * (Runner.ts) that each run the module once per process. The pools belong to the backend's Scope.
 */
import * as Effect from "effect/Effect"
import { resolve } from "node:path"
import type { ComputerFs } from "./ComputerFs.js"
import { WorkerPool } from "./Runner.js"
import { ShellPool, startShell } from "./ShellProcess.js"
import { loadModule, loadToolset } from "./Toolset.js"
import type { Launched, ProcessIo } from "./WasmProcess.js"
import { workerScript } from "./WorkerScript.js"

/** Longest pipeline, and most tool workers of one toolset process at once. */
export const MAX_PIPELINE = 32

/** One process to start: the runtime's argv and env (with PWD), its directory, and the computer's name. */
export interface LaunchSpec {
  readonly argv: ReadonlyArray<string>
  readonly env: Readonly<Record<string, string>>
  readonly cwd: string
  readonly hostname: string
}

/** Starts a process of a computer: given its streams, runs it in worker threads. */
export type Launcher = (fs: ComputerFs, spec: LaunchSpec) => (io: ProcessIo) => Launched

/** The toolset: our shell in a shell worker, the tools in tool workers of its own. */
export const toolset = (backend: string, maxMemoryMb: number) =>
  Effect.gen(function*() {
    const commands = yield* loadToolset(backend, maxMemoryMb)
    const shells = yield* Effect.acquireRelease(
      Effect.sync(() => new ShellPool(workerScript("ShellWorker"), { commands, toolScript: workerScript("ToolWorker"), maxPipeline: MAX_PIPELINE }, 2)),
      (pool) => Effect.sync(() => pool.close())
    )
    // Ready before the first process: a fresh server's first command does not wait for a thread to start.
    yield* Effect.promise(() => shells.warm())
    const launcher: Launcher = (fs, spec) => (io) => startShell(shells, fs, spec, io)
    return launcher
  })

/** A user's WASI module: every process runs it with the argv as its arguments, the computer's tree at `/`. */
export const module = (backend: string, modulePath: string, maxMemoryMb: number) =>
  Effect.gen(function*() {
    const compiled = yield* loadModule(backend, resolve(modulePath), maxMemoryMb)
    const pool = yield* Effect.acquireRelease(
      Effect.sync(() => new WorkerPool(workerScript("ToolWorker"), 2, 64)),
      (pool) => Effect.sync(() => pool.close())
    )
    yield* Effect.promise(() => pool.warm())
    const launcher: Launcher = (fs, spec) => (io) => {
      const reserved = fs.begin()
      const run = pool.run({
        module: compiled,
        args: spec.argv,
        env: Object.entries(spec.env).map(([name, value]) => `${name}=${value}`),
        tree: fs.vfs.view(),
        stdin: io.stdin,
        stdout: io.stdout,
        stderr: io.stderr,
        quota: fs.quota,
        reserved,
        onChanges: (changes, bytes) => fs.apply(changes, bytes, reserved)
      })
      if (run === undefined) {
        return { done: Promise.resolve({ code: 126, message: `${pool.limit} processes are running` }), stop: async () => fs.end(reserved) }
      }
      return {
        done: run.done.then((outcome) => ({ code: outcome.code, message: outcome.trap === undefined ? undefined : `WebAssembly trap: ${outcome.trap}` })),
        stop: () => run.terminate().then(() => fs.end(reserved))
      }
    }
    return launcher
  })
