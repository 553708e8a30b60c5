/**
 * Where an injected credential (`--egress-header`) may go: only to the host it was configured for,
 * only over TLS. The proxy asks this module before each request that would carry one.
 *
 * - Over TLS (an intercepted CONNECT): the CONNECT target, the TLS server name the client sent
 *   (SNI) and the request's own authority — its Host header, and the authority of an absolute
 *   request target (`GET https://host/…`) — must all name one host and port, compared after
 *   normalisation (case, trailing dot, IDN to punycode, address spellings, the default port 443).
 *   The policy matched the rule against the CONNECT target, so all of them name the rule's host.
 *   A mismatch is a 421 Misdirected Request that says what mismatched; nothing goes upstream. Every
 *   request on a kept-alive connection is checked again. HTTP/2 is never negotiated (the proxy
 *   offers only `http/1.1` in ALPN), so there is no `:authority` to check.
 * - Over plain HTTP: a request to a host that has a header rule is refused (403), never forwarded,
 *   with or without the credential — an `http://` URL or an https→http redirect to that host is a
 *   mistake the client should see, not a request that silently loses its authentication.
 */
import * as Either from "effect/Either"
import { isIP } from "node:net"
import type * as EgressPolicy from "./EgressPolicy.js"
import * as HostPattern from "./HostPattern.js"

/** Why a request that would carry a credential is not forwarded: the status and its words. */
export interface Refusal {
  readonly status: 400 | 421
  readonly message: string
}

const cut = (text: string, most: number) => (text.length > most ? `${text.slice(0, most)}…` : text)

/** What the client sent, as it may be shown back: quoted, at most 200 characters. */
const quote = (text: string) => JSON.stringify(cut(text, 200))

/** A request the proxy cannot read: a 400 whose words (which may quote the client) stay short. */
const unreadable = (message: string): Refusal => ({ status: 400, message: cut(message, 400) })

const same = (a: HostPattern.Authority, b: HostPattern.Authority) => a.host === b.host && a.port === b.port

/** The refusal of a plain-HTTP request to a host with header rules, or undefined when it may go. */
export const plainRefusal = (target: HostPattern.Authority, headers: ReadonlyArray<EgressPolicy.HeaderRule>): string | undefined => {
  if (headers.length === 0) return undefined
  const names = [...new Set(headers.map((rule) => rule.header))].join(", ")
  return `${HostPattern.formatAuthority(target)} has an --egress-header rule (${names}): its credential is sent only over HTTPS, ` +
    `so plain-HTTP requests to it are refused; use https://${HostPattern.formatHost(target.host)}`
}

export interface InterceptedRequest {
  /** The CONNECT target the policy decided on. */
  readonly target: HostPattern.Authority
  /** The server name of the client's TLS handshake (Node: `false` when it sent none). */
  readonly sni: string | false | null | undefined
  /** The request target as received. */
  readonly url: string
  /** The Host header, if any (Node keeps the first of several). */
  readonly host: string | undefined
}

const misdirected = (target: HostPattern.Authority, what: string): Refusal => ({
  status: 421,
  message: `${what}, but this connection is to ${HostPattern.formatAuthority(target)} (CONNECT), which has an --egress-header rule: ` +
    `its credential goes only to requests whose CONNECT target, TLS server name (SNI) and Host all name that host; nothing was sent`
})

const checkSni = (request: InterceptedRequest): Refusal | undefined => {
  const { sni, target } = request
  if (sni === undefined || sni === null || sni === false || sni === "") {
    // Clients send no SNI for an address (RFC 6066), always for a name.
    return isIP(target.host) !== 0 ? undefined : misdirected(target, "the TLS handshake named no server (SNI)")
  }
  const named = HostPattern.canonicalHost(sni)
  return Either.isRight(named) && named.right === target.host ? undefined : misdirected(target, `the TLS server name (SNI) is ${quote(sni)}`)
}

/** The origin-form path of the request target; Left: why it is refused. */
const checkTarget = (request: InterceptedRequest): Either.Either<string, Refusal> => {
  const { target, url } = request
  if (url.startsWith("/") || url === "*") return Either.right(url)
  const absolute = /^([a-z][a-z0-9+.-]*):\/\/([^/?#]*)(.*)$/is.exec(url)
  if (absolute === null) return Either.left(unreadable(`the request target ${quote(url)} is neither a path ('/…') nor an https:// URL`))
  const [, scheme = "", authority = "", rest = ""] = absolute
  if (scheme.toLowerCase() !== "https") return Either.left(misdirected(target, `the request target ${quote(url)} is not an https:// URL`))
  if (authority.includes("@")) return Either.left(unreadable("credentials in the URL are not proxied"))
  const named = HostPattern.parseAuthority(authority, 443)
  if (Either.isLeft(named)) return Either.left(unreadable(`cannot tell the host of the request target: ${named.left}`))
  if (!same(named.right, target)) return Either.left(misdirected(target, `the request target names ${HostPattern.formatAuthority(named.right)}`))
  // What follows the authority starts with '/' or '?', or is empty.
  return Either.right(rest.startsWith("/") ? rest : `/${rest}`)
}

const checkHost = (request: InterceptedRequest): Refusal | undefined => {
  const { host, target } = request
  // No Host at all names nothing else: the proxy sends the checked one.
  if (host === undefined) return undefined
  const named = HostPattern.parseAuthority(host, 443)
  if (Either.isLeft(named)) return unreadable(`cannot tell the host of the Host header: ${named.left}`)
  return same(named.right, target) ? undefined : misdirected(target, `the Host header names ${HostPattern.formatAuthority(named.right)}`)
}

/**
 * Checks one request on an intercepted connection before the credential is added: Right is the
 * path to send upstream (origin-form), Left the refusal to answer instead.
 */
export const checkIntercepted = (request: InterceptedRequest): Either.Either<string, Refusal> => {
  const sni = checkSni(request)
  if (sni !== undefined) return Either.left(sni)
  return Either.flatMap(checkTarget(request), (path) => {
    const host = checkHost(request)
    return host === undefined ? Either.right(path) : Either.left(host)
  })
}
