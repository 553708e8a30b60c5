/**
 * The E2B fake's check of a create's `network` (E2BFake.ts), as e2b-dev/infra's API makes it
 * (packages/api/internal/handlers/sandbox_create.go: validateNetworkConfig, validateEgressRules,
 * validateNetworkRules, checkEnvdVersionRequirement; its tests in sandbox_create_test.go):
 *
 *   denyOut        every entry an IP address or CIDR ("invalid denied CIDR x")
 *   allowOut       addresses must be valid; a domain (`*.x` too) needs 0.0.0.0/0 in denyOut
 *   rules          header transforms, in this order:
 *                    - a team feature flag, off by default ("Network transform rules are not
 *                      available for your team.")
 *                    - the template's envd at least 0.5.13 ("…; template must be rebuilt…")
 *                    - at most 10 domains; each 1–128 characters and a DNS name (govalidator
 *                      IsDNSName: no `*.x` wildcard, no address)
 *                    - at most 1 transform per domain, 20 headers per transform, header names
 *                      HTTP tokens of at most 64 characters, values without control characters
 *                      and at most 2048 characters
 * Every refusal is a 400 with the API's message. Pure.
 */
import { isIP } from "node:net"

const MIN_ENVD_FOR_RULES = "0.5.13"
const MAX_RULE_DOMAINS = 10
const MAX_DOMAIN_LENGTH = 128
const MAX_TRANSFORMS = 1
const MAX_HEADERS = 20
const MAX_HEADER_NAME = 64
const MAX_HEADER_VALUE = 2048
const ALL_TRAFFIC = "0.0.0.0/0"

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
/** govalidator's rxDNSName: labels of letters, digits, '_' and '-', not starting with '-'. */
const DNS_NAME = /^([a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})(\.[a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})*[._]?$/

/** Negative, zero or positive as `a` is older than, the same as or newer than `b`. */
export const versionCompare = (a: string, b: string) => {
  const pa = a.split(/[.+-]/).map((n) => Number.parseInt(n, 10) || 0)
  const pb = b.split(/[.+-]/).map((n) => Number.parseInt(n, 10) || 0)
  for (let i = 0; i < 3; i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) - (pb[i] ?? 0)
  return 0
}

/** An address or a CIDR that names addresses (infra's IsSpecifiedIPOrCIDR). */
const isAddressOrCidr = (value: string) => {
  const [address, prefix, ...rest] = value.split("/")
  if (rest.length > 0 || address === undefined) return false
  const family = isIP(address)
  if (family === 0) return false
  if (prefix === undefined) return true
  if (!/^\d{1,3}$/.test(prefix)) return false
  return Number(prefix) <= (family === 4 ? 32 : 128)
}

/** Looks like an address (digits and dots, or a colon): then it must be a valid one, else it is a domain. */
const looksLikeAddress = (value: string) => value.includes("/") || value.includes(":") || /^[0-9.]+$/.test(value)

const isDnsName = (value: string) => value.replace(/\./g, "").length <= 255 && isIP(value) === 0 && DNS_NAME.test(value)

export interface TeamFeatures {
  /** NetworkTransformRulesFlag (LaunchDarkly, per team): off unless E2B enabled it. */
  networkTransformRules: boolean
}

/** Why E2B refuses this `network` (the 400's message), or undefined when it takes it. */
export const networkRefusal = (network: any, envdVersion: string, team: TeamFeatures): string | undefined => {
  if (network === undefined || network === null) return undefined
  if (typeof network !== "object") return "Error when parsing request: network must be an object"
  const denyOut: Array<unknown> = Array.isArray(network.denyOut) ? network.denyOut : []
  const allowOut: Array<unknown> = Array.isArray(network.allowOut) ? network.allowOut : []
  for (const entry of denyOut) {
    if (typeof entry !== "string" || !isAddressOrCidr(entry)) return `invalid denied CIDR ${String(entry)}`
  }
  let domains = 0
  for (const entry of allowOut) {
    if (typeof entry !== "string") return `invalid allowed address ${String(entry)}`
    if (looksLikeAddress(entry)) {
      if (!isAddressOrCidr(entry)) return `invalid allowed address ${entry}`
    } else domains++
  }
  if (domains > 0 && !denyOut.includes(ALL_TRAFFIC)) {
    return "When specifying allowed domains in allow out, you must include 'ALL_TRAFFIC' in deny out to block all other traffic."
  }
  const rules = network.rules
  if (rules === undefined || rules === null) return undefined
  if (!team.networkTransformRules) return "Network transform rules are not available for your team."
  if (versionCompare(envdVersion, MIN_ENVD_FOR_RULES) < 0) {
    return `network transform rules are not supported; template must be rebuilt. Template envd version is ${envdVersion}, must be at least ${MIN_ENVD_FOR_RULES}`
  }
  const entries = Object.entries(rules as Record<string, unknown>)
  if (entries.length > MAX_RULE_DOMAINS) return `Network rules can have at most ${MAX_RULE_DOMAINS} domains.`
  for (const [domain, domainRules] of entries) {
    if (domain.length === 0) return "Rule domain must not be empty."
    if (domain.length > MAX_DOMAIN_LENGTH) return `Rule domain "${domain}" exceeds maximum length of ${MAX_DOMAIN_LENGTH} characters.`
    if (!isDnsName(domain)) return `Rule domain "${domain}" is not a valid domain name.`
    const list: Array<any> = Array.isArray(domainRules) ? domainRules : []
    if (list.length > MAX_TRANSFORMS) return `Domain "${domain}" can have at most ${MAX_TRANSFORMS} transform rule.`
    for (const rule of list) {
      const headers: Record<string, unknown> = rule?.transform?.headers ?? {}
      if (Object.keys(headers).length > MAX_HEADERS) return `Domain "${domain}" can have at most ${MAX_HEADERS} headers per rule.`
      for (const [name, value] of Object.entries(headers)) {
        if (name.length === 0) return `Header name in rule for domain "${domain}" must not be empty.`
        if (!TOKEN.test(name)) return `Header name "${name}" in rule for domain "${domain}" must contain only valid HTTP token characters.`
        if (name.length > MAX_HEADER_NAME) {
          return `Header name "${name}" in rule for domain "${domain}" exceeds maximum length of ${MAX_HEADER_NAME} characters.`
        }
        // httpguts.ValidHeaderFieldValue: no control characters other than horizontal tab.
        if (typeof value !== "string" || /[\x00-\x08\x0a-\x1f\x7f]/.test(value)) {
          return `Value for header "${name}" in rule for domain "${domain}" contains invalid characters.`
        }
        if (value.length > MAX_HEADER_VALUE) {
          return `Value for header "${name}" in rule for domain "${domain}" exceeds maximum length of ${MAX_HEADER_VALUE} characters.`
        }
      }
    }
  }
  return undefined
}
