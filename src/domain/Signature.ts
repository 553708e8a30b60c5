/**
 * HMAC-SHA256 signatures of the links the server hands out (preview tokens, terminal links): one
 * way to sign a text and one constant-time check of a signature given as base64url.
 */
import { createHmac, timingSafeEqual } from "node:crypto"

/** The signature of `text` under `key`, as base64url. */
export const sign = (key: Uint8Array, text: string): string => createHmac("sha256", key).update(text).digest("base64url")

/** Whether `signature` (base64url) is `key`'s over `text`; the comparison takes constant time. */
export const verify = (key: Uint8Array, text: string, signature: string): boolean => {
  const given = Buffer.from(signature, "base64url")
  const expected = createHmac("sha256", key).update(text).digest()
  return given.length === expected.length && timingSafeEqual(given, expected)
}
