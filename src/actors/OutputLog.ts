/**
 * Bounded storage for one output stream (stdout or stderr) of a process.
 *
 * The stream is addressed by absolute byte offsets since it started. The log keeps the first
 * `headBytes` and the last `tailBytes` exactly (everything, while the stream is shorter than
 * both together) and counts every byte, so a process may write gigabytes while memory stays
 * bounded. Appending copies each chunk once into a preallocated (lazily grown) ring buffer:
 * no per-append allocation, no O(n²) copying.
 *
 * Owned by one actor fiber: plain synchronous code, no Effect.
 */
import { cutMiddle, dropBack, type OutputSlice, type Piece, pieceEnd, render, trailingPartial } from "./OutputSlice.js"

export interface OutputLogOptions {
  /** bytes kept from the start of the stream (default 64 KiB) */
  readonly headBytes?: number | undefined
  /** bytes kept from the end of the stream (default 1 MiB) */
  readonly tailBytes?: number | undefined
}

export const DEFAULT_HEAD_BYTES = 64 * 1024
export const DEFAULT_TAIL_BYTES = 1024 * 1024

// A buffer's first allocation, doubled as it fills: most commands write a few bytes, and 16 KiB
// zero-filled per stream per call showed in a busy server's allocation (bench/http-scale.mjs).
const INITIAL_CAPACITY = 256
const NEWLINE = 0x0a

const validSize = (name: string, value: number | undefined, fallback: number): number => {
  if (value === undefined) return fallback
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(`OutputLog: ${name} must be a non-negative integer, got ${value}`)
  }
  return value
}

/** Head+tail storage of one output stream, with exact counts and absolute byte cursors. */
export class OutputLog {
  /** The most bytes kept from the start and from the end (`shrink` lowers them). */
  private limits: { head: number; tail: number }

  private head: Uint8Array = new Uint8Array(0)
  private headLength = 0
  /** ring buffer: `ring.length` grows by doubling up to `tailBytes` */
  private ring: Uint8Array = new Uint8Array(0)
  /** index in `ring` of the oldest tail byte */
  private ringStart = 0
  private ringLength = 0
  private totalBytes = 0
  /** The head takes no more bytes (it filled, or the stream was joined later or skipped ahead). */
  private headFull = false

  constructor(options: OutputLogOptions = {}) {
    this.limits = {
      head: validSize("headBytes", options.headBytes, DEFAULT_HEAD_BYTES),
      tail: validSize("tailBytes", options.tailBytes, DEFAULT_TAIL_BYTES)
    }
  }

  /** bytes kept from the start of the stream */
  get headBytes(): number {
    return this.limits.head
  }

  /** bytes kept from the end of the stream */
  get tailBytes(): number {
    return this.limits.tail
  }

  /** exact count of bytes ever appended */
  get total(): number {
    return this.totalBytes
  }

  /** bytes held in memory (head + tail) */
  get retained(): number {
    return this.headLength + this.ringLength
  }

  /** bytes appended but no longer held (the evicted middle) */
  get evicted(): number {
    return this.totalBytes - this.retained
  }

  /**
   * Starts the log at `offset` of its stream (a process followed from there on): the bytes before
   * count as not held, as an evicted middle does.
   */
  startAt(offset: number): void {
    if (this.totalBytes === 0 && offset > 0) {
      this.totalBytes = offset
      this.headLength = 0
      // Nothing more belongs to the head: what comes next is tail.
      this.headFull = true
    }
  }

  /** Counts `n` bytes the log never saw (they fell out before they reached it) as not held. */
  skip(n: number): void {
    if (n <= 0) return
    this.totalBytes += n
    this.headFull = true
    // Tail bytes held so far no longer end the stream: drop them (the tail is the end's).
    this.ringStart = 0
    this.ringLength = 0
  }

  /** Whether every byte of [from, to) is held. */
  holds(from: number, to: number): boolean {
    const end = Math.min(to, this.totalBytes)
    if (end <= from) return true
    const tailStart = this.totalBytes - this.ringLength
    if (from < this.headLength) return end <= this.headLength || this.headLength >= tailStart
    return from >= tailStart
  }

