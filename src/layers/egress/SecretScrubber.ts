/**
 * Masks the server's secrets in what an upstream sends back, so that a service that echoes a
 * request (an error page, a debugging endpoint) cannot hand an injected credential to the computer.
 * Each occurrence becomes as many `*` bytes, so lengths (Content-Length) stay right. A secret split
 * across chunks is caught: the last `longest - 1` bytes wait for the next chunk. Bodies are only as
 * plain as the upstream sends them: the proxy asks for `Accept-Encoding: identity` on the requests
 * it injects into, and a compressed or otherwise encoded echo is out of its reach.
 */
import { Transform, type TransformCallback } from "node:stream"

const STAR = 0x2a

/** Masks every occurrence of the secrets in `data`, in place. */
const mask = (data: Buffer, secrets: ReadonlyArray<Buffer>) => {
  for (const secret of secrets) {
    let at = data.indexOf(secret)
    while (at >= 0) {
      data.fill(STAR, at, at + secret.length)
      at = data.indexOf(secret, at + secret.length)
    }
  }
}

/** A transform that masks `secrets` in the bytes passing through. */
export class SecretScrubber extends Transform {
  private readonly secrets: ReadonlyArray<Buffer>
  private readonly keep: number
  private carry: Buffer = Buffer.alloc(0)

  constructor(secrets: ReadonlyArray<string>) {
    super()
    this.secrets = secrets.filter((secret) => secret.length > 0).map((secret) => Buffer.from(secret))
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

/** Masks the secrets in a header value (or each of several). */
export const scrubHeader = <A extends string | ReadonlyArray<string>>(value: A, secrets: ReadonlyArray<string>): A => {
  const one = (text: string) => secrets.reduce((out, secret) => (secret === "" ? out : out.split(secret).join("*".repeat(Buffer.byteLength(secret)))), text)
  return (typeof value === "string" ? one(value) : value.map(one)) as A
}
