/**
 * One process of a WASM computer as the runtime sees it (a `BackendProcess`), whatever runs it: a
 * shell worker (ShellProcess.ts) or a tool worker with the user's module (Launcher.ts).
 *
 * Output arrives as messages from the process's threads and goes into the process's
 * `ProcessEvents`, the one bounded buffer every backend uses. Each message carries the credit of
 * its writer's output window (Feed.ts): settled at once while the runtime keeps up, held while
 * the buffer is full and settled when the runtime has caught up — so a writer waits for a slow
 * reader, end to end. A kill (a terminating signal, the wall-clock limit, the scope closing)
 * terminates every thread of the process; `Exit` follows once they have stopped.
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import { Unsupported } from "../../../domain/Errors.js"
import type { BackendProcess, ExitInfo } from "../../../services/Backend.js"
import { ProcessEvents } from "../ProcessEvents.js"
import { type Credit, Feed, settle, type Sink } from "./Feed.js"

/** Signals that end a process (by terminating its threads); no other signal exists in WASI. */
const TERMINATING = new Set(["SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"])

const encoder = new TextEncoder()

export interface ProcessIo {
  /** The process's stdin, written by the runtime. */
  readonly stdin: Feed
  readonly stdout: Sink
  readonly stderr: Sink
}

/** What runs a process: how it ended by itself, and how to end it now (resolves once all its threads stopped). */
export interface Launched {
  readonly done: Promise<{ readonly code: number; readonly message?: string | undefined }>
  readonly stop: () => Promise<void>
}

export interface ProcessOptions {
  readonly backend: string
  /** Wall clock of the process, 0 for none. */
  readonly timeoutMs: number
  /** Given the process's kill, so its connection can end it when it closes. */
  readonly track: (kill: (signal: string) => void) => void
  /** Runs once the process has ended and its threads stopped. */
  readonly onEnd: () => void
}

export const makeProcess = (options: ProcessOptions, launch: (io: ProcessIo) => Launched) =>
  Effect.gen(function*() {
    const events = new ProcessEvents()
    const exited = yield* Deferred.make<void>()
    const stdin = new Feed()
    let finished = false
    let killedBy: string | undefined

    // Credits of output that arrived while the runtime was behind: their writers' windows stay
    // closed until it catches up.
    let holding = false
    const held: Array<Credit> = []
    events.hold = (hold) => {
      holding = hold
      if (!hold) for (const credit of held.splice(0)) settle(credit)
    }
    const output = (push: (data: Uint8Array) => void): Sink => (data, credit) => {
      if (finished) return settle(credit)
      push(data)
      if (holding && credit !== undefined) held.push(credit)
      else settle(credit)
    }
    const say = (text: string) => {
      if (!finished) events.stderr(encoder.encode(text))
    }
    const launched = launch({ stdin, stdout: output(events.data), stderr: output(events.stderr) })

    const finish = (exit: ExitInfo) => {
      if (finished) return
      finished = true
      stdin.end()
      void launched.stop().catch(() => undefined).then(() => {
        events.exit(exit)
        events.end()
        Deferred.unsafeDone(exited, Exit.void)
        options.onEnd()
      })
    }
    const kill = (signal: string) => {
      if (finished) return
      killedBy ??= signal
      finish({ exitCode: null, signal: killedBy })
    }
    options.track(kill)
    launched.done.then(
      ({ code, message }) => {
        if (message !== undefined) say(`[kilntainers: ${message}]\n`)
        finish({ exitCode: code & 255, signal: null })
      },
      (error: unknown) => {
        say(`[kilntainers: ${error instanceof Error ? error.message : String(error)}]\n`)
        finish({ exitCode: 1, signal: null })
      }
    )

    if (options.timeoutMs > 0) {
      yield* Deferred.await(exited).pipe(
        Effect.timeoutOption(Duration.millis(options.timeoutMs)),
        Effect.flatMap((ended) =>
          Option.isSome(ended) ? Effect.void : Effect.sync(() => {
            say(`[kilntainers: wall-clock limit of ${options.timeoutMs} ms reached; process terminated]\n`)
            kill("SIGKILL")
          })
        ),
        Effect.forkScoped
      )
    }
    yield* Effect.addFinalizer(() => Effect.sync(() => kill("SIGKILL")))

    const process: BackendProcess = {
      pid: null,
      pull: events.pull,
      write: (data) => Effect.sync(() => stdin.push(new Uint8Array(data))),
      closeStdin: Effect.sync(() => stdin.end()),
      signal: (signal) =>
        TERMINATING.has(signal)
          ? Effect.sync(() => kill(signal))
          : Effect.fail(new Unsupported({ backend: options.backend, feature: `the signal ${signal} (WASI has no signals; SIGTERM/SIGKILL/SIGINT/SIGHUP terminate)` })),
      resize: () => Effect.fail(new Unsupported({ backend: options.backend, feature: "terminals (resize)" }))
    }
    return process
  })
