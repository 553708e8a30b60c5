/**
 * The egress allowlist on the providers that enforce one themselves, so no proxy of ours is needed:
 *
 * - **E2B** (`network` of `Sandbox.create`): `allowOut` takes names (`*.x` too), addresses and
 *   CIDRs, with `denyOut: ["0.0.0.0/0"]` so that nothing else is allowed; a name's rule applies to
 *   ports 80 (Host header) and 443 (SNI) only. `rules[name].transform.headers` adds a header to the
 *   requests to that name (E2B's proxy does it: the value goes to E2B's API, never into the sandbox).
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
  for (const rule of policy.headers) {
    if (rule.pattern.match._tag === "Any") return Either.left(`--egress-header ${rule.pattern.text}: E2B's header rules need a name or *.name, not *`)
    if (rule.pattern.port !== undefined && rule.pattern.port !== 443 && rule.pattern.port !== 80) {
      return Either.left(`--egress-header ${rule.pattern.text}: E2B's header rules apply to ports 80 and 443 only`)
    }
    const key = entryOf(rule.pattern)
    const existing = rules[key]?.[0]?.transform.headers ?? {}
    rules[key] = [{ transform: { headers: { ...existing, [rule.header]: Redacted.value(rule.value) } } }]
  }
  const hasRules = Object.keys(rules).length > 0
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
