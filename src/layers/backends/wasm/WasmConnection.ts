/**
 * A connection to a WASM computer: where its processes start (in worker threads, Launcher.ts), on
 * its in-memory filesystem. It lives in the kernel's Scope for the computer's current generation:
 * closing it ends the processes started through it and saves a permanent computer's filesystem.
 * A permanent computer is also saved after every process that changed it.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberSet from "effect/FiberSet"
import { providerError, SpawnFailed } from "../../../domain/Errors.js"
import { checkSpec, type Connection, type SpawnSpec } from "../../../services/Backend.js"
import type { Launcher } from "./Launcher.js"
import { HOME } from "./Snapshot.js"
import type { SnapshotStore } from "./SnapshotStore.js"
import { resolvePath } from "./Vfs.js"
import { type Attached, save, type WasmComputer } from "./WasmComputer.js"
import { makeProcess } from "./WasmProcess.js"

export interface ConnectOptions {
  readonly backend: string
  readonly launcher: Launcher
  readonly store: SnapshotStore
  /** Wall clock of each process, 0 for none. */
  readonly timeoutMs: number
}

export const connect = (computer: WasmComputer, options: ConnectOptions) =>
  Effect.gen(function*() {
    const { backend, launcher, store } = options
    const id = computer.metadata.id
    const lost = yield* Deferred.make<string>()
    const kills = new Set<(signal: string) => void>()
    let open = true
    const endProcesses = () => {
      for (const kill of [...kills]) kill("SIGKILL")
    }
    const attached: Attached = {
      lose: (reason) => {
        endProcesses()
        Deferred.unsafeDone(lost, Exit.succeed(reason))
      }
    }
    // Saves after a process ends run in the connection's Scope; its closing saves once more.
    const background = yield* FiberSet.makeRuntime<never>()
    const saveLater = () =>
      void background(save(store, computer).pipe(
        Effect.catchAll((error) => Effect.logWarning(`${backend} backend: ${error.message}`))
      ))
    yield* Effect.acquireRelease(
      Effect.sync(() => void computer.attached.add(attached)),
      () =>
        Effect.gen(function*() {
          open = false
          computer.attached.delete(attached)
          // Killing detaches a process's threads at once: nothing it does later reaches the tree.
          endProcesses()
          yield* save(store, computer).pipe(
            Effect.catchAll((error) => Effect.logWarning(`${backend} backend: ${error.message}`))
          )
        })
    )

    const spawn = (spec: SpawnSpec) =>
      Effect.gen(function*() {
        const command = spec.argv.join(" ")
        if (computer.removed) return yield* providerError(backend, "start a process", "NotFound", `computer ${id} was removed`)
        if (!open) return yield* providerError(backend, "start a process", "Unavailable", `the connection to computer ${id} is closed`)
        // NUL cannot reach a program (C strings): refused, never truncated.
        yield* checkSpec(spec, (spec) =>
          spec.tty === undefined ? undefined : `the ${backend} backend has no terminals (WASI has no TTY); run without tty`)
        const cwd = "/" + resolvePath("/", spec.cwd).join("/")
        if (!computer.fs.vfs.isDir("/", cwd)) {
          return yield* new SpawnFailed({ command, reason: `no such directory in the computer: ${cwd}` })
        }
        let untrack = () => {}
        return yield* makeProcess({
          backend,
          timeoutMs: options.timeoutMs,
          track: (kill) => {
            kills.add(kill)
            untrack = () => kills.delete(kill)
          },
          onEnd: () => {
            untrack()
            saveLater()
          }
        }, launcher(computer.fs, { argv: spec.argv, env: { ...spec.env, PWD: cwd }, cwd, hostname: id }))
      })

    const connection: Connection = { home: HOME, spawn, lost: Deferred.await(lost) }
    return connection
  })
