import { assert, describe, it } from "@effect/vitest"
import { sign, verify } from "../../src/domain/Signature.js"

const key = new TextEncoder().encode("a key of the server's own")
const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

describe("Signature", () => {
  it("a signature verifies for its text and key only", () => {
    const signature = sign(key, "preview c1 8080 1767225600")
    assert.isTrue(verify(key, "preview c1 8080 1767225600", signature))
    assert.isFalse(verify(key, "preview c1 8081 1767225600", signature))
    assert.isFalse(verify(new TextEncoder().encode("another key"), "preview c1 8080 1767225600", signature))
    assert.isFalse(verify(key, "preview c1 8080 1767225600", ""))
    assert.isFalse(verify(key, "preview c1 8080 1767225600", `${signature}A`))
    assert.isFalse(verify(key, "preview c1 8080 1767225600", "é".repeat(43)))
  })

  it("no other spelling of a signature verifies: its last character carries unused bits that decoding ignores", () => {
    for (const text of ["a", "b", "preview c1 8080", "terminal c2 p7"]) {
      const signature = sign(key, text)
      const others = [...ALPHABET].filter((c) => c !== signature.at(-1)).map((c) => signature.slice(0, -1) + c)
      // Some of these decode to the same 32 bytes (the reason the text is compared, not the bytes).
      const sameBytes = others.filter((other) => Buffer.from(other, "base64url").equals(Buffer.from(signature, "base64url")))
      assert.isAbove(sameBytes.length, 0)
      for (const other of others) assert.isFalse(verify(key, text, other), other)
    }
  })
})
