/**
 * The kt-agent protocol, version 3 (see native/kt-agent.c for the full description): frame types,
 * the limits the server enforces, the encoders of the server's frames and the decoder of a process
 * record.
 *
 * A frame is `u32 payloadLength (LE) | u8 type | u32 id (LE) | payload`. The id is a request tag the
 * server chose (spawns, watches, reads, lists, steps: their answers carry it back) or a process
 * handle, allocated by the agent and never reused in the computer's life.
 */

/** Frame types. */
export const FrameType = {
  Spawn: 1,
  Stdin: 2,
  StdinEof: 3,
  Signal: 4,
  SpawnTty: 5,
  Resize: 7,
  RelayDataIn: 8,
  RelayEofIn: 9,
  RelayCreditIn: 10,
  RelayReset: 11,
  SpawnDirect: 12,
  Auth: 13,
  Watch: 14,
  Unwatch: 15,
  Hello: 16,
  Started: 17,
  SpawnFailed: 18,
  Stdout: 19,
  Stderr: 20,
  Exit: 21,
  Closed: 22,
  Log: 23,
  Unwatched: 24,
  RelayOpen: 25,
  RelayData: 26,
  RelayEof: 27,
  RelayCredit: 28,
  RelayClosed: 29,
  Read: 30,
  List: 31,
  Note: 32,
  Shutdown: 33,
  Step: 34,
  Welcome: 35,
  Watching: 36,
  ReadResult: 37,
  Proc: 38,
  ListEnd: 39,
  Failed: 40,
  StepResult: 41,
  /** u16 port: open a stream to 127.0.0.1:port inside the computer (numbered apart, see relay.c). */
  RelayConnect: 48
} as const

export const PROTOCOL_VERSION = 3

/** Bytes before the payload: u32 payload length, u8 type, u32 id (little-endian). */
export const HEADER_SIZE = 9

/** The largest output payload the agent may send, its 8-byte offset included. */
export const MAX_OUTPUT = 1 << 20
/** The most bytes one READ returns. */
export const MAX_READ = 256 * 1024
/** The largest text payload (SPAWN_FAILED, LOG, FAILED). */
export const MAX_TEXT = 1024
/** What a server attaches to a process (its command as ps shows it), and the note of why it ended. */
export const MAX_META = 4096
export const MAX_NOTE = 512
export const MAX_STEP_NAME = 64
/** A process record's fixed part, and its largest size. */
export const RECORD_FIXED = 60
export const MAX_RECORD = RECORD_FIXED + MAX_META + MAX_NOTE
/** The attach handshake. */
export const KEY_BYTES = 32
export const NONCE_BYTES = 32
export const BOOT_BYTES = 16
export const HELLO_SIZE = 4 + BOOT_BYTES + NONCE_BYTES
export const AUTH_SIZE = NONCE_BYTES + 32 + 4
export const WELCOME_SIZE = 32 + 4 + 8 + 8 + 8 + 4
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
  /** Kept with the process's record for any server that lists it (at most MAX_META bytes). */
  readonly meta?: string | undefined
}

/**
 * SPAWN: `u32 metaLen | meta | u32 argc | u32 envc | cwd\0 | argv\0… | K=V\0…`; with `direct`
 * (SPAWN_DIRECT), a `u32 directc` after the meta and `direct\0…` at the end; `size` (SPAWN_TTY)
 * goes after the meta. The spec has passed `specProblem` (no string holds NUL); undefined when the
 * meta is too long.
 */
export const encodeSpawn = (spec: AgentSpawnSpec, size?: { readonly cols: number; readonly rows: number }): Buffer | undefined => {
  const env = Object.entries(spec.env).map(([key, value]) => `${key}=${value}`)
  const direct = spec.direct ?? []
  const strings = [spec.cwd, ...spec.argv, ...env, ...direct]
  const meta = Buffer.from(spec.meta ?? "", "utf8")
  if (meta.length > MAX_META) return undefined
  const body = Buffer.from(strings.join("\0") + "\0", "utf8")
  const head = (direct.length > 0 ? 12 : 8) + (size === undefined ? 0 : 4)
  const payload = Buffer.allocUnsafe(4 + meta.length + head + body.length)
  payload.writeUInt32LE(meta.length, 0)
  meta.copy(payload, 4)
  let at = 4 + meta.length
  if (size !== undefined) {
    payload.writeUInt16LE(size.cols, at)
    payload.writeUInt16LE(size.rows, at + 2)
    at += 4
  }
  if (direct.length > 0) {
    payload.writeUInt32LE(direct.length, at)
    at += 4
  }
  payload.writeUInt32LE(spec.argv.length, at)
  payload.writeUInt32LE(env.length, at + 4)
  body.copy(payload, at + 8)
  return payload
}

