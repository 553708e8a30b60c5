/**
 * The egress policy: which hosts a computer may reach through the proxy, where some names point
 * (`--egress-resolve NAME=IP`), and which requests get a header whose value is a secret of the
 * server (`--egress-header 'PATTERN:Header-Name=ENV_VAR'`). Pure: built once at startup, then only
 * asked.
 *
 * Private destinations. A rule that covers a host through `*` or `*.parent` never leads to a
 * loopback, private, link-local (cloud metadata at 169.254.169.254), CGNAT, multicast or reserved
 * address: a name under `*.example.com` that resolves to 127.0.0.1 is denied, as is the address
 * itself under `*`. Such a destination is reached only when the user named it: a rule that is that
 * exact name or address, or a name pinned with `--egress-resolve`. This keeps DNS rebinding and
 * `*` from opening the server's own loopback services or its network to the computers. Which
 * addresses are private, in every spelling, is `AddressBlocklist.ts`'s.
 */
import * as Either from "effect/Either"
import * as Redacted from "effect/Redacted"
import { isIP } from "node:net"
import { isPublicAddress } from "./AddressBlocklist.js"
import * as HostPattern from "./HostPattern.js"

/** A header added to the requests to matching hosts; its value is a secret of the server. */
export interface HeaderRule {
  readonly pattern: HostPattern.HostPattern
  /** As written by the user (`Authorization`). */
  readonly header: string
  /** The server's environment variable the value came from: what messages and logs name. */
  readonly variable: string
  readonly value: Redacted.Redacted<string>
}

export interface EgressPolicy {
  readonly allow: ReadonlyArray<HostPattern.HostPattern>
  /** Canonical name → address. */
  readonly pins: ReadonlyMap<string, string>
  readonly headers: ReadonlyArray<HeaderRule>
}

export type Decision =
  | {
    readonly _tag: "Allowed"
    /** The allow rule that matched, as written canonically. */
    readonly rule: string
    /** The destination was named by the user (exact rule or pin): it may be a private address. */
    readonly named: boolean
    /** Its pinned address, if any. */
    readonly pinned: string | undefined
    /** The header rules that apply (interception for HTTPS when not empty). */
    readonly headers: ReadonlyArray<HeaderRule>
  }
  | { readonly _tag: "Denied"; readonly reason: string }

/** The header names a rule may not set: they frame the request, or belong to the proxy hop. */
const RESERVED_HEADERS = new Set([
  "host",
  "content-length",
  "transfer-encoding",
  "connection",
  "proxy-connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "proxy-authorization",
  "proxy-authenticate",
  "expect"
])
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/
const VARIABLE = /^[A-Za-z_][A-Za-z0-9_]*$/

/** `NAME=IP` → [canonical name, canonical address]. */
export const parsePin = (word: string): Either.Either<readonly [string, string], string> => {
  const at = word.indexOf("=")
  if (at <= 0) return Either.left(`expected NAME=IP, got '${word}'`)
  const name = HostPattern.canonicalHost(word.slice(0, at))
  if (Either.isLeft(name)) return Either.left(`${name.left} in '${word}'`)
  if (isIP(name.right) !== 0) return Either.left(`'${word}': the name is already an address`)
  const rawAddress = word.slice(at + 1).trim().replace(/^\[(.*)\]$/, "$1")
  if (isIP(rawAddress) === 0) return Either.left(`'${word}': '${word.slice(at + 1)}' is not an IP address`)
  const address = HostPattern.canonicalHost(rawAddress)
  return Either.map(address, (canonical) => [name.right, canonical] as const)
}

/** The parts of `PATTERN:Header-Name=ENV_VAR`, before the variable is read. */
export interface HeaderRuleSpec {
  readonly pattern: HostPattern.HostPattern
  readonly header: string
  readonly variable: string
}

/** Reads `PATTERN:Header-Name=ENV_VAR` (the header name is after the last ':' before '='). */
export const parseHeaderRule = (word: string): Either.Either<HeaderRuleSpec, string> => {
  const shape = `expected PATTERN:Header-Name=ENV_VAR (e.g. 'api.github.com:Authorization=GITHUB_AUTH'), got '${word}'`
  const equals = word.indexOf("=")
  if (equals < 0) return Either.left(shape)
  const left = word.slice(0, equals)
  const variable = word.slice(equals + 1).trim()
  const colon = left.lastIndexOf(":")
  if (colon <= 0) return Either.left(shape)
  const header = left.slice(colon + 1).trim()
  if (!TOKEN.test(header)) return Either.left(`'${header}' in '${word}' is not a header name`)
  if (RESERVED_HEADERS.has(header.toLowerCase())) {
    return Either.left(`'${word}': the proxy does not set '${header}' (it frames the request or belongs to the proxy)`)
  }
  if (!VARIABLE.test(variable)) {
    return Either.left(`'${word}': '${variable}' is not an environment variable name (the value is never written in the flag)`)
  }
  return Either.map(HostPattern.parse(left.slice(0, colon)), (pattern) => ({ pattern, header, variable }))
}

