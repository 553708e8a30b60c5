/**
 * The decoded slices of one output stream: the OutputSlice shape, the runs of held bytes
 * ("pieces") OutputLog hands over, and how they become text — cuts moved to UTF-8 character
 * boundaries, a middle cut to fit a byte budget, a marker for every stretch left out. Apart from
 * OutputLog so the ring buffer and its rendering read on their own; `truncateMiddle` applies the
 * same cut to any text.
 *
 * Plain synchronous code, no Effect.
 */

/** A decoded range of a stream, with what it left out. */
export interface OutputSlice {
  /**
   * Decoded UTF-8 (invalid sequences become U+FFFD). Wherever bytes are left out, the text holds
   * the marker `[… N bytes omitted …]` on its own line (`\n[… N bytes omitted …]\n` in the
   * middle, `[… N bytes omitted …]\n` when the range starts with missing bytes).
   */
  readonly text: string
  /** byte offset where this slice starts: the cursor asked for, clamped to `[0, total]` */
  readonly from: number
  /** cursor to pass next time: the byte offset after the last byte of the range */
  readonly next: number
  /** bytes between `from` and `next` that are not in `text` (evicted, or cut to fit maxBytes) */
  readonly omitted: number
  /** the first byte between `from` and `next` not in `text` (evicted, or cut), if any */
  readonly firstGap?: number | undefined
  /** the first byte cut to fit maxBytes (readable by a later read), if any */
  readonly cutAt?: number | undefined
}

/** The marker that stands for `n` bytes left out of a text. */
export const omittedMarker = (n: number): string => `[… ${n} bytes omitted …]`

/** A retained run of bytes at an absolute stream offset (one or two views, for a wrapped ring). */
export interface Piece {
  start: number
  parts: Array<Uint8Array>
  length: number
}

export const pieceEnd = (p: Piece) => p.start + p.length

/** Drops `n` bytes from the front of a piece (views are not copied). */
const dropFront = (p: Piece, n: number): Piece => {
  const parts: Array<Uint8Array> = []
  let skip = n
  for (const part of p.parts) {
    if (skip >= part.length) {
      skip -= part.length
      continue
    }
    parts.push(skip > 0 ? part.subarray(skip) : part)
    skip = 0
  }
  return { start: p.start + n, parts, length: p.length - n }
}

/** Drops `n` bytes from the back of a piece. */
export const dropBack = (p: Piece, n: number): Piece => {
  const parts: Array<Uint8Array> = []
  let keep = p.length - n
  for (const part of p.parts) {
    if (keep <= 0) break
    parts.push(keep >= part.length ? part : part.subarray(0, keep))
    keep -= part.length
  }
  return { start: p.start, parts, length: p.length - n }
}

const byteAt = (p: Piece, i: number): number => {
  let idx = i
  for (const part of p.parts) {
    if (idx < part.length) return part[idx]!
    idx -= part.length
  }
  return 0
}

const isContinuation = (b: number) => (b & 0xc0) === 0x80

/** Length of the UTF-8 sequence a lead byte announces (1 for ASCII and invalid bytes). */
const sequenceLength = (b: number) => (b >= 0xf0 && b <= 0xf7 ? 4 : b >= 0xe0 ? (b <= 0xef ? 3 : 1) : b >= 0xc0 ? 2 : 1)

/** How many bytes at the front of `p` continue a character that started before it (0–3). */
const leadingContinuations = (p: Piece): number => {
  let n = 0
  while (n < 3 && n < p.length && isContinuation(byteAt(p, n))) n++
  return n
}

/** How many bytes at the end of `p` are an incomplete character cut by the end (0–3). */
export const trailingPartial = (p: Piece): number => {
  for (let back = 1; back <= Math.min(4, p.length); back++) {
    const b = byteAt(p, p.length - back)
    if (isContinuation(b)) continue
    const need = sequenceLength(b)
    return need > back ? back : 0
  }
  return 0
}

const decode = (parts: ReadonlyArray<Uint8Array>): string => {
  if (parts.length === 0) return ""
  const buf = parts.length === 1 ? parts[0]! : Buffer.concat(parts)
  return Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength).toString("utf8")
}

/**
 * Keeps the first `floor(budget/2)` and the last `ceil(budget/2)` held bytes of the pieces; `at` is
 * the first byte cut.
 */
export const cutMiddle = (pieces: ReadonlyArray<Piece>, budget: number): { readonly pieces: Array<Piece>; readonly at: number } => {
  const front: Array<Piece> = []
  let left = Math.floor(budget / 2)
  let at = pieces[0]?.start ?? 0
  for (const p of pieces) {
    if (left <= 0) break
    const kept = p.length <= left ? p : dropBack(p, p.length - left)
    front.push(kept)
    at = pieceEnd(kept)
    left -= p.length
    if (left > 0) at = pieceEnd(p)
  }
  const back: Array<Piece> = []
  left = budget - Math.floor(budget / 2)
  for (let i = pieces.length - 1; i >= 0 && left > 0; i--) {
    const p = pieces[i]!
    back.unshift(p.length <= left ? p : dropFront(p, p.length - left))
    left -= p.length
  }
  return { pieces: [...front, ...back], at }
}

export const render = (input: ReadonlyArray<Piece>, from: number, next: number): OutputSlice => {
  // Move every cut to a character boundary: a piece's end followed by a hole loses an
  // incomplete trailing character, a piece's start preceded by a hole its stray continuations.
  const pieces: Array<Piece> = []
  for (let i = 0; i < input.length; i++) {
    let p = input[i]!
    if (p.start > (i === 0 ? from : pieceEnd(input[i - 1]!))) {
      const n = leadingContinuations(p)
      if (n > 0) p = dropFront(p, n)
    }
    if (pieceEnd(p) < (i === input.length - 1 ? next : input[i + 1]!.start)) {
      const n = trailingPartial(p)
      if (n > 0) p = dropBack(p, n)
    }
    if (p.length > 0) pieces.push(p)
  }
  let text = ""
  let at = from
  let omitted = 0
  let firstGap: number | undefined
  for (const p of pieces) {
    const hole = p.start - at
    if (hole > 0) {
      omitted += hole
      firstGap ??= at
      text += at === from ? `${omittedMarker(hole)}\n` : `\n${omittedMarker(hole)}\n`
    }
    text += decode(p.parts)
    at = pieceEnd(p)
  }
  const hole = next - at
  if (hole > 0) {
    omitted += hole
    firstGap ??= at
    text += at === from ? omittedMarker(hole) : `\n${omittedMarker(hole)}`
  }
  return firstGap === undefined ? { text, from, next, omitted } : { text, from, next, omitted, firstGap }
}

/**
 * Truncates a text to at most `maxBytes` UTF-8 bytes (plus the marker) by keeping its start and
 * its end (half each, the end getting the odd byte) around `\n[… N bytes omitted …]\n`.
 */
export const truncateMiddle = (text: string, maxBytes: number): { text: string; omitted: number } => {
  const budget = Math.max(0, Math.floor(Number.isNaN(maxBytes) ? 0 : maxBytes))
  // a string of n UTF-16 units never takes more than 3n UTF-8 bytes
  if (text.length * 3 <= budget || Buffer.byteLength(text, "utf8") <= budget) return { text, omitted: 0 }
  const bytes = Buffer.from(text, "utf8")
  const piece: Piece = { start: 0, parts: [bytes], length: bytes.length }
  const slice = render(cutMiddle([piece], budget).pieces, 0, bytes.length)
  return { text: slice.text, omitted: slice.omitted }
}
