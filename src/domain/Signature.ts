/**
 * HMAC-SHA256 signatures of the links the server hands out (preview tokens, terminal links): one
 * way to sign a text and one constant-time check of a signature given as base64url.
 */
import { createHmac, timingSafeEqual } from "node:crypto"

/** The signature of `text` under `key`, as base64url. */
export const sign = (key: Uint8Array, text: string): string => createHmac("sha256", key).update(text).digest("base64url")

/**
 * Whether `signature` is `key`'s over `text`, in the one spelling `sign` gives; the comparison takes
 * constant time. The text is compared, not its decoding: base64url's last character carries unused
 * bits, so decoding would accept other spellings of the same signature (a changed link that works).
 */
export const verify = (key: Uint8Array, text: string, signature: string): boolean => {
  const given = Buffer.from(signature, "latin1")
  const expected = Buffer.from(sign(key, text), "latin1")
  return given.length === expected.length && timingSafeEqual(given, expected)
}
