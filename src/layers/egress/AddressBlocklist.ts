/**
 * Which addresses are not public: loopback, private, link-local (cloud metadata at
 * 169.254.169.254), CGNAT, unspecified, multicast, documentation and reserved ranges — what a
 * wildcard rule must never lead to (`EgressPolicy.checkAddress`).
 *
 * IPv6 addresses that carry an IPv4 address are judged by it, in every spelling (they are read as
 * 16 bytes, not as text): IPv4-mapped `::ffff:0:0/96` (`::ffff:127.0.0.1`, `0:0:0:0:0:ffff:7f00:1`)
 * and 6to4 `2002::/16` are public only when their IPv4 address is. Prefixes that only ever mean a
 * translator or a deprecated mechanism are refused whole, whatever they embed: IPv4-compatible
 * `::/96` (`::127.0.0.1`, `::7f00:1`), IPv4-translated `::ffff:0:0:0/96` (`::ffff:0:7f00:1`), NAT64
 * `64:ff9b::/96` and `64:ff9b:1::/48`, and the IETF protocol block `2001::/23` (Teredo included).
 */
import { BlockList, isIP } from "node:net"

const v4 = new BlockList()
for (
  const [network, prefix] of [
    ["0.0.0.0", 8],
    ["10.0.0.0", 8],
    ["100.64.0.0", 10],
    ["127.0.0.0", 8],
    ["169.254.0.0", 16],
    ["172.16.0.0", 12],
    ["192.0.0.0", 24],
    ["192.0.2.0", 24],
    ["192.88.99.0", 24],
    ["192.168.0.0", 16],
    ["198.18.0.0", 15],
    ["198.51.100.0", 24],
    ["203.0.113.0", 24],
    ["224.0.0.0", 4],
    ["240.0.0.0", 4]
  ] as const
) v4.addSubnet(network, prefix, "ipv4")

const v6 = new BlockList()
for (
  const [network, prefix] of [
    // IPv4-compatible (deprecated), with :: and ::1 inside it.
    ["::", 96],
    // IPv4-translated (SIIT): meaningful only behind a translator.
    ["::ffff:0:0:0", 96],
    ["64:ff9b::", 96],
    ["64:ff9b:1::", 48],
    ["100::", 64],
    ["2001::", 23],
    ["2001:db8::", 32],
    ["3fff::", 20],
    ["5f00::", 16],
    ["fc00::", 7],
    ["fe80::", 10],
    ["fec0::", 10],
    ["ff00::", 8]
  ] as const
) v6.addSubnet(network, prefix, "ipv6")

/** The eight 16-bit groups of an IPv6 address, however it is written; undefined if it is none. */
const groupsOf = (address: string): ReadonlyArray<number> | undefined => {
  let text: string
  try {
    // The URL standard's serialiser: lower case, hex groups only (a dotted tail becomes two groups).
    text = new URL(`http://[${address}]/`).hostname.slice(1, -1)
  } catch {
    return undefined
  }
  const [head = "", tail] = text.split("::")
  const left = head === "" ? [] : head.split(":")
  const right = tail === undefined || tail === "" ? [] : tail.split(":")
  const zeros = tail === undefined ? 0 : 8 - left.length - right.length
  const groups = [...left, ...Array<string>(zeros).fill("0"), ...right].map((group) => Number.parseInt(group, 16))
  return groups.length === 8 && groups.every((group) => group >= 0 && group <= 0xffff) ? groups : undefined
}

const dotted = (high: number, low: number) => `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`

/** The IPv4 address an IPv6 address stands for when it is IPv4-mapped or 6to4. */
const embeddedV4 = (groups: ReadonlyArray<number>): string | undefined => {
  if (groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff) return dotted(groups[6]!, groups[7]!)
  if (groups[0] === 0x2002) return dotted(groups[1]!, groups[2]!)
  return undefined
}

/** A global unicast address: false for every special range above, in any spelling, and for what is no address. */
export const isPublicAddress = (address: string): boolean => {
  const family = isIP(address)
  if (family === 4) return !v4.check(address, "ipv4")
  if (family !== 6) return false
  const groups = groupsOf(address)
  if (groups === undefined) return false
  const inner = embeddedV4(groups)
  if (inner !== undefined) return !v4.check(inner, "ipv4")
  return !v6.check(groups.map((group) => group.toString(16)).join(":"), "ipv6")
}
