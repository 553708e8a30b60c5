/**
 * Bearer authentication of `/mcp` and the principal it establishes: the name of the token a client
 * presented. Principals are what the HTTP server tells clients apart by (sessions and request
 * memory are capped per principal), so each client that must not be able to crowd out the others
 * gets a token of its own (`--auth-principal NAME=VARIABLE`).
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import type { HttpApp } from "@effect/platform"
import * as Context from "effect/Context"
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

/** The principal of the current HTTP request: who presented which token (`anonymous` without auth). */
export class Principal extends Context.Tag("kilntainers/mcp/Principal")<Principal, string>() {}

/** The principal of every request to a server without tokens. */
export const anonymous = "anonymous"

/** The principal of `--auth-token`. */
export const defaultPrincipal = "default"

/** A principal's name and its token. */
export interface PrincipalToken {
  readonly principal: string
  readonly token: string
}

/** What a principal may be called: it shows in logs and error messages. */
export const principalName = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

/**
 * The principal whose token the header carries. Every token is compared, in constant time, whether
 * or not an earlier one matched: how long the check takes says nothing about which token is close.
 */
export const authenticate = (tokens: ReadonlyArray<PrincipalToken>, header: string | undefined): Option.Option<string> => {
  const presented = bearerToken(header)
  const presentedDigest = digest(Option.getOrElse(presented, () => ""))
  let found: string | undefined = undefined
  for (const entry of tokens) {
    if (timingSafeEqual(digest(entry.token), presentedDigest) && found === undefined) found = entry.principal
  }
  return Option.isSome(presented) ? Option.fromNullable(found) : Option.none()
}

const unauthorized = HttpServerResponse.unsafeJson({ error: "unauthorized" }, {
  status: 401,
  headers: { "www-authenticate": "Bearer realm=\"kilntainers\"" }
})

/** Middleware: requests without one of the tokens get 401 and never reach the app, which learns the principal. */
export const middleware = (tokens: ReadonlyArray<PrincipalToken>) =>
<E, R>(app: HttpApp.Default<E, R | Principal>): HttpApp.Default<E, Exclude<R, Principal>> =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
    Option.match(authenticate(tokens, request.headers.authorization), {
      onNone: () => Effect.succeed(unauthorized),
      onSome: (principal) => Effect.provideService(app, Principal, principal)
    }))

/** For a server without tokens (loopback, or behind an authenticating proxy): every request is `anonymous`. */
export const unauthenticated = <E, R>(app: HttpApp.Default<E, R | Principal>): HttpApp.Default<E, Exclude<R, Principal>> =>
  Effect.provideService(app, Principal, anonymous)
