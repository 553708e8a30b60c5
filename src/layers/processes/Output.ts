/**
 * Output as tool results carry it: both streams within one inline budget, bytes left out marked
 * exactly (the marker comes from the log, which knows every hole), cursors only where they help.
 */
import * as Effect from "effect/Effect"
import type { ProcessInfo } from "../../domain/Process.js"
import type { OutputFields, ProcessHandle, ProcessState } from "../../services/Processes.js"

/**
 * Splits an inline budget between stdout and stderr: each gets all it has when both fit; otherwise
 * stderr (where errors are) keeps at least a quarter, and the rest goes to stdout.
 */
export const splitBudget = (budget: number, stdoutBytes: number, stderrBytes: number) => {
  if (stdoutBytes + stderrBytes <= budget) return { stdout: budget, stderr: budget }
  const stderr = Math.min(stderrBytes, Math.max(Math.floor(budget / 4), budget - stdoutBytes))
  return { stdout: Math.max(0, budget - stderr), stderr }
}

export interface ReadSpec {
  readonly stdoutCursor?: number | undefined
  readonly stderrCursor?: number | undefined
  /** Without cursors: the last lines of each stream. */
  readonly lines?: number | undefined
  readonly budget: number
  readonly scrollback?: boolean | undefined
  /** From the cursors, exactly the bytes there (where the computer keeps them): `stdout` paging. */
  readonly exact?: boolean | undefined
}

/** The output of a process from cursors (or its last lines), within the budget. */
export const outputFields = (
  process: ProcessHandle,
  spec: ReadSpec
): Effect.Effect<OutputFields & { readonly running: boolean; readonly shown: Cursors }> =>
  Effect.gen(function*() {
    const totals = yield* process.totals
    const running = (yield* process.status) === "running"
    const budgets = splitBudget(
      spec.budget,
      process.tty ? 0 : totals.stdout - (spec.stdoutCursor ?? 0),
      totals.stderr - (spec.stderrCursor ?? 0)
    )
    const view = yield* process.read({
      stdoutCursor: spec.stdoutCursor,
      stderrCursor: spec.stderrCursor,
      lines: spec.stdoutCursor === undefined && spec.stderrCursor === undefined ? spec.lines : undefined,
      maxBytes: budgets.stdout,
      stderrMaxBytes: budgets.stderr,
      scrollback: spec.scrollback,
      exact: spec.exact
    })
    const screen = view.screen
    const omittedOut = screen === undefined ? view.stdout.omitted : 0
    const omittedErr = view.stderr.omitted
    const cut = omittedOut > 0 || omittedErr > 0
    // Where the computer keeps what was left out, a reader pages on from the first byte left out.
    const nextOut = view.stdout.resume ?? view.stdout.next
    const nextErr = view.stderr.resume ?? view.stderr.next
    const more = nextOut < totals.stdout || nextErr < totals.stderr
    return {
      running,
      // Where this result's output ends, per stream (what a later kill shows from).
      shown: { stdout: view.stdout.next, stderr: view.stderr.next },
      stdout: screen?.text ?? view.stdout.text,
      stderr: view.stderr.text,
      // A TTY's stdout is its screen: byte cursors do not read it.
      ...(screen === undefined && (running || cut || more) ? { next: { stdout: nextOut, stderr: nextErr } } : {}),
      ...(cut
        ? { omitted: { ...(omittedOut > 0 ? { stdout: omittedOut } : {}), ...(omittedErr > 0 ? { stderr: omittedErr } : {}) } }
        : {}),
      ...(screen === undefined ? {} : {
        screen: {
          cursor: screen.cursor,
          cols: screen.cols,
          rows: screen.rows,
          ...(screen.alternateScreen ? { alternateScreen: true as const } : {}),
          ...(screen.scrollback ? { scrollback: screen.scrollback } : {})
        }
      })
    }
  })

/** process-mcp's status and how it ended, from a ps entry. */
export const stateOf = (info: ProcessInfo): ProcessState => ({
  pid: info.pid,
  status: info.status,
  ...(info.exitCode === undefined ? {} : { exitCode: info.exitCode }),
  ...(info.signal === undefined ? {} : { signal: info.signal }),
  ...(info.reason === undefined ? {} : { reason: info.reason })
})

/** A result without the internal `running` flag and `shown` cursors. */
export const withoutRunning = <A extends { readonly running: boolean; readonly shown: Cursors }>(
  { running: _running, shown: _shown, ...rest }: A
): Omit<A, "running" | "shown"> => rest

export interface Cursors {
  readonly stdout: number
  readonly stderr: number
}

/** Bytes of output a kill's result shows at most (head and tail): what no earlier result showed. */
export const KILL_OUTPUT_BYTES = 4096

/**
 * How far each process's output was shown in results of this server, so that `kill` can show what
 * came after (a server's last log lines). Per server and best effort: a process followed from
 * another server starts at 0, and the budget bounds what that shows.
 */
export const shownCursors = () => {
  const shown = new WeakMap<ProcessHandle, Cursors>()
  /** Records how far a result showed. */
  const mark = (process: ProcessHandle, cursors: Cursors) => {
    const before = shown.get(process)
    shown.set(process, {
      stdout: Math.max(before?.stdout ?? 0, cursors.stdout),
      stderr: Math.max(before?.stderr ?? 0, cursors.stderr)
    })
  }
  return {
    mark,
    /** Records how far a result showed, and returns the result without internal fields. */
    note: <A extends { readonly running: boolean; readonly shown: Cursors }>(process: ProcessHandle, output: A) => {
      mark(process, output.shown)
      return withoutRunning(output)
    },
    from: (process: ProcessHandle): Cursors => shown.get(process) ?? { stdout: 0, stderr: 0 }
  }
}
