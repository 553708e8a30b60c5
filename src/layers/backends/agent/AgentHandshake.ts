/**
 * The attach handshake of a kt-agent connection (native/kt-agent/conn.c): the server proves the
 * computer's key over the agent's fresh nonce, and the agent proves it back over the server's, so a
 * recorded attach proves nothing later and nothing but the real agent can answer. HMAC-SHA256 with
 * node:crypto; the key is 32 random bytes, held only on the server's side (the host's state
 * directory, a container's labels) and handed to the agent once, on its stdin, when it starts.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"
import { KEY_BYTES, NONCE_BYTES, WELCOME_SIZE } from "./AgentProtocol.js"

/** A new computer key, as the agent reads it (64 hex digits). */
export const newKey = (): string => randomBytes(KEY_BYTES).toString("hex")

/** A key's bytes, or undefined when it is not 64 hex digits. */
export const keyBytes = (hex: string): Buffer | undefined =>
  /^[0-9a-f]{64}$/.test(hex) ? Buffer.from(hex, "hex") : undefined

const mac = (key: Buffer, label: string, boot: Buffer, first: Buffer, second: Buffer) =>
  createHmac("sha256", key).update(label).update(boot).update(first).update(second).digest()

/** AUTH's payload for the agent's HELLO, and the server's nonce (to check WELCOME's proof). */
export const auth = (key: Buffer, boot: Buffer, agentNonce: Buffer, relay: boolean) => {
  const serverNonce = randomBytes(NONCE_BYTES)
  const flags = Buffer.alloc(4)
  flags.writeUInt32LE(relay ? 1 : 0)
  return { payload: Buffer.concat([serverNonce, mac(key, "kt-agent-v3 server", boot, agentNonce, serverNonce), flags]), serverNonce }
}

/** What the agent says once it accepted a server. */
export interface Welcome {
  readonly relayPort: number
  /** Bytes it keeps from the start and from the end of each stream. */
  readonly headBytes: number
  readonly tailBytes: number
  /** The computer's clock when it answered (ms since the epoch). */
  readonly clockMs: number
}

/** WELCOME's contents, when its proof is the real agent's. */
export const welcome = (key: Buffer, boot: Buffer, agentNonce: Buffer, serverNonce: Buffer, payload: Buffer): Welcome | undefined => {
  if (payload.length !== WELCOME_SIZE) return undefined
  const expected = mac(key, "kt-agent-v3 agent", boot, serverNonce, agentNonce)
  if (!timingSafeEqual(expected, payload.subarray(0, 32))) return undefined
  const number = (at: number) => Number(payload.readBigUInt64LE(at))
  return { relayPort: payload.readUInt32LE(32), headBytes: number(36), tailBytes: number(44), clockMs: number(52) }
}
