import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import { describeEscapes, parseStdinEscapes } from "../../src/domain/StdinEscapes.js"

const bytes = (input: string): Array<number> => {
  const result = parseStdinEscapes(input)
  if (Either.isLeft(result)) assert.fail(`unexpected rejection of ${JSON.stringify(input)}: ${result.left}`)
  return [...result.right]
}

const rejection = (input: string): string => {
  const result = parseStdinEscapes(input)
  if (Either.isRight(result)) assert.fail(`expected ${JSON.stringify(input)} to be rejected, got ${[...result.right]}`)
  return result.left
}

const utf8 = (s: string) => [...new TextEncoder().encode(s)]

describe("parseStdinEscapes", () => {
  it("plain text is UTF-8", () => {
    assert.deepStrictEqual(bytes("ls -la"), utf8("ls -la"))
    assert.deepStrictEqual(bytes("héllo wörld 日本 😀"), utf8("héllo wörld 日本 😀"))
    assert.deepStrictEqual(bytes(""), [])
  })

  it("a real newline character passes through", () => {
    assert.deepStrictEqual(bytes("a\nb"), [0x61, 0x0a, 0x62])
  })

  it("decodes every simple escape", () => {
    assert.deepStrictEqual(bytes("\\n"), [0x0a])
    assert.deepStrictEqual(bytes("\\r"), [0x0d])
    assert.deepStrictEqual(bytes("\\t"), [0x09])
    assert.deepStrictEqual(bytes("\\e"), [0x1b])
    assert.deepStrictEqual(bytes("\\\\"), [0x5c])
    assert.deepStrictEqual(bytes("\\0"), [0x00])
  })

  it("\\\\n is a backslash followed by n, not a newline", () => {
    assert.deepStrictEqual(bytes("\\\\n"), [0x5c, 0x6e])
    assert.deepStrictEqual(bytes("printf 'a\\\\nb'\\n"), utf8("printf 'a\\nb'\n"))
    assert.deepStrictEqual(bytes("\\\\\\n"), [0x5c, 0x0a])
    assert.deepStrictEqual(bytes("\\\\\\\\"), [0x5c, 0x5c])
  })

  it("\\xHH is one raw byte: Ctrl-C, ESC, and bytes that are not UTF-8", () => {
    assert.deepStrictEqual(bytes("\\x03"), [0x03])
    assert.deepStrictEqual(bytes("\\x1b"), [0x1b])
    assert.deepStrictEqual(bytes("\\x1B[A"), [0x1b, 0x5b, 0x41])
    assert.deepStrictEqual(bytes("\\xff\\x00\\x80"), [0xff, 0x00, 0x80])
    assert.deepStrictEqual(bytes("\\x04"), [0x04])
  })

  it("\\e and \\x1b are the same byte, and escapes mix with text", () => {
    assert.deepStrictEqual(bytes("\\e:wq\\r"), [0x1b, ...utf8(":wq"), 0x0d])
    assert.deepStrictEqual(bytes("echo hi\\n"), utf8("echo hi\n"))
    assert.deepStrictEqual(bytes("a\\tb\\0c"), [0x61, 0x09, 0x62, 0x00, 0x63])
  })

  it("\\uHHHH and \\u{H…} are Unicode code points encoded as UTF-8", () => {
    assert.deepStrictEqual(bytes("\\u00e9"), utf8("é"))
    assert.deepStrictEqual(bytes("\\u00E9"), utf8("é"))
    assert.deepStrictEqual(bytes("\\u20ac"), [0xe2, 0x82, 0xac])
    assert.deepStrictEqual(bytes("\\u{1F600}"), utf8("😀"))
    assert.deepStrictEqual(bytes("\\u{41}"), [0x41])
    assert.deepStrictEqual(bytes("\\u{10FFFF}"), utf8(String.fromCodePoint(0x10ffff)))
    assert.deepStrictEqual(bytes("\\u0003"), [0x03])
  })

  it("a surrogate pair written as two \\u escapes is one character", () => {
    assert.deepStrictEqual(bytes("\\uD83D\\uDE00"), utf8("😀"))
  })

  it("rejects an unknown escape, naming it and its index", () => {
    const message = rejection("abc\\qdef")
    assert.include(message, "'\\q'")
    assert.include(message, "index 3")
    assert.include(message, "\\\\")
  })

  it("rejects malformed \\x escapes", () => {
    assert.include(rejection("\\x4"), "index 0")
    assert.include(rejection("\\x4"), "two hex digits")
    assert.include(rejection("ab\\xZZ"), "index 2")
    assert.include(rejection("ab\\xZZ"), "'\\xZZ'")
    assert.include(rejection("\\x"), "two hex digits")
  })

  it("rejects malformed \\u escapes", () => {
    assert.include(rejection("\\u12"), "four hex digits")
    assert.include(rejection("\\u12G4"), "index 0")
    assert.include(rejection("x\\u{}"), "index 1")
    assert.include(rejection("\\u{1F600"), "closing brace")
    assert.include(rejection("\\u{1234567}"), "1 to 6 hex digits")
    assert.include(rejection("\\u{110000}"), "U+10FFFF")
    assert.include(rejection("\\uD83D"), "surrogate")
    assert.include(rejection("\\u{DC00}"), "surrogate")
  })

  it("rejects a backslash at the end", () => {
    const message = rejection("echo \\")
    assert.include(message, "index 5")
    assert.include(message, "at the end")
  })

  it("rejects escapes that look plausible but are not supported", () => {
    for (const escape of ["\\a", "\\b", "\\N", "\\X41", "\\E", "\\'", '\\"', "\\ "]) {
      assert.include(rejection(escape), "index 0", escape)
    }
  })

  it("names a non-ASCII character after a backslash whole", () => {
    assert.include(rejection("\\😀"), "😀")
  })

  it("the description lists every escape", () => {
    for (const escape of ["\\n", "\\r", "\\t", "\\e", "\\\\", "\\0", "\\xHH", "\\uHHHH", "\\u{"]) {
      assert.include(describeEscapes, escape)
    }
  })
})
