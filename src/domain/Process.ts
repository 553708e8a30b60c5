import * as Schema from "effect/Schema"

/** process-mcp's words: a process is running, or it has terminated (how: `exitCode` / `signal`). */
export const ProcessStatus = Schema.Literal("running", "terminated")
export type ProcessStatus = typeof ProcessStatus.Type

/** What `ps` shows of one process (fields that do not apply are absent). */
export const ProcessInfo = Schema.Struct({
  pid: Schema.String.annotations({ description: "The process handle that spawn returned; stdin, stdout, wait and kill take it" }),
  computer_id: Schema.String.annotations({ description: "The computer it runs on" }),
  command: Schema.String.annotations({ description: "The command line (cut at 200 characters)" }),
  status: ProcessStatus,
  exitCode: Schema.optional(Schema.Number.annotations({ description: "Exit code, once it exited by itself" })),
  signal: Schema.optional(Schema.String.annotations({ description: "The signal that ended it, if one did" })),
  cwd: Schema.String.annotations({ description: "Working directory" }),
  tty: Schema.Boolean.annotations({ description: "Runs on a terminal" }),
  createdAt: Schema.String.annotations({ description: "Start time (ISO 8601)" }),
  endedAt: Schema.optional(Schema.String.annotations({ description: "End time (ISO 8601)" })),
  osPid: Schema.optional(Schema.Number.annotations({ description: "The operating-system pid inside the computer" })),
  reason: Schema.optional(Schema.String.annotations({
    description: "Why it ended, when it did not simply exit (killed by a tool call, timed out, computer restarted, …)"
  })),
  descendantsKilled: Schema.optional(Schema.Number.annotations({
    description: "Other processes of its tree (background, setsid or double-forked children) that ended with it"
  }))
})
export type ProcessInfo = typeof ProcessInfo.Type

/** A slice of one output stream, read from a cursor. */
export interface StreamSlice {
  /** The text; bytes left out are shown as `[… N bytes omitted …]` on their own line. */
  readonly text: string
  /** Byte offset where this text starts. */
  readonly from: number
  /** Cursor for the next read of this stream (byte offset after the text). */
  readonly next: number
  /** Bytes the stream has produced so far. */
  readonly total: number
  /** Bytes between from and next that are not in text (evicted, or cut to fit the limit). */
  readonly omitted: number
  /** The first byte left out that a later read can still get: where a reader pages on from. */
  readonly resume?: number | undefined
}

/** The rendered terminal of a TTY process. */
export interface ScreenView {
  readonly text: string
  readonly cursor: { readonly x: number; readonly y: number }
  readonly cols: number
  readonly rows: number
  readonly alternateScreen: boolean
  readonly scrollback?: string | undefined
}

/** Output of a process, as read from its logs and terminal. */
export interface OutputView {
  readonly stdout: StreamSlice
  readonly stderr: StreamSlice
  readonly screen?: ScreenView | undefined
}

/** How to read output: from cursors, or the last lines of what is retained. */
export interface ReadOptions {
  readonly stdoutCursor?: number | undefined
  readonly stderrCursor?: number | undefined
  readonly lines?: number | undefined
  /** Most bytes of stdout (and of stderr, unless `stderrMaxBytes`) to return; the rest keeps head and tail. */
  readonly maxBytes?: number | undefined
  readonly stderrMaxBytes?: number | undefined
  readonly scrollback?: boolean | undefined
  /** TTY: also the raw bytes of stdout from `stdoutCursor` (escape sequences and all). */
  readonly raw?: boolean | undefined
  /**
   * From a cursor, exactly the bytes from there (at most maxBytes, no head and tail) where the
   * computer keeps the output: what `stdout` with a cursor pages through.
   */
  readonly exact?: boolean | undefined
}
