/**
 * What a TTY process reads, in one order: the client's input and the terminal's answers to the
 * app's queries (cursor position `ESC[6n`, device attributes `ESC[>c`, a mode `ESC[?12$p`).
 *
 * The terminal answers a query only once it has parsed it, some milliseconds after the app wrote it
 * (@xterm/headless parses between timers; on a loaded machine, later). When answers were written
 * by a fiber of their own, they raced the client's input: keys sent right after an app's query
 * reached it before the answer, which then came in the middle of the keys (vim took
 * `ESC[?12;2$y` after an Escape as typed text: raw sequences in the file and on the screen), or
 * after the app had left raw mode (the tty echoed it: `^[[2;2R`, `^[[>0;276;0c` on the screen).
 * Here one writer holds the process's input: before the client's bytes go, the terminal parses
 * all the output that came before them and its answers are written first; answers made while no
 * input waits are written as they come. The screen (TerminalScreen) is made here, since its
 * answers are this module's.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import type { ProviderError } from "../domain/Errors.js"
import type { BackendProcess } from "../services/Backend.js"
import { TerminalScreen } from "./TerminalScreen.js"

/** Answers kept while none can be written: a flood of queries loses the newest, never grows memory. */
const MAX_PENDING_ANSWERS = 256
/**
 * How long input waits for the terminal to catch up with the output before it: parsing is fast,
 * but a process flooding the screen keeps the terminal behind, and input must still go (Ctrl-C).
 */
const PARSE_WAIT = Duration.seconds(1)

export interface TerminalInput {
  readonly screen: TerminalScreen
  /** Writes the client's bytes after the answers to every query the app wrote before them. */
  readonly write: (data: Uint8Array) => Effect.Effect<void, ProviderError>
}

/** The screen of a TTY process and the one writer of its input; its fiber lives in the Scope. */
export const make = (
  process: BackendProcess,
  size: { readonly cols: number; readonly rows: number }
): Effect.Effect<TerminalInput, never, Scope.Scope> =>
  Effect.gen(function*() {
    const lock = yield* Effect.makeSemaphore(1)
    // Called from xterm's callbacks, outside any fiber: kept in order here, a fiber wakes to write them.
    let pending: Array<Uint8Array> = []
    const wake = yield* Queue.sliding<void>(1)
    const screen = new TerminalScreen({
      ...size,
      respond: (bytes) => {
        if (pending.length < MAX_PENDING_ANSWERS) pending.push(bytes)
        Queue.unsafeOffer(wake, undefined)
      }
    })
    // An answer the process cannot take any more (it ended) is nobody's loss.
    const flushAnswers = Effect.suspend(() => {
      const answers = pending
      pending = []
      return Effect.forEach(answers, (bytes) => Effect.ignore(process.write(bytes)), { discard: true })
    })
    yield* Queue.take(wake).pipe(
      Effect.zipRight(lock.withPermits(1)(flushAnswers)),
      Effect.forever,
      Effect.forkScoped
    )
    const write = (data: Uint8Array) =>
      lock.withPermits(1)(Effect.gen(function*() {
        yield* Effect.promise(() => screen.caughtUp()).pipe(Effect.timeout(PARSE_WAIT), Effect.ignore)
        yield* flushAnswers
        yield* process.write(data)
      }))
    return { screen, write }
  })
