/**
 * Headers across the proxy: hop-by-hop ones (the client's connection to us, ours to the upstream)
 * dropped both ways, the injected ones set on requests (replacing the client's own), and the
 * secrets masked in response headers.
 */
import * as Redacted from "effect/Redacted"
import type { IncomingMessage } from "node:http"
import type * as EgressPolicy from "./EgressPolicy.js"
import * as HostPattern from "./HostPattern.js"
import { scrubHeader } from "./SecretScrubber.js"

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

/** The request headers to send upstream: hop-by-hop ones dropped, the injected ones set. */
export const forwardedHeaders = (req: IncomingMessage, rules: ReadonlyArray<EgressPolicy.HeaderRule>, target: HostPattern.Authority) => {
  const listed = new Set(String(req.headers.connection ?? "").toLowerCase().split(",").map((name) => name.trim()))
  const injected = new Set(rules.map((rule) => rule.header.toLowerCase()))
  const headers: Record<string, string | Array<string>> = {}
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || listed.has(name) || injected.has(name)) continue
    headers[name] = value
  }
  headers.host ??= HostPattern.formatAuthority(target)
  for (const rule of rules) headers[rule.header] = Redacted.value(rule.value)
  // An echo of the secret must come back plain for the scrubber to mask it.
  if (rules.length > 0) headers["accept-encoding"] = "identity"
  return headers
}

export const responseHeaders = (res: IncomingMessage, secrets: ReadonlyArray<string>) => {
  const headers: Record<string, string | Array<string>> = {}
  for (const [name, value] of Object.entries(res.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name)) continue
    headers[name] = secrets.length === 0 ? value : scrubHeader(value, secrets)
  }
  return headers
}
