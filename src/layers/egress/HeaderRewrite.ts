/**
 * Headers across the proxy: hop-by-hop ones (the client's connection to us, ours to the upstream)
 * dropped both ways, the injected ones set on requests (replacing the client's own), `Host` set to
 * the authority the proxy checked (RFC 9112 §3.2.2: a proxy replaces it with the request target's),
 * and the secrets masked in response header names and values.
 */
import * as Redacted from "effect/Redacted"
import type { IncomingMessage } from "node:http"
import type * as EgressPolicy from "./EgressPolicy.js"
import * as HostPattern from "./HostPattern.js"
import { scrubHeader, scrubText } from "./SecretScrubber.js"

const HOP_BY_HOP = new Set([
  "connection",
  "proxy-connection",
  "keep-alive",
  "proxy-authorization",
  "proxy-authenticate",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade"
])

/** `Host` for the authority the proxy decided on: the port only when it is not the scheme's default. */
export const hostHeader = ({ host, port }: HostPattern.Authority, tls: boolean) =>
  port === (tls ? 443 : 80) ? HostPattern.formatHost(host) : HostPattern.formatAuthority({ host, port })

/** The request headers to send upstream: hop-by-hop ones dropped, `Host` the checked one, the injected ones set. */
export const forwardedHeaders = (
  req: IncomingMessage,
  rules: ReadonlyArray<EgressPolicy.HeaderRule>,
  target: HostPattern.Authority,
  tls: boolean
) => {
  const listed = new Set(String(req.headers.connection ?? "").toLowerCase().split(",").map((name) => name.trim()))
  const injected = new Set(rules.map((rule) => rule.header.toLowerCase()))
  const headers: Record<string, string | Array<string>> = {}
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || listed.has(name) || injected.has(name)) continue
    headers[name] = value
  }
  // Whatever the client wrote: it was checked against the target (intercepted) or is superseded by it (absolute URI).
  headers.host = hostHeader(target, tls)
  for (const rule of rules) headers[rule.header] = Redacted.value(rule.value)
  // An echo of the secret must come back plain for the scrubber to mask it.
  if (rules.length > 0) headers["accept-encoding"] = "identity"
  return headers
}

/** The response headers to pass on: hop-by-hop ones dropped, the secrets masked. */
export const responseHeaders = (res: IncomingMessage, secrets: ReadonlyArray<string>) => {
  const headers: Record<string, string | Array<string>> = {}
  for (const [name, value] of Object.entries(res.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name)) continue
    if (secrets.length === 0) headers[name] = value
    else headers[scrubText(name, secrets)] = scrubHeader(value, secrets)
  }
  return headers
}
