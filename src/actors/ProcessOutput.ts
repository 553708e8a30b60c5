/**
 * The output of one process as its actor reads it: two OutputLogs (stdout, stderr) fed by the
 * process's events, and, where the computer holds the process's output (Connection.held), the
 * computer's store behind them. Then the logs are only windows — the first and last few KiB the
 * inline results need — and anything else is read from the computer by range: the server's memory
 * stays small whatever a process writes, and every retained byte stays readable, after any server.
 *
 * Three reads:
 *   inline  head and tail within a budget, an exact marker between them, and `resume`: the first
 *           byte left out (a tool result's `next`: reading on from there pages through the middle);
 *   range   exactly the bytes from a cursor, at most maxBytes of them (`stdout` with a cursor);
 *   lines   the last lines (`stdout` without a cursor).
 */
import * as Effect from "effect/Effect"
import type { StreamSlice } from "../domain/Process.js"
import { OutputLog } from "./OutputLog.js"
import type { OutputSlice } from "./OutputSlice.js"

export type StreamName = "stdout" | "stderr"

/** Reads of the computer's store (HeldProcesses.read, for one process). */
export type StoreRead = (stream: StreamName, from: number, most: number) => Effect.Effect<
  { readonly start: number; readonly total: number; readonly data: Uint8Array },
  unknown
>

/**
 * What a process's actor keeps in memory when the computer keeps its output: enough for inline
 * results and the live tail; anything else is read from the computer.
 */
export const HELD_WINDOW = { headBytes: 64 * 1024, tailBytes: 256 * 1024 } as const

/**
 * What it keeps once its output has ended (the drain is over): an inline result's head and tail
 * (`--inline-bytes`, 24 KiB, halved) and a `stdout` without cursor's last lines, answered without
 * asking the computer. A server with many finished processes listed keeps 48 KiB per stream for
 * each at most, not the 320 KiB a running one fills (bench/held-output.ts).
 */
export const ENDED_WINDOW = { headBytes: 16 * 1024, tailBytes: 32 * 1024 } as const

/** The most one read asks the store for at a time. */
const READ_PIECE = 256 * 1024

export interface StreamRead {
  readonly cursor?: number | undefined
  readonly lines?: number | undefined
  readonly maxBytes?: number | undefined
  readonly mode: "inline" | "range" | "lines"
}

const sliceOf = (slice: OutputSlice, total: number, resume?: number): StreamSlice => ({
  text: slice.text,
  from: slice.from,
  next: slice.next,
  total,
  omitted: slice.omitted,
  ...(resume === undefined || resume >= slice.next ? {} : { resume })
})

export class ProcessOutput {
  readonly stdout: OutputLog
  readonly stderr: OutputLog

  constructor(
    options: { readonly headBytes: number; readonly tailBytes: number },
    /** The computer's store; absent: the logs are all there is. */
    private readonly store?: StoreRead | undefined
  ) {
    this.stdout = new OutputLog(options)
    this.stderr = new OutputLog(options)
  }

  /** The computer keeps this output: any retained range can be read from it. */
  get held(): boolean {
    return this.store !== undefined
  }

  private log(stream: StreamName): OutputLog {
    return stream === "stdout" ? this.stdout : this.stderr
  }

  /**
   * The output has ended (nothing more will be appended): where the computer keeps it, the logs
   * shrink to `ENDED_WINDOW`; where they are all there is, they stay as they are.
   */
  ended(): void {
    if (this.store === undefined) return
    this.stdout.shrink(ENDED_WINDOW.headBytes, ENDED_WINDOW.tailBytes)
    this.stderr.shrink(ENDED_WINDOW.headBytes, ENDED_WINDOW.tailBytes)
  }

  /** Where the store is behind, every read is of what it holds; the logs answer when they hold enough. */
  read(stream: StreamName, request: StreamRead): Effect.Effect<StreamSlice> {
    const log = this.log(stream)
    const total = log.total
    const budget = Math.max(0, Math.floor(request.maxBytes ?? Number.POSITIVE_INFINITY))
    const from = Math.min(Math.max(0, Math.floor(request.cursor ?? 0)), total)
    switch (request.mode) {
      case "range": {
        const to = Math.min(total, from + budget)
        const local = () => sliceOf(log.range(from, budget), total)
        if (this.store === undefined || log.holds(from, to)) return Effect.succeed(local())
        return Effect.map(this.fetchRange(stream, from, Math.min(budget, total - from), total), (fetched) =>
          fetched === undefined ? local() : sliceOf(fetched.range(from, budget), total))
      }
      case "inline": {
        const local = () => {
          const slice = log.read(from, budget)
          // With the store behind, whatever the text leaves out is readable: the first gap resumes.
          // Without it a reader pages on from the end, as before (the middle may be gone from memory).
          return sliceOf(slice, total, this.store === undefined ? undefined : slice.firstGap)
        }
        if (this.store === undefined || total - from <= 0) return Effect.succeed(local())
        const head = Math.floor(budget / 2)
        const tail = budget - head
        const fits = total - from <= budget
        const held = fits ? log.holds(from, total) : log.holds(from, from + head) && log.holds(total - tail, total)
        if (held) return Effect.succeed(local())
        return Effect.map(this.fetch(stream, from, total - from, fits ? undefined : { head, tail }), (fetched) => {
          if (fetched === undefined) return local()
          const slice = fetched.read(from, budget)
          return sliceOf(slice, total, slice.firstGap)
        })
      }
      case "lines": {
        const n = request.lines ?? 100
        if (this.store === undefined || log.holds(Math.max(0, total - budget), total)) return Effect.succeed(sliceOf(log.lastLines(n, budget), total))
        // The last `budget` bytes hold at most as many lines as can be shown.
        const start = Math.max(0, total - Math.min(budget, 4 * 1024 * 1024))
        const local = () => sliceOf(log.lastLines(n, budget), total)
        return Effect.map(this.fetch(stream, start, total - start), (fetched) => (fetched === undefined ? local() : sliceOf(fetched.lastLines(n, budget), total)))
      }
    }
  }

