/**
 * The kt-agent protocol, version 2 (see native/kt-agent.c for the full description): frame types,
 * the limits the server enforces, and the encoders of the server's frames.
 *
 * A frame is `u32 payloadLength (LE) | u8 type | u32 id (LE) | payload`.
 */

/** Frame types. Server -> agent below 16, agent -> server from 16. */
export const FrameType = {
  Spawn: 1,
  Stdin: 2,
  StdinEof: 3,
  Signal: 4,
  SpawnTty: 5,
  Release: 6,
  Resize: 7,
  RelayDataIn: 8,
  RelayEofIn: 9,
  RelayCreditIn: 10,
  RelayReset: 11,
  SpawnDirect: 12,
  /** u16 port: open a stream to 127.0.0.1:port inside the computer (numbered apart, see relay.c). */
  RelayConnect: 48,
  Ready: 16,
  Started: 17,
  SpawnFailed: 18,
  Stdout: 19,
  Stderr: 20,
  Exit: 21,
  Closed: 22,
  Log: 23,
  Released: 24,
  RelayOpen: 25,
  RelayData: 26,
  RelayEof: 27,
  RelayCredit: 28,
  RelayClosed: 29
} as const

export const PROTOCOL_VERSION = 2

/** Bytes before the payload: u32 payload length, u8 type, u32 id (little-endian). */
export const HEADER_SIZE = 9

/** The largest output payload the agent may send (its pipes and terminal reads are no bigger). */
export const MAX_OUTPUT = 1 << 20
/** The largest text payload (SPAWN_FAILED, LOG). */
export const MAX_TEXT = 1024
/**
 * Relay: bytes in flight per stream and direction, the largest DATA payload, the most live streams
 * (so a computer holds at most RELAY_MAX_STREAMS * RELAY_WINDOW = 64 MiB of relay data in the server).
 */
export const RELAY_WINDOW = 256 * 1024
export const RELAY_CHUNK = 64 * 1024
export const RELAY_MAX_STREAMS = 256
/** The top bit marks the ids of streams the server opens (RELAY_CONNECT); the agent's never have it. */
export const SERVER_STREAM = 0x8000_0000
/** RELAY_CLOSED reasons: a clean end, a reset, a RELAY_CONNECT that could not connect. */
export const RelayClosedReason = { Clean: 0, Reset: 1, Refused: 2 } as const

/** Encodes one frame. */
export const encodeFrame = (type: number, id: number, payload?: Uint8Array): Buffer => {
  const length = payload?.byteLength ?? 0
  const frame = Buffer.allocUnsafe(HEADER_SIZE + length)
  frame.writeUInt32LE(length, 0)
  frame.writeUInt8(type, 4)
  frame.writeUInt32LE(id, 5)
  if (payload) frame.set(payload, HEADER_SIZE)
  return frame
}

/** What the agent should start. */
export interface AgentSpawnSpec {
  readonly argv: ReadonlyArray<string>
  readonly cwd: string
  readonly env: Readonly<Record<string, string>>
  /** Words the agent execs itself before falling back to `argv` (SPAWN_DIRECT; see SimpleCommand). */
  readonly direct?: ReadonlyArray<string> | undefined
}

/**
 * SPAWN: `u32 argc | u32 envc | cwd\0 | argv\0… | K=V\0…`; with `direct` (SPAWN_DIRECT), a
 * `u32 directc` before it and `direct\0…` after. The spec has passed `specProblem` (no string holds NUL).
 */
export const encodeSpawn = (spec: AgentSpawnSpec): Buffer => {
  const env = Object.entries(spec.env).map(([key, value]) => `${key}=${value}`)
  const direct = spec.direct ?? []
  const strings = [spec.cwd, ...spec.argv, ...env, ...direct]
  const body = Buffer.from(strings.join("\0") + "\0", "utf8")
  const head = direct.length > 0 ? 12 : 8
  const payload = Buffer.allocUnsafe(head + body.length)
  if (direct.length > 0) payload.writeUInt32LE(direct.length, 0)
  payload.writeUInt32LE(spec.argv.length, head - 8)
  payload.writeUInt32LE(env.length, head - 4)
  body.copy(payload, head)
  return payload
}

/** `u16 cols | u16 rows`: the size part of SPAWN_TTY and RESIZE. */
export const encodeSize = (cols: number, rows: number): Buffer => {
  const payload = Buffer.allocUnsafe(4)
  payload.writeUInt16LE(cols, 0)
  payload.writeUInt16LE(rows, 2)
  return payload
}

export const encodeU16 = (value: number): Buffer => {
  const payload = Buffer.allocUnsafe(2)
  payload.writeUInt16LE(value, 0)
  return payload
}

export const encodeU32 = (value: number): Buffer => {
  const payload = Buffer.allocUnsafe(4)
  payload.writeUInt32LE(value, 0)
  return payload
}

/** A terminal size the agent (and the kernel's winsize) can hold. */
export const validSize = (cols: number, rows: number) =>
  Number.isInteger(cols) && Number.isInteger(rows) && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535
