import { assert, describe, it } from "@effect/vitest"
import { Either, Option } from "effect"
import { authenticate, bearerToken, tokenMatches, validateToken } from "../../../src/layers/mcp/BearerAuth.js"

describe("BearerAuth", () => {
  it("refuses an empty or blank token, whatever the white space", () => {
    for (const blank of ["", " ", "\t\n", "\u00a0", "\u2003\u3000", "\u200b", "\ufeff"]) {
      const checked = validateToken(blank, "--auth-token")
      assert.isTrue(Either.isLeft(checked), JSON.stringify(blank))
      assert.match(Either.getLeft(checked).pipe(Option.getOrThrow), /^--auth-token is empty or blank/)
    }
  })

  it("refuses a token no client could present, and accepts a b64token", () => {
    assert.match(Either.getLeft(validateToken("two words", "t")).pipe(Option.getOrThrow), /RFC 6750 b64token/)
    assert.match(Either.getLeft(validateToken("caf\u00e9", "t")).pipe(Option.getOrThrow), /RFC 6750 b64token/)
    assert.match(Either.getLeft(validateToken(" padded", "t")).pipe(Option.getOrThrow), /RFC 6750 b64token/)
    assert.deepStrictEqual(validateToken("abc-DEF_1.2~3+4/5==", "t"), Either.right("abc-DEF_1.2~3+4/5=="))
  })

  it("parses only `Bearer`, one space, a b64token and nothing else", () => {
    assert.deepStrictEqual(bearerToken("Bearer s3cret"), Option.some("s3cret"))
    assert.deepStrictEqual(bearerToken("bEaReR s3cret"), Option.some("s3cret"))
    for (const bad of [undefined, "", "Bearer", "Bearer ", "Bearer  s3cret", "Bearer s3cret ", "Bearer s3cret x",
      "Bearer\ts3cret", "Bearer \u00a0", "Bearer s3cr\u00e9t", "Basic s3cret", "Bearers3cret", "Bearer =abc", "Bearer a=b"]) {
      assert.deepStrictEqual(bearerToken(bad), Option.none(), JSON.stringify(bad))
    }
  })

  it("matches only the exact token", () => {
    assert.isTrue(tokenMatches("s3cret", "Bearer s3cret"))
    assert.isFalse(tokenMatches("s3cret", "Bearer s3cre"))
    assert.isFalse(tokenMatches("s3cret", "Bearer s3cret0"))
    assert.isFalse(tokenMatches("s3cret", undefined))
    assert.isFalse(tokenMatches("s3cret", "Bearer \u00a0"))
  })

  it("names the principal whose token a request carries, and nobody for any other", () => {
    const tokens = [{ principal: "default", token: "t0k3n-a" }, { principal: "bob", token: "t0k3n-b" }]
    assert.deepStrictEqual(authenticate(tokens, "Bearer t0k3n-a"), Option.some("default"))
    assert.deepStrictEqual(authenticate(tokens, "bearer t0k3n-b"), Option.some("bob"))
    for (const bad of [undefined, "Bearer t0k3n-", "Bearer t0k3n-bb", "Bearer ", "Basic t0k3n-a"]) {
      assert.deepStrictEqual(authenticate(tokens, bad), Option.none(), JSON.stringify(bad))
    }
    assert.deepStrictEqual(authenticate([], "Bearer t0k3n-a"), Option.none())
  })
})
