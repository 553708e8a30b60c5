import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import type { HttpApp } from "@effect/platform"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import { createHash, timingSafeEqual } from "node:crypto"

/** RFC 6750 `b64token`: what a bearer token may be made of. */
const b64token = /^[A-Za-z0-9\-._~+/]+=*$/

/**
 * Checks a configured token: refused when empty or blank (after trimming any Unicode white space),
 * or when it has characters a bearer token cannot carry, since no client could then present it.
 */
export const validateToken = (token: string, source: string): Either.Either<string, string> => {
  if (token.replace(/[\s\u180e\u200b-\u200d\u2060\ufeff]+/gu, "") === "") {
    return Either.left(
      `${source} is empty or blank: no request could be told apart by it. Set a long random token (for example ` +
        `\`openssl rand -hex 32\`), or leave it unset on 127.0.0.1`
    )
  }
  if (!b64token.test(token)) {
    return Either.left(
      `${source} has characters a bearer token cannot carry: use only A-Z, a-z, 0-9, '-', '.', '_', '~', '+', '/' ` +
        `and trailing '=' (RFC 6750 b64token), with no spaces`
    )
  }
  return Either.right(token)
}

/** The token of an `Authorization: Bearer <token>` header: the scheme (any case), one space, a b64token, nothing else. */
export const bearerToken = (header: string | undefined): Option.Option<string> => {
  if (header === undefined || header.length < 8 || header.slice(0, 7).toLowerCase() !== "bearer ") return Option.none()
  const token = header.slice(7)
  return b64token.test(token) ? Option.some(token) : Option.none()
}

const digest = (value: string) => createHash("sha256").update(value, "utf8").digest()

/** Whether the header carries the expected token, compared in constant time (hashing first makes the lengths equal). */
export const tokenMatches = (expected: string, header: string | undefined): boolean => {
  const presented = bearerToken(header)
  const same = timingSafeEqual(digest(expected), digest(Option.getOrElse(presented, () => "")))
  return same && Option.isSome(presented)
}

const unauthorized = HttpServerResponse.unsafeJson({ error: "unauthorized" }, {
  status: 401,
  headers: { "www-authenticate": "Bearer realm=\"kilntainers\"" }
})

/** Middleware: requests without the bearer token get 401 and never reach the app. */
export const middleware = (token: string) => <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R> =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
    tokenMatches(token, request.headers.authorization) ? app : Effect.succeed(unauthorized))