/** `u16 cols | u16 rows`: RESIZE. */
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

/** WATCH: `u32 handle | u64 stdout from | u64 stderr from`. */
export const encodeWatch = (handle: number, stdout: number, stderr: number): Buffer => {
  const payload = Buffer.allocUnsafe(20)
  payload.writeUInt32LE(handle, 0)
  payload.writeBigUInt64LE(BigInt(stdout), 4)
  payload.writeBigUInt64LE(BigInt(stderr), 12)
  return payload
}

/** READ: `u32 handle | u8 stream | u64 from | u32 most`. */
export const encodeRead = (handle: number, stream: "stdout" | "stderr", from: number, most: number): Buffer => {
  const payload = Buffer.allocUnsafe(17)
  payload.writeUInt32LE(handle, 0)
  payload.writeUInt8(stream === "stdout" ? 0 : 1, 4)
  payload.writeBigUInt64LE(BigInt(from), 5)
  payload.writeUInt32LE(most, 13)
  return payload
}

/** STEP: `u8 take | name`. */
export const encodeStep = (take: boolean, name: string): Buffer =>
  Buffer.concat([Buffer.from([take ? 1 : 0]), Buffer.from(name, "utf8").subarray(0, MAX_STEP_NAME)])

/** A terminal size the agent (and the kernel's winsize) can hold. */
export const validSize = (cols: number, rows: number) =>
  Number.isInteger(cols) && Number.isInteger(rows) && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535

/** A process as the agent keeps it (PROC, WATCHING). */
export interface ProcessRecord {
  readonly handle: number
  readonly pid: number
  readonly state: "running" | "exited" | "closed"
  readonly tty: boolean
  /** Set once exited: a code, or a signal number. */
  readonly exit: { readonly kind: "code" | "signal"; readonly value: number } | undefined
  /** Processes its teardowns ended besides itself. */
  readonly ended: number
  /** Milliseconds since the epoch, on the computer's clock (0: not ended). */
  readonly startMs: number
  readonly endMs: number
  readonly totals: { readonly stdout: number; readonly stderr: number }
  readonly size: { readonly cols: number; readonly rows: number }
  readonly meta: string
  readonly note: string
}

const STATES = ["running", "exited", "closed"] as const

/** The kernel's PID_MAX_LIMIT. */
export const PID_MAX = 4_194_304

/** Decodes a record, or says why it is malformed. */
export const decodeRecord = (payload: Buffer): ProcessRecord | string => {
  if (payload.length < RECORD_FIXED) return `a record of ${payload.length} bytes`
  const handle = payload.readUInt32LE(0)
  const pid = payload.readUInt32LE(4)
  const state = payload[8]!
  const tty = payload[9]!
  const kind = payload[10]!
  const value = payload.readUInt32LE(12)
  const metaLength = payload.readUInt16LE(56)
  const noteLength = payload.readUInt16LE(58)
  if (handle === 0) return "a record with handle 0"
  if (pid === 0 || pid > PID_MAX) return `a record with pid ${pid}`
  if (state > 2 || tty > 1 || kind > 1) return `a record of p${handle} with state ${state}, tty ${tty}, exit kind ${kind}`
  if (metaLength > MAX_META || noteLength > MAX_NOTE || payload.length !== RECORD_FIXED + metaLength + noteLength) {
    return `a record of p${handle} whose sizes do not add up`
  }
  const exited = state > 0
  if (exited && (kind === 0 ? value > 255 : value < 1 || value > 64)) return `a record of p${handle} with exit ${kind}/${value}`
  const number = (at: number) => Number(payload.readBigUInt64LE(at))
  return {
    handle,
    pid,
    state: STATES[state]!,
    tty: tty === 1,
    exit: exited ? { kind: kind === 0 ? "code" : "signal", value } : undefined,
    ended: payload.readUInt32LE(16),
    startMs: number(20),
    endMs: number(28),
    totals: { stdout: number(36), stderr: number(44) },
    size: { cols: payload.readUInt16LE(52), rows: payload.readUInt16LE(54) },
    meta: payload.toString("utf8", RECORD_FIXED, RECORD_FIXED + metaLength),
    note: payload.toString("utf8", RECORD_FIXED + metaLength, RECORD_FIXED + metaLength + noteLength)
  }
}
