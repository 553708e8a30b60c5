import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import { createRequire } from "node:module"
import type * as Re2js from "re2js"
import type { RE2JS } from "re2js"

/**
 * `wait` patterns: RE2 syntax, matched in time linear in the text (re2js, a pure-JS port of RE2),
 * so no pattern and no output can make a match take exponential time. Work is bounded too: a
 * pattern compiles to at most `maxProgramSize` instructions, and one scan looks at a window whose
 * length times the program size stays under a fixed budget.
 */

// re2js (~190 KB) is loaded with the first pattern, not at startup.
const require = createRequire(import.meta.url)
let re2: typeof RE2JS | undefined
const RE2 = (): typeof RE2JS => (re2 ??= (require("re2js") as typeof Re2js).RE2JS)

/** Most RE2 instructions a pattern may compile to (`[ab]{1,1000}` is about 2000). */
export const maxProgramSize = 1000
/** Characters × instructions of one scan: a few milliseconds in the worst case measured. */
const scanBudget = 1 << 18
const maxWindow = 32 * 1024
const minWindow = 512

/** A compiled `wait` pattern. */
export interface Pattern {
  readonly source: string
  /**
   * Characters of recent output one scan looks at. Every match up to half this long is found;
   * longer ones may be missed when they arrive in pieces.
   */
  readonly window: number
  /** The first match in the text, if any. */
  readonly find: (text: string) => Option.Option<string>
}

const unsupported: ReadonlyArray<readonly [RegExp, string]> = [
  [/^\(\?[=!]/, "lookahead ((?=…) and (?!…))"],
  [/^\(\?<[=!]/, "lookbehind ((?<=…) and (?<!…))"],
  [/^\(\?>/, "atomic groups ((?>…))"],
  [/^\\[1-9]/, "backreferences (\\1 … \\9)"],
  [/^\\k</, "named backreferences (\\k<name>)"],
  [/^[*+?}][+]/, "possessive quantifiers (*+, ++, ?+)"]
]

/** Names the first construct RE2 cannot run in linear time, outside character classes. */
const unsupportedConstruct = (source: string): string | undefined => {
  let inClass = false
  for (let i = 0; i < source.length; i++) {
    const rest = source.slice(i, i + 4)
    if (!inClass) {
      const found = unsupported.find(([test]) => test.test(rest))
      if (found) return found[1]
    }
    const char = source[i]
    if (char === "\\") i++
    else if (char === "[" && !inClass) {
      inClass = true
      if (source[i + 1] === "^") i++
      if (source[i + 1] === "]") i++
    } else if (char === "]") inClass = false
  }
  return undefined
}

const syntax = "patterns use RE2 syntax: JavaScript's, without backreferences, lookaround, atomic groups or possessive quantifiers"

/** Compiles a pattern (multi-line: `^` and `$` match at line ends), or says why it cannot. */
export const compile = (source: string): Either.Either<Pattern, string> => {
  if (source.includes("\0")) return Either.left("pattern must not contain NUL characters")
  const construct = unsupportedConstruct(source)
  if (construct !== undefined) {
    return Either.left(`pattern uses ${construct}, which cannot run in linear time; ${syntax}`)
  }
  let re: RE2JS
  try {
    re = RE2().compile(source, RE2().MULTILINE)
  } catch (error) {
    const reason = error instanceof Error ? error.message.replace(/^error parsing regexp: /, "") : String(error)
    return Either.left(`pattern is not a valid regular expression: ${reason}; ${syntax}`)
  }
  const size = re.programSize()
  if (size > maxProgramSize) {
    return Either.left(
      `pattern is too complex: it compiles to ${size} RE2 instructions, more than ${maxProgramSize}; use smaller repeat counts ({n,m}) or fewer alternatives`
    )
  }
  const window = Math.max(minWindow, Math.min(maxWindow, Math.floor(scanBudget / Math.max(size, 1))))
  return Either.right({
    source,
    window,
    find: (text) => {
      // The DFA test is the cheap common case; a match is extracted only once one exists.
      if (!re.test(text)) return Option.none()
      const matcher = re.matcher(text)
      return matcher.find() ? Option.fromNullable(matcher.group()) : Option.none()
    }
  })
}

// CSI, OSC (ended by BEL or ST) and the other escapes (`ESC =`, `ESC >`, `ESC ( B`): a match is
// looked for in what a reader would see. The alternatives start with distinct characters, so this
// never backtracks.
const ansi = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[ -/]*[0-Z\\-~]/g

/** What a pattern is matched against: escapes removed, CR LF and lone CR as line ends. */
export const plainText = (output: string) => output.replace(ansi, "").replace(/\r\n?/g, "\n")

/**
 * Looks for a pattern in output that arrives in pieces. Each scan covers at most `window`
 * characters (the newest output, with the previous half window of context), and the scanner
 * gives the event loop a turn after every scan that found nothing, so a flood of output or a
 * costly pattern slows only this wait, never the server.
 */
export const scanner = (pattern: Pattern) => {
  const step = Math.floor(pattern.window / 2)
  let recent = ""
  return {
    feed: (output: string): Effect.Effect<Option.Option<string>> =>
      Effect.gen(function*() {
        for (let at = 0; at < output.length; at += step) {
          recent = (recent + output.slice(at, at + step)).slice(-pattern.window)
          const found = pattern.find(plainText(recent))
          if (Option.isSome(found)) return found
          yield* Effect.sleep(Duration.zero)
        }
        return Option.none()
      })
  }
}
