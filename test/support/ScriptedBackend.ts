import { Deferred, Effect, Layer, Mailbox } from "effect"
import { SpawnFailed } from "../../src/domain/Errors.js"
import { Backend, type BackendProcess, type ProcessEvent, type SpawnSpec } from "../../src/services/Backend.js"

/** A process of the scripted backend, steered by the test. */
export interface ScriptedProcess {
  readonly spec: SpawnSpec
  readonly signals: Array<string>
  readonly writes: Array<Uint8Array>
  readonly emit: (event: ProcessEvent) => Effect.Effect<void>
  readonly end: Effect.Effect<void>
}

const encoder = new TextEncoder()

/**
 * A fake backend for runtime tests. The command (argv[2] of `sh -c`) picks a behaviour:
 * `fail-fast` writes to stderr and exits 1 at once; `hang-stdin` never finishes a write;
 * `missing` fails to spawn; anything else runs until signalled (then exits with that signal).
 */
export const make = Effect.gen(function*() {
  const spawned: Array<ScriptedProcess> = []
  const spawn = (spec: SpawnSpec) =>
    Effect.gen(function*() {
      const command = spec.argv[spec.argv.length - 1] ?? ""
      if (command === "missing") return yield* new SpawnFailed({ command, reason: "No such file or directory" })
      const mailbox = yield* Mailbox.make<ProcessEvent>()
      const scripted: ScriptedProcess = {
        spec,
        signals: [],
        writes: [],
        emit: (event) => Effect.asVoid(mailbox.offer(event)),
        end: Effect.asVoid(mailbox.end)
      }
      spawned.push(scripted)
      if (command === "fail-fast") {
        yield* scripted.emit({ _tag: "Stderr", data: encoder.encode("boom\n") })
        yield* scripted.emit({ _tag: "Exit", exit: { exitCode: 1, signal: null } })
        yield* scripted.end
      }
      const never = yield* Deferred.make<void>()
      const process: BackendProcess = {
        pid: spawned.length,
        events: Mailbox.toStream(mailbox),
        write: (data) =>
          command === "hang-stdin" ? Deferred.await(never) : Effect.sync(() => void scripted.writes.push(data)),
        closeStdin: Effect.void,
        signal: (signal) =>
          Effect.gen(function*() {
            scripted.signals.push(signal)
            yield* scripted.emit({ _tag: "Exit", exit: { exitCode: null, signal } })
            yield* scripted.end
          }),
        resize: () => Effect.void
      }
      return process
    })
  const layer = Layer.succeed(Backend, Backend.of({
    name: "scripted",
    capabilities: {
      pty: false,
      stdin: true,
      signals: true,
      restart: false,
      factoryReset: false,
      persistence: false,
      files: false,
      networkControl: false
    },
    open: (spec) =>
      Effect.succeed({
        providerId: `scripted-${spec.id}`,
        home: "/home/agent",
        spawn,
        restart: Effect.void,
        factoryReset: Effect.void,
        destroy: Effect.void,
        lost: Effect.never
      }),
    list: Effect.succeed([])
  }))
  return { layer, spawned } as const
})
