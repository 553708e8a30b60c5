import { Schema } from "effect"

export const ProcessStatus = Schema.Literal("running", "exited", "killed")
export type ProcessStatus = typeof ProcessStatus.Type

/** What `ps` shows of one process. */
export const ProcessInfo = Schema.Struct({
  id: Schema.String,
  computer_id: Schema.String,
  command: Schema.String,
  cwd: Schema.String,
  tty: Schema.Boolean,
  status: ProcessStatus,
  exitCode: Schema.NullOr(Schema.Number),
  signal: Schema.NullOr(Schema.String),
  pid: Schema.NullOr(Schema.Number),
  startedAt: Schema.String,
  endedAt: Schema.NullOr(Schema.String),
  reason: Schema.optional(Schema.String).annotations({
    description: "Why the process ended, when it did not simply exit (killed by a tool call, computer closed, …)"
  })
})
export type ProcessInfo = typeof ProcessInfo.Type

/** A slice of one output stream, read from a cursor. */
export const StreamSlice = Schema.Struct({
  text: Schema.String,
  from: Schema.Number.annotations({ description: "Byte offset where this text starts" }),
  next: Schema.Number.annotations({ description: "Cursor for the next read of this stream (byte offset)" }),
  total: Schema.Number.annotations({ description: "Bytes the stream has produced so far" }),
  omitted: Schema.Number.annotations({
    description: "Bytes between from and next that are not in text (evicted, or cut to fit the limit)"
  })
})
export type StreamSlice = typeof StreamSlice.Type

/** The rendered terminal of a TTY process. */
export const ScreenView = Schema.Struct({
  text: Schema.String,
  cursor: Schema.Struct({ x: Schema.Number, y: Schema.Number }),
  cols: Schema.Number,
  rows: Schema.Number,
  alternateScreen: Schema.Boolean,
  scrollback: Schema.optional(Schema.String)
})
export type ScreenView = typeof ScreenView.Type

/** Output of a process as a tool returns it. */
export const OutputView = Schema.Struct({
  stdout: StreamSlice,
  stderr: StreamSlice,
  screen: Schema.optional(ScreenView)
})
export type OutputView = typeof OutputView.Type

/** How to read output: from cursors, or the last lines of what is retained. */
export interface ReadOptions {
  readonly stdoutCursor?: number | undefined
  readonly stderrCursor?: number | undefined
  readonly lines?: number | undefined
  readonly maxBytes?: number | undefined
  readonly scrollback?: boolean | undefined
}
