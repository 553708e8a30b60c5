/**
 * The terminals people join: a TTY process seen by a person as the agent sees it (the same
 * process, screen and byte stream), watched, or driven by one person at a time who takes it over
 * and hands it back. While a person holds a terminal, the agent's `stdin` to it is refused and its
 * reads carry a note saying so (`holdNote`); what the person typed is in the agent's next read.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as Stream from "effect/Stream"
import type { AccessDenied, ProcessError } from "../domain/Errors.js"
import type { ProcessStatus } from "../domain/Process.js"
import type { ProcessRef } from "./ProcessInputs.js"

/** Who holds a terminal: the token its holder sends with keystrokes, and since when. */
export interface Hold {
  readonly token: string
  /** Where the person is: "dashboard" (the MCP App) or "page" (the standalone page of a link). */
  readonly by: string
  /** Clock millis of the take-over. */
  readonly since: number
}

/** What a viewer gets: the bytes since its cursor (or a redraw of the screen), and who drives. */
export interface TerminalView {
  readonly pid: string
  readonly computer_id: string
  readonly status: ProcessStatus
  readonly exitCode?: number | undefined
  readonly cols: number
  readonly rows: number
  /** The PTY's bytes since the cursor (escape sequences and all), or, with `reset`, a redraw. */
  readonly data: string
  /** The cursor for the next view: a byte offset in the PTY's output. */
  readonly next: number
  /** The viewer must clear its terminal before writing `data` (a first view, or bytes it missed). */
  readonly reset?: true | undefined
  readonly held?: { readonly by: string; readonly since: string; readonly yours?: true | undefined } | undefined
}

export interface ViewOptions {
  readonly cursor?: number | undefined
  /** The viewer's hold token: renews its hold (fails when it no longer holds the terminal). */
  readonly hold?: string | undefined
}

export class Terminals extends Context.Tag("kilntainers/services/Terminals")<Terminals, {
  /** The output since the cursor (a redraw without one), the size and who drives. */
  readonly view: (session: string, ref: ProcessRef, options?: ViewOptions) => Effect.Effect<TerminalView, ProcessError>
  /** Views as the output arrives (and a heartbeat while it is quiet), until the process ends. */
  readonly follow: (session: string, ref: ProcessRef) => Stream.Stream<TerminalView, ProcessError>
  /** A person takes the terminal over; refused while another holds it. */
  readonly take: (session: string, ref: ProcessRef, by: string) => Effect.Effect<Hold, ProcessError>
  /** Hands the terminal back to the agent (nothing when `hold` no longer holds it). */
  readonly release: (session: string, ref: ProcessRef, hold: string) => Effect.Effect<void, ProcessError>
  /** The holder's keystrokes, written to the process as `stdin` writes them. */
  readonly keys: (session: string, ref: ProcessRef, hold: string, data: Uint8Array) => Effect.Effect<number, ProcessError>
  /** The holder is still there (its lease starts again). */
  readonly renew: (session: string, ref: ProcessRef, hold: string) => Effect.Effect<void, ProcessError>
  /** The holder resizes the terminal (the process gets SIGWINCH). */
  readonly resize: (session: string, ref: ProcessRef, hold: string, cols: number, rows: number) => Effect.Effect<void, ProcessError>
}>() {}

/**
 * Who holds which terminal (by process handle), with a lease: a holder that has not been heard
 * from for `leaseMs` (a closed browser tab) holds it no more. Below both Processes (which refuses
 * the agent's stdin to a held terminal) and Terminals.
 */
export class TerminalHolds extends Context.Tag("kilntainers/services/TerminalHolds")<TerminalHolds, {
  readonly current: (pid: string) => Effect.Effect<Hold | undefined>
  readonly take: (pid: string, by: string) => Effect.Effect<Hold, AccessDenied>
  /** Checks that `token` holds the terminal, and renews its lease. */
  readonly renew: (pid: string, token: string) => Effect.Effect<Hold, AccessDenied>
  readonly release: (pid: string, token: string) => Effect.Effect<void>
}>() {}

/** What an agent's result says while a person holds the terminal. */
export const holdNote = (hold: Hold, now: number): string =>
  `a person holds this terminal (took over ${Math.max(0, Math.round((now - hold.since) / 1000))} s ago, from the ${hold.by}): ` +
  "stdin to it is refused until they hand it back; stdout shows what they do"
