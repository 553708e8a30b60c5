/**
 * The screen of a TTY process: PTY bytes fed to an @xterm/headless terminal, rendered as text.
 *
 * xterm parses writes asynchronously (in ~12 ms slices between timers) and throws once 50 MB
 * are pending, so the screen keeps its own queue: at most `HIGH_WATER_BYTES` are handed to xterm
 * at a time, the rest wait here, and past `maxBacklogBytes` the oldest waiting bytes are
 * dropped (counted in `droppedBytes`) rather than growing without bound. `pendingBytes` lets
 * the owner apply backpressure instead. A snapshot renders only after every byte written
 * before it has been parsed.
 *
 * Owned by one actor fiber: plain code; `snapshotEffect` is the Effect view of `snapshot`.
 */
import type * as Xterm from "@xterm/headless"
import * as Effect from "effect/Effect"
import { createRequire } from "node:module"

type XTerminal = Xterm.Terminal
// @xterm/headless (CommonJS) takes ~40 ms to load: it is required with the first terminal, not at
// startup, where most servers never open one.
const require = createRequire(import.meta.url)
let xtermTerminal: typeof Xterm.Terminal | undefined
const Terminal = (): typeof Xterm.Terminal =>
  (xtermTerminal ??= (require("@xterm/headless") as typeof Xterm).Terminal)

/** The rendered screen of a terminal. */
export interface ScreenSnapshot {
  /** visible rows, trailing whitespace of each row and trailing blank rows trimmed */
  readonly text: string
  /** 0-based column and row of the cursor on the visible screen */
  readonly cursor: { readonly x: number; readonly y: number }
  readonly cols: number
  readonly rows: number
  /** true while a full-screen app (vim, less, top) uses the alternate buffer */
  readonly alternateScreen: boolean
  /** rows above the visible screen (of the normal buffer), oldest first; only when asked */
  readonly scrollback?: string
  /** PTY bytes dropped unparsed because output arrived faster than the terminal could parse */
  readonly droppedBytes?: number
}

export interface TerminalScreenOptions {
  readonly cols: number
  readonly rows: number
  /** rows kept above the visible screen (default 1000) */
  readonly scrollback?: number | undefined
  /** bytes that may wait for the terminal before the oldest are dropped (default 32 MiB) */
  readonly maxBacklogBytes?: number | undefined
  /**
   * Receives the terminal's replies to queries from the app (cursor position report `ESC[6n`,
   * device attributes `ESC[c`, …), to be written to the PTY's input: some programs wait for them.
   */
  readonly respond?: ((bytes: Uint8Array) => void) | undefined
}

export interface SnapshotOptions {
  readonly scrollback?: boolean | undefined
  /** the most recent rows of scrollback to return (default: all that are kept) */
  readonly maxScrollbackLines?: number | undefined
}

export const DEFAULT_COLS = 120
export const DEFAULT_ROWS = 30
export const DEFAULT_SCROLLBACK = 1000
const DEFAULT_MAX_BACKLOG_BYTES = 32 * 1024 * 1024
/** bytes handed to xterm and not yet parsed; far below xterm's 50 MB discard limit */
const HIGH_WATER_BYTES = 512 * 1024
const EMPTY = new Uint8Array(0)

type Item =
  | { readonly _tag: "Data"; bytes: Uint8Array; seq: number }
  | { readonly _tag: "Resize"; readonly cols: number; readonly rows: number; readonly seq: number }

const checkSize = (what: string, n: number, max: number) => {
  if (!Number.isSafeInteger(n) || n < 1 || n > max) {
    throw new RangeError(`TerminalScreen: ${what} must be an integer from 1 to ${max}, got ${n}`)
  }
}

/** A headless terminal fed with PTY bytes, rendered on demand. */
export class TerminalScreen {
  private readonly terminal: XTerminal
  private readonly maxBacklogBytes: number
  /** items not yet handed to xterm, in order */
  private backlog: Array<Item> = []
  private backlogBytes = 0
  private inFlightBytes = 0
  private inFlightItems = 0
  /** sequence number of the last item written / parsed (items are parsed in order) */
  private seq = 0
  private doneSeq = 0
  private dropped = 0
  private waiters: Array<{ readonly seq: number; readonly run: () => void }> = []
  private disposed: ScreenSnapshot | undefined

