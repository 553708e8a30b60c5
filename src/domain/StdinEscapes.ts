/**
 * Turns what an agent types for a process's stdin into bytes.
 *
 * One left-to-right scan (never chained replaces), so every escape stands for exactly one thing
 * and `\\n` is a backslash followed by `n`.
 */
import * as Either from "effect/Either"

/** One sentence listing the escapes, for tool descriptions. */
export const describeEscapes =
  "Escapes: \\n newline, \\r carriage return, \\t tab, \\e escape (0x1b), \\\\ one backslash, \\0 NUL, " +
  "\\xHH one raw byte (e.g. \\x03 is Ctrl-C, \\x04 Ctrl-D), \\uHHHH or \\u{H…} a Unicode code point as UTF-8; " +
  "any other backslash sequence is rejected, other text is sent as UTF-8."

const SIMPLE: Readonly<Record<string, number>> = {
  n: 0x0a,
  r: 0x0d,
  t: 0x09,
  e: 0x1b,
  "\\": 0x5c,
  "0": 0x00
}

const HEX = /^[0-9a-fA-F]+$/

const encoder = new TextEncoder()

const show = (s: string) => `'${s}'`

/**
 * Parses escapes in `input` into the bytes to write: `Either.right(bytes)`, or `Either.left` with
 * a message naming the bad escape and its index (0-based, in UTF-16 code units like JavaScript).
 */
export const parseStdinEscapes = (input: string): Either.Either<Uint8Array, string> => {
  if (!input.includes("\\")) return Either.right(encoder.encode(input))
  const parts: Array<Uint8Array> = []
  let size = 0
  const push = (bytes: Uint8Array) => {
    parts.push(bytes)
    size += bytes.length
  }
  const fail = (escape: string, at: number, why: string) =>
    Either.left(`invalid stdin escape ${show(escape)} at index ${at}: ${why}. ${describeEscapes}`)

  let runStart = 0
  let i = 0
  while (i < input.length) {
    const slash = input.indexOf("\\", i)
    if (slash < 0) break
    if (slash > runStart) push(encoder.encode(input.slice(runStart, slash)))
    const kind = input[slash + 1]
    if (kind === undefined) return fail("\\", slash, "a backslash at the end escapes nothing (write \\\\ for one backslash)")
    const simple = SIMPLE[kind]
    if (simple !== undefined) {
      push(Uint8Array.of(simple))
      i = slash + 2
    } else if (kind === "x") {
      const digits = input.slice(slash + 2, slash + 4)
      if (digits.length !== 2 || !HEX.test(digits)) {
        return fail(input.slice(slash, slash + 4), slash, "\\x needs exactly two hex digits, like \\x03 or \\x1b")
      }
      push(Uint8Array.of(parseInt(digits, 16)))
      i = slash + 4
    } else if (kind === "u") {
      const parsed = parseUnicode(input, slash)
      if (Either.isLeft(parsed)) return fail(parsed.left.escape, slash, parsed.left.why)
      let { codePoint, end } = parsed.right
      // a UTF-16 surrogate pair written as two \uHHHH escapes is one code point
      if (codePoint >= 0xd800 && codePoint <= 0xdbff && input.startsWith("\\u", end)) {
        const low = parseUnicode(input, end)
        if (Either.isRight(low) && low.right.codePoint >= 0xdc00 && low.right.codePoint <= 0xdfff) {
          codePoint = 0x10000 + ((codePoint - 0xd800) << 10) + (low.right.codePoint - 0xdc00)
          end = low.right.end
        }
      }
      if (codePoint >= 0xd800 && codePoint <= 0xdfff) {
        return fail(input.slice(slash, end), slash, "a lone UTF-16 surrogate is not a character (use \\u{1F600} for code points above U+FFFF)")
      }
      push(encoder.encode(String.fromCodePoint(codePoint)))
      i = end
    } else {
      const escape = String.fromCodePoint(input.codePointAt(slash + 1)!)
      return fail(`\\${escape}`, slash, "unknown escape (write \\\\ for a literal backslash)")
    }
    runStart = i
  }
  if (runStart < input.length) push(encoder.encode(input.slice(runStart)))
  const out = new Uint8Array(size)
  let at = 0
  for (const part of parts) {
    out.set(part, at)
    at += part.length
  }
  return Either.right(out)
}

/** Parses `\uHHHH` or `\u{H…}` starting at the backslash at `slash`. */
const parseUnicode = (
  input: string,
  slash: number
): Either.Either<{ codePoint: number; end: number }, { escape: string; why: string }> => {
  const start = slash + 2
  if (input[start] === "{") {
    const close = input.indexOf("}", start)
    const digits = close < 0 ? "" : input.slice(start + 1, close)
    if (close < 0 || digits.length < 1 || digits.length > 6 || !HEX.test(digits)) {
      return Either.left({
        escape: input.slice(slash, close < 0 ? start + 8 : close + 1),
        why: "\\u{…} needs 1 to 6 hex digits and a closing brace, like \\u{1F600}"
      })
    }
    const codePoint = parseInt(digits, 16)
    if (codePoint > 0x10ffff) {
      return Either.left({ escape: input.slice(slash, close + 1), why: "code points end at U+10FFFF" })
    }
    return Either.right({ codePoint, end: close + 1 })
  }
  const digits = input.slice(start, start + 4)
  if (digits.length !== 4 || !HEX.test(digits)) {
    return Either.left({
      escape: input.slice(slash, start + 4),
      why: "\\u needs exactly four hex digits (like \\u00e9) or braces (like \\u{1F600})"
    })
  }
  return Either.right({ codePoint: parseInt(digits, 16), end: start + 4 })
}
