/**
 * The WASM provider driven directly, as the kernel would: a backend, a computer created with
 * metadata, and a connection to it whose processes the test runs. For tests of what a provider
 * call does (processes, limits, snapshots); lifecycles are tested through the kernel.
 */
import { Effect, Stream } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { ComputerMetadata } from "../../src/domain/ComputerMetadata.js"
import * as WasmBackend from "../../src/layers/backends/wasm/WasmBackend.js"
import { type Backend, type BackendProcess, type Connection, type ExitInfo, type SpawnSpec, ownedEvents } from "../../src/services/Backend.js"

let counter = 0

/** A fresh computer id. */
export const computerId = (prefix = "w") => `${prefix}${process.pid}-${++counter}`

/** Metadata as the kernel writes it. */
export const metadata = (id: string = computerId(), temporary = true): ComputerMetadata => ({
  id,
  temporary,
  image: "toolset",
  created: "2026-01-01T00:00:00.000Z",
  instance: "wasm-test"
})

/** This test file's state directory (remove it in an afterAll). */
export const stateDir = mkdtempSync(join(tmpdir(), "kt-wasm-test-"))

export const options = (extra: Partial<WasmBackend.WasmBackendOptions> = {}): WasmBackend.WasmBackendOptions => ({
  mode: "toolset",
  modulePath: undefined,
  maxMemoryMb: 256,
  timeoutMs: 0,
  stateDir,
  ...extra
})

/** Creates a computer on a backend and connects to it (both live in the caller's Scope). */
export const connectNew = (backend: Backend["Type"], id: string = computerId(), temporary = true) =>
  Effect.flatMap(backend.create(metadata(id, temporary)), backend.connect)

/** A new backend with one new computer, connected. */
export const connection = (extra: Partial<WasmBackend.WasmBackendOptions> = {}, id: string = computerId(), temporary = true) =>
  Effect.flatMap(WasmBackend.make(options(extra)), (backend) => connectNew(backend, id, temporary))

export interface Outcome {
  readonly stdout: string
  readonly stderr: string
  readonly exit: ExitInfo | undefined
}

/** Everything a process says, until its events end. */
export const collect = (process: BackendProcess) =>
  Stream.runFold(ownedEvents(process), { stdout: "", stderr: "", exit: undefined } as Outcome, (acc, event) => {
    switch (event._tag) {
      case "Stdout":
        return { ...acc, stdout: acc.stdout + Buffer.from(event.data).toString("utf8") }
      case "Stderr":
        return { ...acc, stderr: acc.stderr + Buffer.from(event.data).toString("utf8") }
      case "Exit":
        return { ...acc, exit: event.exit }
    }
  })

const ENV = { PATH: "/usr/bin:/bin", HOME: "/home/agent", LANG: "C.UTF-8" }

export const spec = (argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}): SpawnSpec => ({
  argv,
  cwd: "/home/agent",
  env: ENV,
  ...extra
})

/** Runs a script with `sh -c`, stdin given and closed, to its end. */
export const sh = (connection: Connection, script: string, stdin?: string, extra: Partial<SpawnSpec> = {}) =>
  Effect.scoped(Effect.gen(function*() {
    const process = yield* connection.spawn(spec(["/bin/sh", "-c", script], extra))
    if (stdin !== undefined) yield* process.write(new TextEncoder().encode(stdin))
    yield* process.closeStdin
    return yield* collect(process)
  }))