  constructor(options: TerminalScreenOptions) {
    checkSize("cols", options.cols, 10_000)
    checkSize("rows", options.rows, 10_000)
    const scrollback = options.scrollback ?? DEFAULT_SCROLLBACK
    if (!Number.isSafeInteger(scrollback) || scrollback < 0) {
      throw new RangeError(`TerminalScreen: scrollback must be a non-negative integer, got ${scrollback}`)
    }
    this.maxBacklogBytes = options.maxBacklogBytes ?? DEFAULT_MAX_BACKLOG_BYTES
    // allowProposedApi: without it `terminal.buffer` throws. No convertEol: a PTY sends CRLF.
    this.terminal = new (Terminal())({
      cols: options.cols,
      rows: options.rows,
      scrollback,
      allowProposedApi: true
    })
    const respond = options.respond
    if (respond) {
      const encoder = new TextEncoder()
      this.terminal.onData((data) => respond(encoder.encode(data)))
      this.terminal.onBinary((data) => respond(Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff)))
    }
  }

  get cols(): number {
    return this.terminal.cols
  }

  get rows(): number {
    return this.terminal.rows
  }

  /** bytes written but not yet parsed (for backpressure on the PTY) */
  get pendingBytes(): number {
    return this.inFlightBytes + this.backlogBytes
  }

  /** bytes dropped unparsed so far (see the module comment) */
  get droppedBytes(): number {
    return this.dropped
  }

  /**
   * Feeds PTY bytes. The bytes are copied (`new Uint8Array`: a Buffer's `slice` would be a view), so
   * the caller may reuse the memory at once: xterm parses them later, between timers.
   */
  write(data: Uint8Array): void {
    if (this.disposed || data.length === 0) return
    const item: Item = { _tag: "Data", bytes: new Uint8Array(data), seq: ++this.seq }
    if (this.backlog.length === 0 && this.inFlightBytes < HIGH_WATER_BYTES) {
      this.hand(item)
      return
    }
    this.backlog.push(item)
    this.backlogBytes += data.length
    if (this.backlogBytes > this.maxBacklogBytes) this.dropOldest()
  }

  /** Resizes the terminal, in order with the bytes written before. */
  resize(cols: number, rows: number): void {
    checkSize("cols", cols, 10_000)
    checkSize("rows", rows, 10_000)
    if (this.disposed) return
    const item: Item = { _tag: "Resize", cols, rows, seq: ++this.seq }
    if (this.backlog.length === 0 && this.inFlightItems === 0) {
      this.terminal.resize(cols, rows)
      this.doneSeq = item.seq
    } else if (this.backlog.length === 0) {
      this.hand(item)
    } else {
      this.backlog.push(item)
    }
  }

  /** Renders the screen once the terminal has parsed every byte written so far. */
  snapshot(options: SnapshotOptions = {}): Promise<ScreenSnapshot> {
    if (this.disposed) return Promise.resolve(this.fromLast(this.disposed, options))
    if (this.doneSeq === this.seq) return Promise.resolve(this.render(options))
    return new Promise((resolve) => {
      this.waiters.push({ seq: this.seq, run: () => resolve(this.render(options)) })
    })
  }

  /**
   * Resolves once the terminal has parsed every byte written so far: by then it has answered each
   * query among them (`respond` was called), so input sent afterwards follows those answers.
   */
  caughtUp(): Promise<void> {
    if (this.disposed || this.doneSeq === this.seq) return Promise.resolve()
    return new Promise((resolve) => {
      this.waiters.push({ seq: this.seq, run: resolve })
    })
  }

  /** Frees the terminal; pending snapshots resolve with what was parsed until now. */
  dispose(): void {
    if (this.disposed) return
    const waiters = this.waiters
    this.waiters = []
    for (const waiter of waiters) waiter.run()
    // The last rendering keeps the scrollback: it outlives the process (a read after exit still has it).
    this.disposed = this.render({ scrollback: true })
    this.backlog = []
    this.backlogBytes = 0
    this.terminal.dispose()
  }

  /** The kept last rendering, cut to what a later snapshot asks for. */
  private fromLast(last: ScreenSnapshot, options: SnapshotOptions): ScreenSnapshot {
    if (!options.scrollback || last.scrollback === undefined) {
      const { scrollback: _dropped, ...screen } = last
      return screen
    }
    if (options.maxScrollbackLines === undefined) return last
    const lines = last.scrollback.split("\n")
    return { ...last, scrollback: lines.slice(Math.max(0, lines.length - options.maxScrollbackLines)).join("\n") }
  }

  private hand(item: Item) {
    this.inFlightItems++
    if (item._tag === "Data") {
      const length = item.bytes.length
      this.inFlightBytes += length
      this.terminal.write(item.bytes, () => {
        this.inFlightBytes -= length
        this.parsed(item.seq)
      })
    } else {
      this.terminal.write(EMPTY, () => {
        if (!this.disposed) this.terminal.resize(item.cols, item.rows)
        this.parsed(item.seq)
      })
    }
  }

  private parsed(seq: number) {
    this.inFlightItems--
    this.doneSeq = seq
    if (this.disposed) return
    while (this.backlog.length > 0 && this.inFlightBytes < HIGH_WATER_BYTES) {
      const item = this.backlog.shift()!
      if (item._tag === "Data") this.backlogBytes -= item.bytes.length
      this.hand(item)
    }
    if (this.waiters.length > 0 && this.waiters[0]!.seq <= seq) {
      const ready = this.waiters.filter((w) => w.seq <= seq)
      this.waiters = this.waiters.filter((w) => w.seq > seq)
      for (const waiter of ready) waiter.run()
    }
  }

  /**
   * Drops waiting bytes from the front until the backlog fits again. Dropped data items stay as
   * empty items (merged into one), so the sequence numbers snapshots wait for still complete.
   */
  private dropOldest() {
    const kept: Array<Item> = []
    let emptied: Extract<Item, { _tag: "Data" }> | undefined
    for (const item of this.backlog) {
      if (item._tag === "Data" && this.backlogBytes > this.maxBacklogBytes) {
        this.backlogBytes -= item.bytes.length
        this.dropped += item.bytes.length
        if (emptied && kept[kept.length - 1] === emptied) {
          emptied.seq = item.seq
        } else {
          emptied = { _tag: "Data", bytes: EMPTY, seq: item.seq }
          kept.push(emptied)
        }
      } else {
        kept.push(item)
      }
    }
    this.backlog = kept
  }

  private render(options: SnapshotOptions): ScreenSnapshot {
    const terminal = this.terminal
    const active = terminal.buffer.active
    const rowText = (buffer: typeof active, y: number) => buffer.getLine(y)?.translateToString(true).trimEnd() ?? ""
    const lines: Array<string> = []
    for (let y = 0; y < terminal.rows; y++) lines.push(rowText(active, active.baseY + y))
    while (lines.length > 0 && lines[lines.length - 1] === "") lines.pop()
    const snapshot: {
      -readonly [K in keyof ScreenSnapshot]: ScreenSnapshot[K]
    } = {
      text: lines.join("\n"),
      cursor: { x: active.cursorX, y: active.cursorY },
      cols: terminal.cols,
      rows: terminal.rows,
      alternateScreen: active.type === "alternate"
    }
    if (options.scrollback) {
      // the normal buffer's history: the alternate buffer has none
      const normal = terminal.buffer.normal
      const max = options.maxScrollbackLines ?? normal.baseY
      const from = Math.max(0, normal.baseY - Math.max(0, Math.floor(max)))
      const history: Array<string> = []
      for (let y = from; y < normal.baseY; y++) history.push(rowText(normal, y))
      snapshot.scrollback = history.join("\n")
    }
    if (this.dropped > 0) snapshot.droppedBytes = this.dropped
    return snapshot
  }
}

/** `screen.snapshot` as an Effect (it cannot fail; a disposed screen gives its last rendering). */
export const snapshotEffect = (screen: TerminalScreen, options: SnapshotOptions = {}): Effect.Effect<ScreenSnapshot> =>
  Effect.promise(() => screen.snapshot(options))