  /**
   * Keeps only the first `headBytes` and the last `tailBytes` of what is held, in buffers of their
   * size; the rest counts as evicted, and the head takes no more bytes. For a stream that is kept
   * whole elsewhere (the computer's store) once it has ended: a finished process's log shrinks to
   * the windows its reads need, instead of holding full-size buffers for as long as it is listed.
   */
  shrink(headBytes: number, tailBytes: number): void {
    const head = Math.min(this.headLength, validSize("headBytes", headBytes, 0))
    const total = this.totalBytes
    const tailStart = total - this.ringLength
    // The held run that ends the stream: the tail, or everything while nothing was evicted.
    const runStart = this.headLength >= tailStart ? 0 : tailStart
    const keepFrom = Math.max(total - validSize("tailBytes", tailBytes, 0), head, runStart)
    const tail = new Uint8Array(total - keepFrom)
    let at = 0
    for (const piece of this.piecesFrom(keepFrom)) {
      for (const part of piece.parts) {
        tail.set(part, at)
        at += part.length
      }
    }
    this.head = this.head.slice(0, head)
    this.headLength = head
    this.headFull = true
    this.ring = tail
    this.ringStart = 0
    this.ringLength = tail.length
    this.limits = { head: Math.min(this.limits.head, headBytes), tail: Math.min(this.limits.tail, tailBytes) }
  }

  /** Appends a chunk; the chunk is copied, so the caller may reuse it. */
  append(chunk: Uint8Array): void {
    let data = chunk
    if (data.length === 0) return
    this.totalBytes += data.length
    if (this.headLength < this.headBytes && !this.headFull) {
      const n = Math.min(this.headBytes - this.headLength, data.length)
      this.ensureHead(this.headLength + n)
      this.head.set(n === data.length ? data : data.subarray(0, n), this.headLength)
      this.headLength += n
      if (n === data.length) return
      data = data.subarray(n)
    }
    this.pushTail(data)
  }

  /**
   * The bytes from `cursor` (default 0) to the end, decoded. Bytes no longer held are counted in
   * `omitted` and shown as a marker. When more than `maxBytes` held bytes remain, the first half
   * of the budget goes to the start of the range and the rest (the larger half when odd) to its
   * end, with the marker in between; markers are not counted in `maxBytes`. Cuts are moved to
   * UTF-8 character boundaries (the bytes this drops count as omitted).
   */
  read(cursor = 0, maxBytes = Number.POSITIVE_INFINITY): OutputSlice {
    const from = Math.min(Math.max(0, Math.floor(Number.isFinite(cursor) ? cursor : 0)), this.totalBytes)
    const budget = Math.max(0, Math.floor(Number.isNaN(maxBytes) ? 0 : maxBytes))
    let pieces = this.piecesFrom(from)
    const held = pieces.reduce((n, p) => n + p.length, 0)
    let cutAt: number | undefined
    if (held > budget) {
      const cut = cutMiddle(pieces, budget)
      pieces = cut.pieces
      cutAt = cut.at
    }
    const slice = render(pieces, from, this.totalBytes)
    return cutAt === undefined ? slice : { ...slice, cutAt: Math.min(cutAt, slice.firstGap ?? cutAt) }
  }

  /**
   * Exactly the bytes from `cursor` on, in order, at most `maxBytes` of those held (so a reader
   * pages through a stream by passing `next` back): a stretch no longer held at the start is
   * skipped and marked, and the range ends before the next one. Cuts move to UTF-8 character
   * boundaries, as `read`'s do.
   */
  range(cursor = 0, maxBytes = Number.POSITIVE_INFINITY): OutputSlice {
    const from = Math.min(Math.max(0, Math.floor(Number.isFinite(cursor) ? cursor : 0)), this.totalBytes)
    const budget = Math.max(0, Math.floor(Number.isNaN(maxBytes) ? 0 : maxBytes))
    const pieces = this.piecesFrom(from)
    const first = pieces[0]
    if (first === undefined) return render([], from, this.totalBytes)
    // Only the first run of held bytes: a range is contiguous.
    const taken = first.length <= budget ? first : dropBack(first, first.length - budget)
    const partial = taken.length > 0 ? trailingPartial(taken) : 0
    const whole = partial > 0 && taken.start + taken.length < pieceEnd(first) ? dropBack(taken, partial) : taken
    const end = whole.start + whole.length
    const slice = render(whole.length > 0 ? [whole] : [], from, end)
    return slice
  }

  /**
   * The last `n` lines of what is held (a trailing newline does not start a line), at most
   * `maxBytes` of them as in `read`. The evicted middle counts as a line break: when the lines
   * reach into it, the text starts with (or, reaching into the head, contains) its marker.
   */
  lastLines(n: number, maxBytes = Number.POSITIVE_INFINITY): OutputSlice {
    if (!(n >= 1)) return { text: "", from: this.totalBytes, next: this.totalBytes, omitted: 0 }
    return this.read(this.lastLinesStart(Math.floor(n)), maxBytes)
  }

