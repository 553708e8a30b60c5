import { Deferred, Duration, Effect, Layer, Mailbox } from "effect"
import { SpawnFailed } from "../../src/domain/Errors.js"
import { Backend, type BackendProcess, type ProcessEvent, type SpawnSpec } from "../../src/services/Backend.js"
import { pullFrom } from "./ScriptedProcess.js"

const encoder = new TextEncoder()

/**
 * A fake backend whose processes all end promptly, for tests that make thousands of calls: a
 * command (the last argv entry) says what it ran on stdout and exits 0 at once; one containing
 * `sleep` runs until signalled or for 300 ms; `missing` fails to spawn. Files are not supported.
 */
export const layer = Layer.succeed(Backend, Backend.of({
  name: "quick",
  capabilities: {
    pty: false,
    stdin: true,
    signals: true,
    restart: false,
    factoryReset: false,
    persistence: false,
    files: false,
    networkControl: false,
    checkpoints: false,
    previews: false
  },
  labelStyle: "dashed",
  image: "quick",
  find: () => Effect.succeed([]),
  create: (metadata) => Effect.succeed({ providerId: `quick-${metadata.id}`, metadata, state: "running" }),
  start: Effect.succeed,
  restart: Effect.succeed,
  remove: () => Effect.void,
  connect: () =>
    Effect.succeed({
      home: "/home/agent",
      spawn: (process: SpawnSpec) =>
        Effect.gen(function*() {
          const command = process.argv[process.argv.length - 1] ?? ""
          if (command === "missing") return yield* new SpawnFailed({ command, reason: "No such file or directory" })
          const events = yield* Mailbox.make<ProcessEvent>(64)
          const ended = yield* Deferred.make<void>()
          const exit = (exitCode: number | null, signal: string | null) =>
            Effect.whenEffect(
              Effect.zipRight(events.offer({ _tag: "Exit", exit: { exitCode, signal } }), events.end),
              Deferred.succeed(ended, undefined)
            )
          if (command.includes("sleep")) {
            yield* Effect.forkScoped(Effect.delay(exit(0, null), Duration.millis(300)))
          } else {
            yield* events.offer({ _tag: "Stdout", data: encoder.encode(`ran: ${command.slice(0, 64)}\n`) })
            yield* exit(0, null)
          }
          const running: BackendProcess = {
            pid: 1,
            pull: pullFrom(events),
            write: () => Effect.void,
            closeStdin: Effect.void,
            signal: (signal) => exit(null, signal),
            resize: () => Effect.void
          }
          return running
        }),
      lost: Effect.never
    })
}))
