import { Chunk, Deferred, Effect, Mailbox, Option, type Scope } from "effect"
import type { BackendProcess, ProcessEvent, SpawnSpec } from "../../src/services/Backend.js"

/** A process of a scripted backend, steered by the test; what the kernel asked of it is recorded. */
export interface ScriptedProcess {
  readonly spec: SpawnSpec
  readonly generation: number
  readonly signals: Array<string>
  readonly writes: Array<Uint8Array>
  readonly resizes: Array<readonly [number, number]>
  /** How many times stdin was closed. */
  readonly eofs: number
  readonly emit: (event: ProcessEvent) => Effect.Effect<void>
  /** Ends its event stream (with or without an Exit before it). */
  readonly end: Effect.Effect<void>
  readonly process: BackendProcess
}

const encoder = new TextEncoder()

/** A Mailbox of events as a process's pull: what arrived since the last pull, None once it is done. */
export const pullFrom = (mailbox: Mailbox.ReadonlyMailbox<ProcessEvent>): BackendProcess["pull"] =>
  Effect.flatMap(mailbox.takeAll, ([events, done]) => (done && Chunk.isEmpty(events) ? Effect.fail(Option.none()) : Effect.succeed(events)))

/**
 * A process steered by its command (the last argv element): `fail-fast` writes to stderr and exits
 * 1 at once; `hang-stdin` never finishes a write; `echo-stdin` writes back what it reads;
 * `ignore-term` survives SIGTERM (only the kill of its scope ends it); anything else runs until
 * signalled (then exits with that signal). Closing its Scope kills it, as every backend does.
 */
export const make = (
  spec: SpawnSpec,
  options: { readonly pid: number; readonly generation: number; readonly onSignal?: (signal: string) => void }
): Effect.Effect<ScriptedProcess, never, Scope.Scope> =>
  Effect.gen(function*() {
    const command = spec.argv[spec.argv.length - 1] ?? ""
    const mailbox = yield* Mailbox.make<ProcessEvent>()
    const never = yield* Deferred.make<void>()
    let eofs = 0
    const emit = (event: ProcessEvent) => Effect.asVoid(mailbox.offer(event))
    const end = Effect.asVoid(mailbox.end)
    const signals: Array<string> = []
    const writes: Array<Uint8Array> = []
    const resizes: Array<readonly [number, number]> = []
    const process: BackendProcess = {
      pid: options.pid,
      pull: pullFrom(mailbox),
      write: (data) =>
        command === "hang-stdin"
          ? Deferred.await(never)
          : Effect.sync(() => void writes.push(data)).pipe(
            // `echo-stdin` answers every write with it, like a terminal's echo or a REPL.
            Effect.zipRight(command === "echo-stdin" ? emit({ _tag: "Stdout", data: Uint8Array.from(data) }) : Effect.void)
          ),
      closeStdin: Effect.sync(() => {
        eofs++
      }),
      signal: (signal) =>
        Effect.gen(function*() {
          signals.push(signal)
          options.onSignal?.(signal)
          if (command === "ignore-term" && signal === "SIGTERM") return
          yield* emit({ _tag: "Exit", exit: { exitCode: null, signal } })
          yield* end
        }),
      resize: (cols, rows) => Effect.sync(() => void resizes.push([cols, rows]))
    }
    const scripted: ScriptedProcess = {
      spec,
      generation: options.generation,
      signals,
      writes,
      resizes,
      get eofs() {
        return eofs
      },
      emit,
      end,
      process
    }
    if (command === "fail-fast") {
      yield* emit({ _tag: "Stderr", data: encoder.encode("boom\n") })
      yield* emit({ _tag: "Exit", exit: { exitCode: 1, signal: null } })
      yield* end
    }
    yield* Effect.addFinalizer(() => Effect.zipRight(emit({ _tag: "Exit", exit: { exitCode: null, signal: "SIGKILL" } }), end))
    return scripted
  })

/** A spec running `sh -c <command>` in /home/agent. */
export const spec = (command: string, tty?: { readonly cols: number; readonly rows: number }): SpawnSpec => ({
  argv: ["sh", "-c", command],
  cwd: "/home/agent",
  env: {},
  ...(tty === undefined ? {} : { tty })
})
