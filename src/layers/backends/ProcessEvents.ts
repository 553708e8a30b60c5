/**
 * The one way a process's output reaches the runtime, on every backend: a bounded, coalescing
 * buffer with back-pressure. Callback sources (a socket, an SDK's callbacks) call `data`/`stderr`/
 * `exit`/`end` and pause when told `hold(true)`; effect sources `offer` and wait while the consumer
 * is behind. The consumer pulls (`pull`, the process's one output interface). It is not a Mailbox of
 * chunks on purpose: output is copied once into a reused double buffer and handed out as views, so
 * heavy output costs no allocation per read.
 */
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { ExitInfo, ProcessEvent } from "../../services/Backend.js"

/** First size of a process's output buffer; it doubles as needed. */
const BUFFER_INITIAL = 64 * 1024
/** Buffered output past which the process's output is held back until its consumer pulls. */
const BUFFER_HOLD = 4 * 1024 * 1024
/** Pending events past which the output is held back too (alternating stdout/stderr bytes). */
const EVENTS_HOLD = 4096
/** A buffer this big is dropped after a round that used little of it. */
const BUFFER_SHRINK_ABOVE = 1024 * 1024
const EMPTY_BUFFER = Buffer.alloc(0)

type Pending =
  | { readonly _tag: "Stdout" | "Stderr"; readonly start: number; end: number; readonly skipped: number }
  | Extract<ProcessEvent, { readonly _tag: "Exit" }>

/**
 * The events of one process, buffered until read: Exit at most once, nothing after the end.
 *
 * Bounded: past BUFFER_HOLD bytes (or EVENTS_HOLD events) waiting, `hold(true)` stops the source —
 * the agent's channel is not read, so the agent and then the process block on their full pipes —
 * until the consumer pulls. What is already decoded from the current read still lands (at most one
 * channel read, 1 MiB).
 *
 * Aliasing rule: output is copied into one of two buffers, and each pull hands out
 * everything gathered since the last one as a chunk of views into that buffer. That memory is
 * filled again after the *next* pull, so a consumer must copy whatever it keeps of a chunk before
 * it pulls again (ProcessActor's OutputLog and TerminalScreen copy). This keeps heavy output from
 * allocating per read.
 */
export class ProcessEvents {
  private front: Buffer = EMPTY_BUFFER
  private back: Buffer = EMPTY_BUFFER
  private fill = 0
  private pending: Array<Pending> = []
  private exited = false
  private ended = false
  private holding = false
  private wake: (() => void) | undefined
  private released: Array<() => void> = []
  /** Told true when the consumer falls behind (pause the source) and false once it caught up. */
  hold: (hold: boolean) => void = () => {}

  /** Callback sources: output as it arrives (copied; the caller may reuse its memory at once). */
  readonly data = (data: Uint8Array, skipped = 0) => this.push("Stdout", data, skipped)
  readonly stderr = (data: Uint8Array, skipped = 0) => this.push("Stderr", data, skipped)

  /** Effect sources: one event, waiting while the consumer is behind (back-pressure). */
  readonly offer = (event: ProcessEvent): Effect.Effect<void> =>
    Effect.suspend(() => {
      if (event._tag === "Exit") this.exit(event.exit)
      else this.push(event._tag, event.data, event.skipped ?? 0)
      return this.untilReleased
    })

  /** Completes once the consumer has caught up (at once when it has). */
  readonly untilReleased: Effect.Effect<void> = Effect.suspend(() =>
    !this.holding || this.ended
      ? Effect.void
      : Effect.async<void>((resume) => {
        const wake = () => resume(Effect.void)
        this.released.push(wake)
        return Effect.sync(() => {
          this.released = this.released.filter((other) => other !== wake)
        })
      })
  )

  readonly exit = (exit: ExitInfo) => {
    if (this.exited || this.ended) return
    this.exited = true
    this.pending.push({ _tag: "Exit", exit })
    this.notify()
  }

  readonly end = () => {
    if (this.ended) return
    this.exit({ exitCode: null, signal: "SIGKILL" })
    this.ended = true
    this.setHolding(false)
    this.notify()
  }

  /**
   * Ends the events without an Exit when none came: the source let go of a process that runs on
   * (a computer that holds its processes, whose connection ended or was closed).
   */
  readonly detach = () => {
    if (this.ended) return
    this.ended = true
    this.setHolding(false)
    this.notify()
  }

  /** The next chunk of events, failing with None once they ended: a process's `BackendProcess.pull`. */
  readonly pull: Effect.Effect<Chunk.Chunk<ProcessEvent>, Option.Option<never>> = Effect.suspend(() => {
    if (this.pending.length > 0) return Effect.succeed(this.take())
    if (this.ended) return Effect.fail(Option.none())
    return Effect.async<Chunk.Chunk<ProcessEvent>, Option.Option<never>>((resume) => {
      // Resumed with `pull` itself: the chunk holds everything that arrived until the fiber runs.
      this.wake = () => resume(this.pull)
      return Effect.sync(() => {
        this.wake = undefined
      })
    })
  })

  private push(tag: "Stdout" | "Stderr", data: Uint8Array, skipped: number) {
    if (this.ended || data.byteLength === 0) return
    const end = this.fill + data.byteLength
    if (end > this.back.length) {
      const grown = Buffer.allocUnsafeSlow(Math.max(end, 2 * this.back.length, BUFFER_INITIAL))
      this.back.copy(grown, 0, 0, this.fill)
      this.back = grown
    }
    this.back.set(data, this.fill)
    const last = this.pending[this.pending.length - 1]
    // Bytes after a gap start an event of their own: the gap is said where it is.
    if (last !== undefined && last._tag === tag && last.end === this.fill && skipped === 0) last.end = end
    else this.pending.push({ _tag: tag, start: this.fill, end, skipped })
    this.fill = end
    if (end >= BUFFER_HOLD || this.pending.length >= EVENTS_HOLD) this.setHolding(true)
    this.notify()
  }

  /** Hands out what is pending; the consumer is done with the previous chunk, whose buffer is refilled next. */
  private take(): Chunk.Chunk<ProcessEvent> {
    const buffer = this.back
    const events = this.pending.map((event): ProcessEvent =>
      event._tag === "Exit"
        ? event
        : event.skipped > 0
        ? { _tag: event._tag, data: buffer.subarray(event.start, event.end), skipped: event.skipped }
        : { _tag: event._tag, data: buffer.subarray(event.start, event.end) }
    )
    this.pending = []
    this.back = this.front.length > BUFFER_SHRINK_ABOVE && this.fill < BUFFER_INITIAL ? EMPTY_BUFFER : this.front
    this.front = buffer
    this.fill = 0
    // The Exit is the last event: nothing more will be buffered. The views handed out keep their
    // memory alive while the consumer reads them; a finished process (listed for a while yet) keeps
    // no buffer of its own (128 KiB each, 80 MiB with 50 sessions that ran 20 commands each).
    if (this.exited) this.front = this.back = EMPTY_BUFFER
    this.setHolding(false)
    return Chunk.unsafeFromArray(events)
  }

  private setHolding(holding: boolean) {
    if (this.holding === holding) return
    this.holding = holding
    this.hold(holding)
    if (!holding) for (const wake of this.released.splice(0)) wake()
  }

  private notify() {
    const wake = this.wake
    this.wake = undefined
    wake?.()
  }
}