  private lastLinesStart(n: number): number {
    const total = this.totalBytes
    const tailStart = total - this.ringLength
    const gap = tailStart - this.headLength
    let found = 0
    // Search backwards from `end` (exclusive) for newlines; a newline as the very last byte
    // ends the last line rather than starting a new one.
    let end = total
    if (this.ringLength > 0 && this.tailByteAt(total - 1) === NEWLINE) end--
    else if (this.ringLength === 0 && gap === 0 && this.headLength > 0 && this.head[this.headLength - 1] === NEWLINE) end--
    // the tail, newest first
    for (const view of this.tailViewsBackwards(tailStart, end)) {
      const bytes = Buffer.from(view.bytes.buffer, view.bytes.byteOffset, view.bytes.byteLength)
      let pos = bytes.length - 1
      while (pos >= 0) {
        const hit = bytes.lastIndexOf(NEWLINE, pos)
        if (hit < 0) break
        if (++found === n) return view.start + hit + 1
        pos = hit - 1
      }
    }
    if (gap > 0) {
      if (++found === n) return this.headLength
    }
    const headEnd = Math.min(this.headLength, end)
    const head = Buffer.from(this.head.buffer, this.head.byteOffset, this.headLength)
    // a newline ending the head is the same line break as the gap after it
    let pos = gap > 0 && head[headEnd - 1] === NEWLINE ? headEnd - 2 : headEnd - 1
    while (pos >= 0) {
      const hit = head.lastIndexOf(NEWLINE, pos)
      if (hit < 0) break
      if (++found === n) return hit + 1
      pos = hit - 1
    }
    return 0
  }

  private ensureHead(size: number) {
    if (size <= this.head.length) return
    const next = new Uint8Array(Math.min(this.headBytes, Math.max(size, INITIAL_CAPACITY, this.head.length * 2)))
    next.set(this.head.subarray(0, this.headLength))
    this.head = next
  }

  private pushTail(data: Uint8Array) {
    const cap = this.tailBytes
    if (cap === 0) return
    if (data.length >= cap) {
      if (this.ring.length < cap) this.ring = new Uint8Array(cap)
      this.ring.set(data.subarray(data.length - cap))
      this.ringStart = 0
      this.ringLength = cap
      return
    }
    const need = this.ringLength + data.length
    if (need > this.ring.length && this.ring.length < cap) {
      // Grow (only before the ring first fills): linearize the old contents at index 0.
      const next = new Uint8Array(Math.min(cap, Math.max(need, INITIAL_CAPACITY, this.ring.length * 2)))
      const [a, b] = this.ringViews(0, this.ringLength)
      next.set(a)
      if (b) next.set(b, a.length)
      this.ring = next
      this.ringStart = 0
    }
    const size = this.ring.length
    let writeAt = (this.ringStart + this.ringLength) % size
    const first = Math.min(data.length, size - writeAt)
    this.ring.set(first === data.length ? data : data.subarray(0, first), writeAt)
    if (first < data.length) this.ring.set(data.subarray(first), 0)
    writeAt = (writeAt + data.length) % size
    if (need > size) {
      this.ringStart = writeAt
      this.ringLength = size
    } else {
      this.ringLength = need
    }
  }

  /** Views of the ring's bytes at logical indexes [from, to) (0 = oldest held tail byte). */
  private ringViews(from: number, to: number): [Uint8Array, Uint8Array?] {
    const size = this.ring.length
    if (size === 0 || to <= from) return [new Uint8Array(0)]
    const a = (this.ringStart + from) % size
    const b = a + (to - from)
    if (b <= size) return [this.ring.subarray(a, b)]
    return [this.ring.subarray(a, size), this.ring.subarray(0, b - size)]
  }

  private tailByteAt(abs: number): number {
    const i = abs - (this.totalBytes - this.ringLength)
    return this.ring[(this.ringStart + i) % this.ring.length]!
  }

  /** The tail's bytes in [from, to) (absolute) as views, newest view first. */
  private tailViewsBackwards(tailStart: number, to: number): Array<{ start: number; bytes: Uint8Array }> {
    if (to <= tailStart) return []
    const [a, b] = this.ringViews(0, to - tailStart)
    const views = [{ start: tailStart, bytes: a }]
    if (b) views.push({ start: tailStart + a.length, bytes: b })
    return views.reverse()
  }

  /** The held bytes at or after `from`, as pieces in stream order. */
  private piecesFrom(from: number): Array<Piece> {
    const pieces: Array<Piece> = []
    const total = this.totalBytes
    const tailStart = total - this.ringLength
    if (from < this.headLength) {
      pieces.push({ start: from, parts: [this.head.subarray(from, this.headLength)], length: this.headLength - from })
    }
    const s = Math.max(from, tailStart)
    if (s < total) {
      const [a, b] = this.ringViews(s - tailStart, this.ringLength)
      const piece: Piece = { start: s, parts: b ? [a, b] : [a], length: total - s }
      // head and tail are adjacent while nothing was evicted: one run, decoded as one
      const prev = pieces[pieces.length - 1]
      if (prev && pieceEnd(prev) === s) {
        prev.parts.push(...piece.parts)
        prev.length += piece.length
      } else {
        pieces.push(piece)
      }
    }
    return pieces
  }
}
