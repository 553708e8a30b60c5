/**
 * Host patterns of the egress allowlist (`--allow-host`, the first part of `--egress-header`):
 *
 *   example.com         that name only (any port)
 *   *.example.com       every name below it, at any depth (a.example.com, a.b.example.com), not
 *                       example.com itself: allow both when both are meant
 *   *                   every host, names and addresses alike
 *   10.1.2.3, [fd00::1] that address only
 *   any of them :PORT   only that port (`example.com:8443`, `*:443`)
 *
 * Names are compared the way the URL standard writes them: lower case, without a trailing dot,
 * international names in their ASCII (punycode) form and addresses in their canonical form, so
 * `0x7f.1`, `2130706433` and `127.0.0.1` are one host and none of them matches a name pattern.
 */
import * as Either from "effect/Either"
import { isIP } from "node:net"

/** What part of the name space a pattern covers. */
export type HostMatch =
  | { readonly _tag: "Any" }
  | { readonly _tag: "Exact"; readonly host: string }
  | { readonly _tag: "Subdomains"; readonly suffix: string }

export interface HostPattern {
  readonly match: HostMatch
  /** The only port it allows; undefined: any. */
  readonly port: number | undefined
  /** The pattern as written canonically (`*.example.com:443`): what messages and the audit log show. */
  readonly text: string
}

/** A host and port as a proxy request names them, canonical. */
export interface Authority {
  readonly host: string
  readonly port: number
}

const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/
const MAX_NAME = 253

/** `host` written as a URL writes it; IPv6 addresses without brackets. Left: why it is no host. */
export const canonicalHost = (raw: string): Either.Either<string, string> => {
  const trimmed = raw.trim()
  if (trimmed === "") return Either.left("an empty host")
  let host: string
  try {
    host = new URL(`http://${trimmed.includes(":") && !trimmed.startsWith("[") ? `[${trimmed}]` : trimmed}/`).hostname
  } catch {
    return Either.left(`'${raw}' is not a host name or address`)
  }
  if (host.startsWith("[")) return Either.right(host.slice(1, -1))
  if (host.endsWith(".")) host = host.slice(0, -1)
  if (isIP(host) !== 0) return Either.right(host)
  if (host.length > MAX_NAME || !host.split(".").every((label) => LABEL.test(label))) {
    return Either.left(`'${raw}' is not a host name or address`)
  }
  return Either.right(host)
}

/** How a host is written next to a port: brackets around IPv6 addresses. */
export const formatHost = (host: string) => (isIP(host) === 6 ? `[${host}]` : host)

/** `host:port`, with brackets around IPv6 addresses. */
export const formatAuthority = ({ host, port }: Authority) => `${formatHost(host)}:${port}`

const parsePort = (text: string): number | undefined => {
  if (!/^\d{1,5}$/.test(text)) return undefined
  const port = Number(text)
  return port >= 1 && port <= 65535 ? port : undefined
}

/** Splits `host[:port]` (`[v6]:port`); the port is undefined when not written. */
const splitPort = (text: string): Either.Either<{ readonly host: string; readonly port: string | undefined }, string> => {
  if (text.startsWith("[")) {
    const close = text.indexOf("]")
    if (close < 0) return Either.left(`'${text}' has an unclosed '['`)
    const rest = text.slice(close + 1)
    if (rest !== "" && !rest.startsWith(":")) return Either.left(`'${text}' has text after the address`)
    return Either.right({ host: text.slice(1, close), port: rest === "" ? undefined : rest.slice(1) })
  }
  const colons = text.split(":").length - 1
  if (colons === 0) return Either.right({ host: text, port: undefined })
  if (colons === 1) {
    const at = text.indexOf(":")
    return Either.right({ host: text.slice(0, at), port: text.slice(at + 1) })
  }
  // A bare IPv6 address: no port unless bracketed.
  return Either.right({ host: text, port: undefined })
}

/** Reads a pattern (see the module's header). Left: why it is not one, in words for a person. */
export const parse = (raw: string): Either.Either<HostPattern, string> => {
  const text = raw.trim()
  if (text === "") return Either.left("an empty host pattern")
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(text) || text.includes("/")) {
    return Either.left(`'${raw}' is a URL or a path; write only the host, e.g. 'example.com' or '*.example.com:443'`)
  }
  return Either.flatMap(splitPort(text), ({ host, port: portText }) => {
    const port = portText === undefined ? undefined : parsePort(portText)
    if (portText !== undefined && port === undefined) return Either.left(`'${raw}' has an invalid port '${portText}'`)
    const suffix = port === undefined ? "" : `:${port}`
    if (host === "*") return Either.right({ match: { _tag: "Any" }, port, text: `*${suffix}` })
    if (host.startsWith("*.")) {
      return Either.flatMap(canonicalHost(host.slice(2)), (rest): Either.Either<HostPattern, string> => {
        if (isIP(rest) !== 0) return Either.left(`'${raw}': a wildcard applies to names, not addresses`)
        return Either.right({ match: { _tag: "Subdomains", suffix: rest }, port, text: `*.${rest}${suffix}` })
      })
    }
    if (host.includes("*")) {
      return Either.left(`'${raw}': '*' is allowed only alone or as the first label ('*.example.com')`)
    }
    return Either.map(canonicalHost(host), (exact): HostPattern => ({
      match: { _tag: "Exact", host: exact },
      port,
      text: `${formatHost(exact)}${suffix}`
    }))
  })
}

/** Whether the pattern covers this canonical host and port. */
export const matches = (pattern: HostPattern, { host, port }: Authority): boolean => {
  if (pattern.port !== undefined && pattern.port !== port) return false
  switch (pattern.match._tag) {
    case "Any":
      return true
    case "Exact":
      return pattern.match.host === host
    case "Subdomains":
      return isIP(host) === 0 && host.endsWith(`.${pattern.match.suffix}`)
  }
}

/** The pattern names this host itself (not through `*` or `*.parent`): what reaching a private address needs. */
export const namesExactly = (pattern: HostPattern, host: string): boolean =>
  pattern.match._tag === "Exact" && pattern.match.host === host

/**
 * Reads the authority of a proxy request: `host:port` (CONNECT) or the host of a URL or a Host
 * header, with `defaultPort` when none is written. Left: why it is unusable.
 */
export const parseAuthority = (raw: string, defaultPort: number | undefined): Either.Either<Authority, string> =>
  Either.flatMap(splitPort(raw.trim()), ({ host, port: portText }) => {
    const port = portText === undefined ? defaultPort : parsePort(portText)
    if (port === undefined) return Either.left(portText === undefined ? `'${raw}' has no port` : `'${raw}' has an invalid port`)
    if (host.includes("*")) return Either.left(`'${raw}' is not a host`)
    return Either.map(canonicalHost(host), (canonical) => ({ host: canonical, port }))
  })
