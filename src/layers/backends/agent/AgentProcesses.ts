/**
 * Processes of a computer started through its kt-agent (AgentClient), as BackendProcesses: shared
 * by the backends that run an agent inside their computers (host sandbox, Docker containers). Pipes
 * and terminals alike: the agent owns the pseudo-terminal inside the computer and its output comes
 * over the same channel, in order, with Exit after the last byte the process wrote. Output reaches
 * the runtime through ProcessEvents, whose back-pressure pauses the agent's channel.
 */
import * as Effect from "effect/Effect"
import { type ProviderError, providerError, Unsupported } from "../../../domain/Errors.js"
import { type BackendProcess, checkSpec, type ExitInfo, type SpawnSpec } from "../../../services/Backend.js"
import { ProcessEvents } from "../ProcessEvents.js"
import type { AgentClient } from "./AgentClient.js"
import { directArgv } from "../../../domain/SimpleCommand.js"
import { validSize } from "./AgentProtocol.js"

/** Fails while the computer's agent is gone (the computer was lost or closed). */
const agentAlive = (backend: string, client: AgentClient, operation: string): Effect.Effect<void, ProviderError> =>
  Effect.suspend(() => {
    const failure = client.failure
    return failure === undefined ? Effect.void : Effect.fail(providerError(backend, operation, "Unavailable", failure))
  })

const DEFAULT_TERM = "xterm-256color"

const invalidSize = (backend: string, operation: string, cols: number, rows: number) =>
  providerError(backend, operation, "Invalid", `invalid terminal size ${cols}x${rows}`)

/**
 * How a process ended, as the agent reports it: `ended` counts the processes of its tree that a
 * teardown ended with it (a kill, or the signal it died of), which ps shows as descendantsKilled.
 */
const exitWithTeardown = (exit: ExitInfo, ended: number): ExitInfo => ended > 0 ? { ...exit, descendantsKilled: ended } : exit

/**
 * Starts a process through the agent, with pipes or (spec.tty) on a terminal inside the computer.
 * Closing the Scope while it is still open tears its whole tree down.
 */
export const spawn = (backend: string, client: AgentClient, spec: SpawnSpec) =>
  Effect.gen(function*() {
    yield* checkSpec(spec)
    const tty = spec.tty
    if (tty !== undefined && !validSize(tty.cols, tty.rows)) return yield* invalidSize(backend, "start a process", tty.cols, tty.rows)
    const events = new ProcessEvents()
    // Output may arrive before the spawn effect resumes with the process's id.
    const held: { id: number | undefined; early: boolean } = { id: undefined, early: false }
    events.hold = (hold) => (held.id === undefined ? (held.early = hold) : client.holdOutput(held.id, hold))
    const env = tty !== undefined && spec.env["TERM"] === undefined ? { ...spec.env, TERM: DEFAULT_TERM } : spec.env
    const { id, pid } = yield* Effect.acquireRelease(
      client.spawn({ argv: spec.argv, cwd: spec.cwd, env, direct: tty === undefined ? directArgv(spec.argv, env) : undefined }, {
        onStdout: events.data,
        onStderr: events.stderr,
        onExit: (exit, ended) => events.exit(exitWithTeardown(exit, ended)),
        // Processes a teardown ends after the exit (a released process's leftovers) are not counted.
        onClosed: () => events.end()
      }, tty),
      ({ id }) =>
        Effect.sync(() => {
          client.release(id)
          events.end()
        })
    )
    held.id = id
    if (held.early) client.holdOutput(id, true)
    const alive = (operation: string) => agentAlive(backend, client, operation)
    const write = (data: Uint8Array) => alive("write to a process").pipe(Effect.andThen(() => client.write(id, data)))
    const process: BackendProcess = {
      pid,
      pull: events.pull,
      write,
      // On a terminal, EOF is what Ctrl-D types.
      closeStdin: tty !== undefined
        ? write(new Uint8Array([4]))
        : alive("close a process's stdin").pipe(Effect.andThen(() => client.closeStdin(id))),
      signal: (signal) =>
        Effect.gen(function*() {
          yield* alive("signal a process")
          if (!client.signal(id, signal)) {
            return yield* providerError(backend, "signal a process", "Invalid", `unknown signal '${signal}'`)
          }
        }),
      resize: (cols, rows) =>
        tty === undefined
          ? Effect.fail(new Unsupported({ backend, feature: "resize of a process without a TTY" }))
          : !validSize(cols, rows)
          ? Effect.fail(invalidSize(backend, "resize a terminal", cols, rows))
          : alive("resize a terminal").pipe(Effect.andThen(() => client.resize(id, cols, rows)))
    }
    return process
  })