  /**
   * The store's bytes of [from, from+length) — the first `head` and last `tail` of it when both are
   * given — as a log whose offsets start at `from` (see `Fetched`). A store that cannot answer (the
   * computer went away meanwhile) leaves the window's answer: undefined.
   */
  private fetch(stream: StreamName, from: number, length: number, split?: { readonly head: number; readonly tail: number }) {
    const store = this.store!
    return Effect.gen(function*() {
      const runs: Array<{ readonly start: number; readonly data: Uint8Array }> = []
      const gather = (start: number, size: number) =>
        Effect.gen(function*() {
          let at = start
          const end = start + size
          while (at < end) {
            const piece = yield* store(stream, at, Math.min(READ_PIECE, end - at))
            const begin = Math.max(at, piece.start)
            const data = piece.data.subarray(0, Math.max(0, end - begin))
            if (data.length === 0) break
            runs.push({ start: begin, data })
            at = begin + data.length
          }
        })
      if (split === undefined) yield* gather(from, length)
      else {
        yield* gather(from, split.head)
        yield* gather(from + length - split.tail, split.tail)
      }
      return new Fetched(from, runs)
    }).pipe(Effect.option, Effect.map((fetched) => (fetched._tag === "Some" ? fetched.value : undefined)))
  }

  /**
   * The store's first run of bytes from `from`, `most` of them: where `from` is in what fell out of
   * the store, its run starts after that (and the range says how much it skipped).
   */
  private fetchRange(stream: StreamName, from: number, most: number, total: number) {
    const store = this.store!
    return Effect.gen(function*() {
      const runs: Array<{ readonly start: number; readonly data: Uint8Array }> = []
      let at = from
      let taken = 0
      while (taken < most && at < total) {
        const piece = yield* store(stream, at, Math.min(READ_PIECE, most - taken))
        // A range ends where what the store holds does: a later run is another range.
        if (piece.data.length === 0 || (runs.length > 0 && piece.start > at)) break
        runs.push({ start: piece.start, data: piece.data })
        taken += piece.data.length
        at = piece.start + piece.data.length
      }
      return new Fetched(from, runs)
    }).pipe(Effect.option, Effect.map((fetched) => (fetched._tag === "Some" ? fetched.value : undefined)))
  }
}

/**
 * Runs of a stream read from the store, laid out in an OutputLog whose offset 0 is `from` (its head
 * takes the run that starts there, its tail the rest): OutputLog's reads, in the stream's offsets.
 */
class Fetched {
  private readonly log: OutputLog

  constructor(private readonly from: number, runs: ReadonlyArray<{ readonly start: number; readonly data: Uint8Array }>) {
    const first = runs[0]
    const headBytes = first !== undefined && first.start === from ? first.data.length : 0
    const rest = runs.reduce((n, run) => n + run.data.length, 0) - headBytes
    this.log = new OutputLog({ headBytes, tailBytes: Math.max(1, rest) })
    let at = 0
    for (const run of runs) {
      const start = run.start - from
      if (start > at) this.log.skip(start - at)
      this.log.append(run.data)
      at = start + run.data.length
    }
    // Bytes after the last run (past what the store holds) are neither shown nor counted.
  }

  private shift(slice: OutputSlice): OutputSlice {
    const by = this.from
    return {
      text: slice.text,
      from: slice.from + by,
      next: slice.next + by,
      omitted: slice.omitted,
      ...(slice.firstGap === undefined ? {} : { firstGap: slice.firstGap + by }),
      ...(slice.cutAt === undefined ? {} : { cutAt: slice.cutAt + by })
    }
  }

  read(cursor: number, budget: number): OutputSlice {
    return this.shift(this.log.read(cursor - this.from, budget))
  }

  range(cursor: number, budget: number): OutputSlice {
    return this.shift(this.log.range(cursor - this.from, budget))
  }

  lastLines(n: number, budget: number): OutputSlice {
    return this.shift(this.log.lastLines(n, budget))
  }
}
