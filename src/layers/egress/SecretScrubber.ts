/**
 * Masks the server's secrets in what an upstream sends back, so that a service that echoes a
 * request (an error page, a debugging endpoint) cannot hand an injected credential to the computer.
 *
 * - What is masked (`maskForms`): each secret as configured and, when it has an auth-scheme prefix
 *   (`Bearer `, `token `, `Basic `, any token followed by spaces), the credential without it; each
 *   matched without regard to letter case (bytes compared as Latin-1 lower case), as its Latin-1
 *   bytes (how Node sends a header value) and its UTF-8 bytes.
 * - Each occurrence becomes as many `*` bytes, so lengths (Content-Length) stay right. A form split
 *   across chunks is caught: the last `longest - 1` bytes wait for the next chunk.
 * - What is not: any other encoding of the value — URL (`%20`, `+`), base64 (a Basic credential's
 *   decoded `user:password` included), JSON or HTML escapes, compression inside the body. Compressed
 *   transfer is decoded before masking (`EchoMask.ts`).
 */
import { Transform, type TransformCallback } from "node:stream"

const STAR = 0x2a
/** `scheme credential`: an RFC 9110 auth-scheme (a token), spaces, then the credential. */
const SCHEME_PREFIX = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ +(\S.*)$/s

/** The texts to mask for these secrets: each whole, and without its auth-scheme prefix; longest first. */
export const maskForms = (secrets: ReadonlyArray<string>): ReadonlyArray<string> => {
  const forms = new Map<string, string>()
  for (const secret of secrets) {
    const whole = secret.trim()
    const bare = SCHEME_PREFIX.exec(whole)?.[1]?.trim()
    for (const form of [whole, bare]) if (form !== undefined && form !== "") forms.set(form.toLowerCase(), form)
  }
  return [...forms.values()].sort((a, b) => b.length - a.length)
}

/**
 * The bytes with letters in lower case, read as Latin-1 (one byte a character, so lengths and
 * offsets stay): V8's own lower-casing of a one-byte string, several times faster than a byte loop.
 */
const foldCase = (data: Buffer) => Buffer.from(data.toString("latin1").toLowerCase(), "latin1")

/** The byte patterns of the forms, case-folded, Latin-1 and UTF-8 (once when they agree). */
const patterns = (forms: ReadonlyArray<string>): ReadonlyArray<Buffer> => {
  const out = new Map<string, Buffer>()
  for (const form of forms) {
    for (const encoding of ["latin1", "utf8"] as const) {
      const bytes = foldCase(Buffer.from(form, encoding))
      out.set(bytes.toString("hex"), bytes)
    }
  }
  return [...out.values()].sort((a, b) => b.length - a.length)
}

/** The patterns of one list of secrets, made once however many header values it masks. */
const compiled = new WeakMap<ReadonlyArray<string>, ReadonlyArray<Buffer>>()
const patternsOf = (secrets: ReadonlyArray<string>) => {
  let known = compiled.get(secrets)
  if (known === undefined) {
    known = patterns(maskForms(secrets))
    compiled.set(secrets, known)
  }
  return known
}

/** Masks every case-insensitive occurrence of the patterns in `data`, in place. */
const mask = (data: Buffer, secrets: ReadonlyArray<Buffer>) => {
  if (secrets.length === 0 || data.length === 0) return
  const folded = foldCase(data)
  for (const secret of secrets) {
    let at = folded.indexOf(secret)
    while (at >= 0) {
      data.fill(STAR, at, at + secret.length)
      folded.fill(STAR, at, at + secret.length)
      at = folded.indexOf(secret, at + secret.length)
    }
  }
}

/** A transform that masks the forms of `secrets` (see `maskForms`) in the bytes passing through. */
export class SecretScrubber extends Transform {
  private readonly secrets: ReadonlyArray<Buffer>
  private readonly keep: number
  private carry: Buffer = Buffer.alloc(0)

  constructor(secrets: ReadonlyArray<string>) {
    super()
    this.secrets = patternsOf(secrets)
    this.keep = Math.max(0, ...this.secrets.map((secret) => secret.length - 1))
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    const data = Buffer.concat([this.carry, chunk])
    mask(data, this.secrets)
    const cut = Math.max(0, data.length - this.keep)
    this.carry = Buffer.from(data.subarray(cut))
    if (cut > 0) this.push(data.subarray(0, cut))
    done()
  }

  override _flush(done: TransformCallback): void {
    if (this.carry.length > 0) this.push(this.carry)
    done()
  }
}

/** Masks the forms of the secrets in a text (a header's name or value, a status phrase) read as Latin-1. */
export const scrubText = (text: string, secrets: ReadonlyArray<string>): string => {
  const data = Buffer.from(text, "latin1")
  mask(data, patternsOf(secrets))
  return data.toString("latin1")
}

/** Masks the secrets in a header value (or each of several). */
export const scrubHeader = <A extends string | ReadonlyArray<string>>(value: A, secrets: ReadonlyArray<string>): A =>
  (typeof value === "string" ? scrubText(value, secrets) : value.map((one) => scrubText(one, secrets))) as A
