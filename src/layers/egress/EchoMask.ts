/**
 * What a computer gets back from an upstream that was sent a credential: the status phrase, every
 * header (names and values) and the body with the credential's echoes masked (`SecretScrubber.ts`).
 *
 * The proxy asks such upstreams for `Accept-Encoding: identity`. One that compresses anyway has its
 * body decoded here (gzip, deflate, br; a stack of up to four) and passed on plain, without
 * `Content-Encoding` and `Content-Length`, so that the masking sees the bytes; a coding the proxy
 * cannot decode (zstd, compress, anything else) is refused with a 502 rather than passed on
 * unmasked. Responses without a body (HEAD, 1xx, 204, 304) keep their headers as sent.
 */
import * as Either from "effect/Either"
import type { IncomingMessage } from "node:http"
import type { Transform } from "node:stream"
import { createBrotliDecompress, createGunzip, createInflate } from "node:zlib"
import { responseHeaders } from "./HeaderRewrite.js"
import { scrubText, SecretScrubber } from "./SecretScrubber.js"

const DECODERS: Readonly<Record<string, () => Transform>> = {
  gzip: createGunzip,
  "x-gzip": createGunzip,
  deflate: createInflate,
  br: createBrotliDecompress
}
const MAX_CODINGS = 4

export interface MaskedResponse {
  readonly statusMessage: string | undefined
  readonly headers: Record<string, string | Array<string>>
  /** What the body goes through, in order (decoders, then the scrubber); empty when nothing is masked. */
  readonly transforms: ReadonlyArray<Transform>
}

const hasBody = (method: string, status: number) =>
  method !== "HEAD" && status >= 200 && status !== 204 && status !== 304

/** How to pass `response` on with `secrets` masked; Left: why it cannot be (the 502's words). */
export const maskResponse = (
  response: IncomingMessage,
  method: string,
  secrets: ReadonlyArray<string>
): Either.Either<MaskedResponse, string> => {
  const headers = responseHeaders(response, secrets)
  if (secrets.length === 0) return Either.right({ statusMessage: response.statusMessage, headers, transforms: [] })
  const statusMessage = response.statusMessage === undefined ? undefined : scrubText(response.statusMessage, secrets)
  const scrubber = () => new SecretScrubber(secrets)
  if (!hasBody(method, response.statusCode ?? 200)) return Either.right({ statusMessage, headers, transforms: [scrubber()] })
  const declared = response.headers["content-encoding"]
  const codings = (declared ?? "").split(",").map((coding) => coding.trim().toLowerCase()).filter((coding) => coding !== "" && coding !== "identity")
  if (codings.length === 0) return Either.right({ statusMessage, headers, transforms: [scrubber()] })
  const unknown = codings.find((coding) => DECODERS[coding] === undefined)
  if (unknown !== undefined || codings.length > MAX_CODINGS) {
    return Either.left(
      `the upstream answered with Content-Encoding '${declared}', which the proxy cannot decode to mask the injected credential's echoes ` +
        `(it asked for identity; gzip, deflate and br are decoded)`
    )
  }
  const plain = Object.fromEntries(Object.entries(headers).filter(([name]) => name !== "content-encoding" && name !== "content-length"))
  // Codings are listed in the order they were applied: undone last first.
  const decoders = codings.reverse().map((coding) => DECODERS[coding]!())
  return Either.right({ statusMessage, headers: plain, transforms: [...decoders, scrubber()] })
}
