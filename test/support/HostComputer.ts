/**
 * Host computers made with the provider's own calls (create, connect, remove; ProviderComputer.ts),
 * without the kernel: for tests whose point is the provider or the agent (what processes see,
 * output, signals). Tests of lifecycles go through the runtime (Runtime.layer, HostBackend.layer).
 */
import { Effect, Stream } from "effect"
import * as HostBackend from "../../src/layers/backends/host/HostBackend.js"
import { type BackendProcess, type Connection, type ExitInfo, type SpawnSpec, ownedEvents } from "../../src/services/Backend.js"
import { open } from "./ProviderComputer.js"

export { metadata, open } from "./ProviderComputer.js"

export const ENV = { PATH: "/usr/local/bin:/usr/bin:/bin", HOME: "/home/agent", LANG: "C.UTF-8" }

/** A new host backend over `stateDir` and one connected computer of it. */
export const connect = (options: {
  readonly stateDir: string
  readonly id: string
  readonly temporary?: boolean
  readonly network?: boolean
  readonly sandbox?: "bwrap" | "none"
  readonly relay?: HostBackend.HostBackendOptions["relay"]
}) =>
  Effect.gen(function*() {
    const backend = yield* HostBackend.make({
      stateDir: options.stateDir,
      network: options.network ?? false,
      sandbox: options.sandbox ?? "bwrap",
      relay: options.relay
    })
    const { instance, connection } = yield* open(backend, options.id, options.temporary ?? true)
    return { backend, instance, connection }
  })

export const spec = (argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}): SpawnSpec => ({
  argv,
  cwd: "/home/agent",
  env: ENV,
  ...extra
})

export interface Outcome {
  readonly stdout: string
  readonly stderr: string
  readonly exit: ExitInfo | undefined
  readonly exitBeforeOutputEnded: boolean
}

/** Every event of a process, as text. */
export const collect = (process: BackendProcess) =>
  Stream.runFold(ownedEvents(process), { stdout: "", stderr: "", exit: undefined, exitBeforeOutputEnded: false } as Outcome, (acc, event) => {
    switch (event._tag) {
      case "Stdout":
        return { ...acc, stdout: acc.stdout + Buffer.from(event.data).toString("utf8"), exitBeforeOutputEnded: acc.exit !== undefined }
      case "Stderr":
        return { ...acc, stderr: acc.stderr + Buffer.from(event.data).toString("utf8"), exitBeforeOutputEnded: acc.exit !== undefined }
      case "Exit":
        return { ...acc, exit: event.exit }
    }
  })

/** Runs a process to its end. */
export const run = (connection: Connection, argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}) =>
  Effect.scoped(Effect.flatMap(connection.spawn(spec(argv, extra)), collect))
