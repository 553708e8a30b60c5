/** The egress proxy's bounds: connections per computer, header size, and its timeouts (Clock). */
export interface ProxyLimits {
  readonly maxConnectionsPerComputer: number
  /** Request line plus headers, bytes (Node's maxHeaderSize). */
  readonly maxHeaderBytes: number
  readonly headTimeoutMs: number
  readonly idleTimeoutMs: number
  readonly connectTimeoutMs: number
}

export const defaultLimits: ProxyLimits = {
  maxConnectionsPerComputer: 64,
  maxHeaderBytes: 32 * 1024,
  headTimeoutMs: 30_000,
  idleTimeoutMs: 300_000,
  connectTimeoutMs: 15_000
}
