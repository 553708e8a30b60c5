/**
 * The signed token of a preview URL: `<id>.<expires>.<signature>` where `id` is a random nonce
 * (128 bits), `expires` the end of its life in epoch seconds (base 36), and `signature` the
 * HMAC-SHA256 over the id, the computer (and its incarnation), the port and `expires`, with the
 * server's preview key (32 random bytes per server start). A token that was not made by this server
 * start, or was changed in any part, fails `check`; the comparison takes constant time.
 */
import { randomBytes } from "node:crypto"
import * as Signature from "../../domain/Signature.js"

export interface TokenFields {
  readonly id: string
  readonly computer: string
  readonly incarnation: number
  readonly port: number
  readonly expiresSec: number
}

/** The pieces of a token as it appears in a path; undefined when it has not the shape of one. */
export const parse = (token: string): { readonly id: string; readonly expiresSec: number; readonly signature: string } | undefined => {
  const match = /^([A-Za-z0-9_-]{22})\.([0-9a-z]{1,10})\.([A-Za-z0-9_-]{43})$/.exec(token)
  if (match === null) return undefined
  return { id: match[1]!, expiresSec: parseInt(match[2]!, 36), signature: match[3]! }
}

export const newKey = (): Buffer => randomBytes(32)
export const newId = (): string => randomBytes(16).toString("base64url")

const signed = (fields: TokenFields): string =>
  ["kilntainers-preview-v1", fields.id, fields.computer, String(fields.incarnation), String(fields.port), String(fields.expiresSec)].join("\n")

export const sign = (key: Buffer, fields: TokenFields): string =>
  `${fields.id}.${fields.expiresSec.toString(36)}.${Signature.sign(key, signed(fields))}`

/** Whether `signature` is this key's over `fields`. */
export const check = (key: Buffer, fields: TokenFields, signature: string): boolean => Signature.verify(key, signed(fields), signature)
