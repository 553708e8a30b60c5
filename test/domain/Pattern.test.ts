import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Option } from "effect"
import * as Pattern from "../../src/domain/Pattern.js"

const compiled = (source: string) => {
  const result = Pattern.compile(source)
  if (Either.isLeft(result)) throw new Error(`did not compile: ${result.left}`)
  return result.right
}

const refusal = (source: string) => {
  const result = Pattern.compile(source)
  if (Either.isRight(result)) throw new Error(`'${source}' compiled, but should have been refused`)
  return result.left
}

describe("Pattern", () => {
  it("refuses backtracking-only syntax and names what is unsupported", () => {
    assert.match(refusal("(a)\\1"), /backreferences/)
    assert.match(refusal("(?<n>a)\\k<n>"), /named backreferences/)
    assert.match(refusal("a(?=b)"), /lookahead/)
    assert.match(refusal("a(?!b)"), /lookahead/)
    assert.match(refusal("(?<=a)b"), /lookbehind/)
    assert.match(refusal("(?<!a)b"), /lookbehind/)
    assert.match(refusal("(?>a)"), /atomic groups/)
    assert.match(refusal("a++"), /possessive/)
    assert.match(refusal("a(?=b)"), /RE2 syntax/)
  })

  it("reads those characters literally inside classes and after escapes", () => {
    assert.isTrue(Option.isSome(compiled("[(?=]x").find("=x")))
    assert.isTrue(Option.isSome(compiled("\\\\1").find("\\1")))
    assert.isTrue(Option.isSome(compiled("\\(?=").find("=")))
    assert.isTrue(Option.isSome(compiled("[](?=]+x").find("]=x")))
    assert.isTrue(Option.isSome(compiled("[^]a]+b").find("xxb")))
  })

  it("refuses NUL, invalid syntax and patterns too large to run cheaply", () => {
    assert.match(refusal("a\0b"), /NUL/)
    assert.match(refusal("("), /not a valid regular expression: missing closing \)/)
    assert.match(refusal("(?:a?){400}a{400}"), /too complex: it compiles to \d+ RE2 instructions, more than 1000/)
  })

  it("matches line by line, with CR LF and lone CR as line ends and terminal escapes removed", () => {
    const ready = compiled("^ready$")
    assert.deepStrictEqual(ready.find(Pattern.plainText("x\r\nready\r\ny")), Option.some("ready"))
    assert.deepStrictEqual(ready.find(Pattern.plainText("50%\rready\r")), Option.some("ready"))
    assert.deepStrictEqual(ready.find(Pattern.plainText("\x1b[1;32mready\x1b[0m\n")), Option.some("ready"))
    assert.deepStrictEqual(ready.find("not ready\n"), Option.none())
    assert.deepStrictEqual(compiled("port (\\d+)").find("listening on port 8080"), Option.some("port 8080"))
  })

  it("answers a catastrophic pattern at once", () => {
    const evil = compiled("^(a+)+$")
    const start = performance.now()
    assert.deepStrictEqual(evil.find(`${"a".repeat(32)}!`), Option.none())
    assert.deepStrictEqual(evil.find(`${"a".repeat(20_000)}!\n`.repeat(3)), Option.none())
    assert.isBelow(performance.now() - start, 1_000)
    assert.deepStrictEqual(evil.find(`${"a".repeat(32)}!\naaaa\n`), Option.some("aaaa"))
  })

  it("a complex pattern gets a smaller window, so one scan costs about the same", () => {
    const simple = compiled("ready")
    const complex = compiled("[ab]{1,400}[cd]{2}")
    assert.strictEqual(simple.window, 32 * 1024)
    assert.isBelow(complex.window, 1024)
    assert.isAtLeast(complex.window, 512)
  })

  it.effect("finds a match that arrives in pieces, even one character at a time", () =>
    Effect.gen(function*() {
      const pattern = compiled("Server listening on port \\d+")
      const scan = Pattern.scanner(pattern)
      const text = "booting\nServer listening on port 8080\n"
      let found: Option.Option<string> = Option.none()
      for (const char of text) {
        found = yield* scan.feed(char)
        if (Option.isSome(found)) break
      }
      assert.deepStrictEqual(found, Option.some("Server listening on port 8"))
    }))

  it.effect("finds a match up to half a window long across pieces, after a flood of other output", () =>
    Effect.gen(function*() {
      const pattern = compiled("BEGIN x*END")
      const long = `BEGIN ${"x".repeat(pattern.window / 2 - 10)}END`
      const scan = Pattern.scanner(pattern)
      assert.deepStrictEqual(yield* scan.feed("y".repeat(200_000)), Option.none())
      const cut = Math.floor(long.length / 3)
      assert.deepStrictEqual(yield* scan.feed(long.slice(0, cut)), Option.none())
      assert.deepStrictEqual(yield* scan.feed(long.slice(cut)), Option.some(long))
    }))

  it.effect("finds a match inside one large piece of output", () =>
    Effect.gen(function*() {
      const pattern = compiled("needle")
      const scan = Pattern.scanner(pattern)
      assert.deepStrictEqual(yield* scan.feed(`${"hay ".repeat(100_000)}needle${" hay".repeat(100_000)}`), Option.some("needle"))
    }))
})
