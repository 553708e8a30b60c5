/**
 * The egress allowlist on the providers that enforce one themselves, so no proxy of ours is needed:
 *
 * - **E2B** (`network` of `Sandbox.create`): `allowOut` takes names (`*.x` too), addresses and
 *   CIDRs, with `denyOut: ["0.0.0.0/0"]` so that nothing else is allowed; a name's rule applies to
 *   ports 80 (Host header) and 443 (SNI) only. `rules[name].transform.headers` adds a header to the
 *   requests to that name (E2B's proxy does it: the value goes to E2B's API, never into the sandbox).
 *   E2B's API takes header rules for exact names only (no `*.x`, no address), at most 10 of them,
 *   20 headers a name, names of at most 64 characters and values of at most 2048 (e2b-dev/infra
 *   `sandbox_create.go`); what it would refuse with a 400 is refused here at startup. It also needs
 *   a feature E2B enables per team and a template whose envd is 0.5.13 or newer, which only the
 *   create can tell (E2BError.headerRulesRefusal says so in the flag's words).
 * - **Modal** (`outboundDomainAllowlist` / `outboundCidrAllowlist` of `sandboxes.create`, an
 *   ALLOWLIST network access: only what is listed): names (`*.x` too) and addresses as /32 or /128.
 *
 * What a provider cannot carry is refused with the reason, never approximated open: a `:PORT`
 * restriction (neither filters by port), `--egress-resolve` pins, `--egress-ca-file` (their proxies
 * do not take our CAs), and on Modal `--egress-header` (its header replacement is experimental and
 * takes a Modal Secret, not a value). `*` alone restricts nothing: the provider's own network
 * settings apply (a warning at startup says so).
 */
import * as Either from "effect/Either"
import * as Redacted from "effect/Redacted"
import { isIP } from "node:net"
import type { EgressSettings } from "../../services/Settings.js"
import * as EgressPolicy from "./EgressPolicy.js"
import type * as HostPattern from "./HostPattern.js"

/** E2B's `network` option (its SDK's `SandboxNetworkOpts`, static form). */
export interface E2BNetwork {
  readonly allowOut: ReadonlyArray<string>
  readonly denyOut: ReadonlyArray<string>
  readonly rules?: Readonly<Record<string, ReadonlyArray<{ readonly transform: { readonly headers: Readonly<Record<string, string>> } }>>> | undefined
}

/** Modal's allowlist parameters. */
export interface ModalOutbound {
  readonly domains: ReadonlyArray<string>
  readonly cidrs: ReadonlyArray<string>
}

/** All traffic, as E2B's SDK spells it (`allTraffic`). */
export const ALL_TRAFFIC = "0.0.0.0/0"

/** E2B's limits on header rules (e2b-dev/infra sandbox_create.go). */
export const E2B_RULE_LIMITS = { names: 10, headersPerName: 20, headerName: 64, headerValue: 2048 } as const

const policyOf = (settings: EgressSettings) =>
  EgressPolicy.make({
    allow: settings.allowHosts,
    pins: settings.resolve,
    headers: settings.headers.map((header) => ({ spec: header.rule, value: header.value }))
  })

/** The allowlist entry of a pattern in the providers' words. */
const entryOf = (pattern: HostPattern.HostPattern) =>
  pattern.match._tag === "Subdomains" ? `*.${pattern.match.suffix}` : pattern.match._tag === "Exact" ? pattern.match.host : "*"

const common = (provider: string, settings: EgressSettings, policy: EgressPolicy.EgressPolicy): string | undefined => {
  if (settings.resolve.length > 0) return `--egress-resolve cannot be carried by ${provider}: its egress rules do not pin names to addresses`
  if (settings.upstreamCaFiles.length > 0) return `--egress-ca-file cannot be carried by ${provider}: its egress proxy does not take our CAs`
  const ported = policy.allow.find((pattern) => pattern.port !== undefined)
  if (ported !== undefined) return `--allow-host ${ported.text}: ${provider}'s egress rules cannot restrict a port; drop the :PORT`
  return undefined
}

