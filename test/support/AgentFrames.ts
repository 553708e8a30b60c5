/**
 * Frames as a kt-agent (protocol 3) sends them, for the decoder's and the client's tests: each
 * builder gives the whole frame (header and payload).
 */
import { BOOT_BYTES, encodeFrame, FrameType, NONCE_BYTES, PROTOCOL_VERSION, RECORD_FIXED, WELCOME_SIZE } from "../../src/layers/backends/agent/AgentProtocol.js"

export const u32 = (n: number) => {
  const b = Buffer.alloc(4)
  b.writeUInt32LE(n >>> 0)
  return b
}
export const u64 = (n: number | bigint) => {
  const b = Buffer.alloc(8)
  b.writeBigUInt64LE(BigInt(n))
  return b
}

export const hello = (version = PROTOCOL_VERSION) =>
  encodeFrame(FrameType.Hello, 0, Buffer.concat([u32(version), Buffer.alloc(BOOT_BYTES, 1), Buffer.alloc(NONCE_BYTES, 2)]))
/** A WELCOME whose proof only a test that does not check it accepts. */
export const welcome = () => encodeFrame(FrameType.Welcome, 0, Buffer.alloc(WELCOME_SIZE))
export const greeting = () => Buffer.concat([hello(), welcome()])

export const started = (tag: number, handle: number, pid = 100) => encodeFrame(FrameType.Started, tag, Buffer.concat([u32(handle), u32(pid), u64(1_700_000_000_000)]))
export const output = (handle: number, offset: number, data: string | Buffer, stream: "stdout" | "stderr" = "stdout") =>
  encodeFrame(stream === "stdout" ? FrameType.Stdout : FrameType.Stderr, handle, Buffer.concat([u64(offset), Buffer.isBuffer(data) ? data : Buffer.from(data)]))
export const exit = (handle: number, kind: number, value: number, ended = 0, totals: readonly [number, number] = [0, 0]) =>
  encodeFrame(FrameType.Exit, handle, Buffer.concat([Buffer.from([kind]), u32(value), u32(ended), u64(totals[0]), u64(totals[1]), u64(1_700_000_000_500)]))
export const closed = (handle: number, ended = 0) => encodeFrame(FrameType.Closed, handle, u32(ended))

export interface RecordFields {
  readonly handle: number
  readonly pid?: number
  readonly state?: number
  readonly tty?: number
  readonly kind?: number
  readonly value?: number
  readonly meta?: string
  readonly note?: string
}

export const record = (fields: RecordFields) => {
  const meta = Buffer.from(fields.meta ?? "")
  const note = Buffer.from(fields.note ?? "")
  const fixed = Buffer.alloc(RECORD_FIXED)
  fixed.writeUInt32LE(fields.handle, 0)
  fixed.writeUInt32LE(fields.pid ?? 100, 4)
  fixed[8] = fields.state ?? 0
  fixed[9] = fields.tty ?? 0
  fixed[10] = fields.kind ?? 0
  fixed.writeUInt32LE(fields.value ?? 0, 12)
  fixed.writeUInt16LE(80, 52)
  fixed.writeUInt16LE(24, 54)
  fixed.writeUInt16LE(meta.length, 56)
  fixed.writeUInt16LE(note.length, 58)
  return Buffer.concat([fixed, meta, note])
}
export const watching = (tag: number, fields: RecordFields) => encodeFrame(FrameType.Watching, tag, record(fields))
export const proc = (tag: number, fields: RecordFields) => encodeFrame(FrameType.Proc, tag, record(fields))
export const readResult = (tag: number, start: number, total: number, data: string | Buffer) =>
  encodeFrame(FrameType.ReadResult, tag, Buffer.concat([u64(start), u64(total), Buffer.isBuffer(data) ? data : Buffer.from(data)]))