/** Why a secret cannot be a header value, or undefined. */
export const headerValueProblem = (value: string): string | undefined =>
  value.trim() === ""
    ? "is empty"
    : /[\r\n\0]/.test(value)
    ? "contains a line break or NUL, which cannot be sent in a header"
    : undefined

/** Builds the policy from the flags' words and the secrets read for the header rules. */
export const make = (input: {
  readonly allow: ReadonlyArray<string>
  readonly pins: ReadonlyArray<string>
  readonly headers: ReadonlyArray<{ readonly spec: string; readonly value: Redacted.Redacted<string> }>
}): Either.Either<EgressPolicy, string> => {
  const allow: Array<HostPattern.HostPattern> = []
  for (const word of input.allow) {
    const pattern = HostPattern.parse(word)
    if (Either.isLeft(pattern)) return Either.left(`--allow-host: ${pattern.left}`)
    if (!allow.some((known) => known.text === pattern.right.text)) allow.push(pattern.right)
  }
  const pins = new Map<string, string>()
  for (const word of input.pins) {
    const pin = parsePin(word)
    if (Either.isLeft(pin)) return Either.left(`--egress-resolve: ${pin.left}`)
    pins.set(pin.right[0], pin.right[1])
  }
  const headers: Array<HeaderRule> = []
  for (const { spec, value } of input.headers) {
    const rule = parseHeaderRule(spec)
    if (Either.isLeft(rule)) return Either.left(`--egress-header: ${rule.left}`)
    const problem = headerValueProblem(Redacted.value(value))
    if (problem !== undefined) return Either.left(`--egress-header: the value of ${rule.right.variable} ${problem}`)
    headers.push({ ...rule.right, value })
  }
  return Either.right({ allow, pins, headers })
}

/** What to tell a computer whose request was denied: the flag that would allow it. */
export const suggestion = ({ host, port }: HostPattern.Authority): string => {
  const exact = `--allow-host ${HostPattern.formatHost(host)}`
  const parts = host.split(".")
  const parent = isIP(host) === 0 && parts.length > 2 ? ` (or --allow-host '*.${parts.slice(1).join(".")}' for its neighbours)` : ""
  const portNote = port === 80 || port === 443 ? "" : `; ${exact}:${port} allows only this port`
  return `${exact}${parent}${portNote}`
}

/** Decides by name: is `host:port` allowed, by which rule, with which headers. */
export const decide = (policy: EgressPolicy, target: HostPattern.Authority): Decision => {
  const matching = policy.allow.filter((pattern) => HostPattern.matches(pattern, target))
  if (matching.length === 0) {
    return {
      _tag: "Denied",
      reason: `${HostPattern.formatAuthority(target)} is not on the egress allowlist; to allow it, start kilntainers with ${
        suggestion(target)
      }`
    }
  }
  const exact = matching.find((pattern) => HostPattern.namesExactly(pattern, target.host))
  const pinned = policy.pins.get(target.host)
  return {
    _tag: "Allowed",
    rule: (exact ?? matching[0]!).text,
    named: exact !== undefined || pinned !== undefined,
    pinned,
    headers: policy.headers.filter((rule) => HostPattern.matches(rule.pattern, target))
  }
}

/** Whether an address is public (`AddressBlocklist.ts`). */
export { isPublicAddress }

/**
 * Whether the proxy may connect to `address` for this allowed decision: always when the user named
 * the destination, else only when it is public. Left: the denial to send.
 */
export const checkAddress = (
  decision: Extract<Decision, { readonly _tag: "Allowed" }>,
  target: HostPattern.Authority,
  address: string
): Either.Either<string, string> =>
  decision.named || isPublicAddress(address)
    ? Either.right(address)
    : Either.left(
      `${HostPattern.formatAuthority(target)} is allowed by '${decision.rule}' but ${
        target.host === address ? "is" : `resolves to ${address}, which is`
      } not a public address; a private or loopback destination must be named exactly (--allow-host ${
        HostPattern.formatHost(target.host)
      })${isIP(target.host) === 0 ? " or pinned (--egress-resolve NAME=IP)" : ""}`
    )