/** Whether the allowlist restricts nothing (`*`, with nothing else that needs our proxy). */
const everything = (policy: EgressPolicy.EgressPolicy) => policy.allow.some((pattern) => pattern.match._tag === "Any" && pattern.port === undefined)

/** E2B's `network` for the settings; undefined when nothing is restricted; a reason when it cannot be carried. */
export const e2bNetwork = (settings: EgressSettings): Either.Either<E2BNetwork | undefined, string> => {
  if (settings.allowHosts.length === 0) return Either.right(undefined)
  const parsed = policyOf(settings)
  if (Either.isLeft(parsed)) return Either.left(parsed.left)
  const policy = parsed.right
  const refused = common("E2B", settings, policy)
  if (refused !== undefined) return Either.left(refused)
  const rules: Record<string, Array<{ transform: { headers: Record<string, string> } }>> = {}
  const limits = E2B_RULE_LIMITS
  for (const rule of policy.headers) {
    const { match, text } = rule.pattern
    if (match._tag !== "Exact") {
      return Either.left(`--egress-header ${text}: E2B's header rules take exact names (its API refuses *.x and *): list each name`)
    }
    if (isIP(match.host) !== 0) return Either.left(`--egress-header ${text}: E2B's header rules take names, not addresses`)
    if (rule.pattern.port !== undefined && rule.pattern.port !== 443 && rule.pattern.port !== 80) {
      return Either.left(`--egress-header ${text}: E2B's header rules apply to ports 80 and 443 only`)
    }
    if (rule.header.length > limits.headerName) {
      return Either.left(`--egress-header ${text}: E2B takes header names of at most ${limits.headerName} characters`)
    }
    if (Redacted.value(rule.value).length > limits.headerValue) {
      return Either.left(`--egress-header ${text}:${rule.header}: E2B takes header values of at most ${limits.headerValue} characters`)
    }
    const existing = rules[match.host]?.[0]?.transform.headers ?? {}
    rules[match.host] = [{ transform: { headers: { ...existing, [rule.header]: Redacted.value(rule.value) } } }]
    if (Object.keys(rules[match.host]![0]!.transform.headers).length > limits.headersPerName) {
      return Either.left(`--egress-header ${text}: E2B takes at most ${limits.headersPerName} headers for one name`)
    }
  }
  const names = Object.keys(rules).length
  if (names > limits.names) return Either.left(`--egress-header: E2B takes header rules for at most ${limits.names} names, got ${names}`)
  const hasRules = names > 0
  if (everything(policy)) return Either.right(hasRules ? { allowOut: [ALL_TRAFFIC], denyOut: [], rules } : undefined)
  return Either.right({
    allowOut: [...new Set(policy.allow.map(entryOf))],
    denyOut: [ALL_TRAFFIC],
    ...(hasRules ? { rules } : {})
  })
}

/** Modal's allowlist for the settings; undefined when nothing is restricted; a reason when it cannot be carried. */
export const modalOutbound = (settings: EgressSettings): Either.Either<ModalOutbound | undefined, string> => {
  if (settings.allowHosts.length === 0) return Either.right(undefined)
  const parsed = policyOf(settings)
  if (Either.isLeft(parsed)) return Either.left(parsed.left)
  const policy = parsed.right
  const refused = common("Modal", settings, policy)
  if (refused !== undefined) return Either.left(refused)
  if (policy.headers.length > 0) {
    return Either.left("--egress-header cannot be carried by Modal: its outbound header replacement is experimental and takes a Modal Secret, not a value")
  }
  if (everything(policy)) return Either.right(undefined)
  const domains: Array<string> = []
  const cidrs: Array<string> = []
  for (const pattern of policy.allow) {
    const entry = entryOf(pattern)
    const family = isIP(entry)
    if (family === 4) cidrs.push(`${entry}/32`)
    else if (family === 6) cidrs.push(`${entry}/128`)
    else domains.push(entry)
  }
  return Either.right({ domains: [...new Set(domains)], cidrs: [...new Set(cidrs)] })
}
