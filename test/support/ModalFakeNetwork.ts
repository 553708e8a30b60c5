/**
 * The network of a Modal fake sandbox (ModalFake.ts): what `definition.networkAccess` asks for
 * (the SDK's `buildOutboundNetworkAccess`: OPEN 1, BLOCKED 2, ALLOWLIST 3 with `allowedCidrs` and
 * `allowedDomains`), what Modal refuses in it, and what the sandbox gets.
 *
 * Refused with INVALID_ARGUMENT, as Modal answers: an allowlist CIDR that is not an address with a
 * prefix length ("Invalid CIDR: …"), a domain that is not a name or `*.name` ("Invalid domain: …").
 * Given: V1 sandboxes get their policy (Modal documents `block_network` and the allowlists for
 * them); V2 sandboxes do not (the SDK's `experimentalCreate` lists no network policy among their
 * features), so they get the host's network, the worst a client could meet. Pure. What Modal takes as
 * a CIDR or a domain is the rule ModalSdk checks before a call (one reading of Modal's documentation).
 */
import { isCidr, isDomain } from "../../src/layers/backends/modal/ModalSdk.js"

export const NETWORK_ACCESS = { OPEN: 1, BLOCKED: 2, ALLOWLIST: 3 } as const

export interface AppliedNetwork {
  /** What was asked for (1 OPEN, 2 BLOCKED, 3 ALLOWLIST; 0 when unset). */
  readonly asked: number
  readonly cidrs: ReadonlyArray<string>
  readonly domains: ReadonlyArray<string>
  /** Whether Modal applies the policy to this kind of sandbox. */
  readonly applied: boolean
  /** The sandbox shares this host's network (an open network, or a policy not applied). */
  readonly hostNetwork: boolean
}

/** Modal's refusal of a network access, or undefined. */
export const networkRefusal = (access: any): string | undefined => {
  if (access?.networkAccessType !== NETWORK_ACCESS.ALLOWLIST) return undefined
  const cidr = (access.allowedCidrs ?? []).find((entry: unknown) => typeof entry !== "string" || !isCidr(entry))
  if (cidr !== undefined) return `Invalid CIDR: ${String(cidr)}`
  const domain = (access.allowedDomains ?? []).find((entry: unknown) => typeof entry !== "string" || !isDomain(entry))
  if (domain !== undefined) return `Invalid domain: ${String(domain)}`
  return undefined
}

/** The network a sandbox of this version gets for what it asked. */
export const networkOf = (version: "V1" | "V2", access: any): AppliedNetwork => {
  const asked = Number(access?.networkAccessType ?? 0)
  const applied = version === "V1"
  return {
    asked,
    cidrs: [...(access?.allowedCidrs ?? [])],
    domains: [...(access?.allowedDomains ?? [])],
    applied,
    hostNetwork: !applied || !(asked === NETWORK_ACCESS.BLOCKED || asked === NETWORK_ACCESS.ALLOWLIST)
  }
}
