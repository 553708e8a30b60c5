/**
 * The server's decoder of one connection's frames from a kt-agent. The agent runs inside the
 * computer, so what it says is untrusted input: every frame is checked before anything acts on it,
 * and the first violation stops the decoder for good (its owner drops the connection with the reason).
 * Checked:
 *   - the header: a known agent -> server type, a payload length within that type's bound (before
 *     anything is allocated or buffered), HELLO first, then WELCOME, each once;
 *   - the payload: exact sizes and value ranges (exit kind, code, signal, records, offsets);
 *   - answers against what the server asked (AnswerBook.ts): a tag's answer of the right kind, once
 *     (a listing's records until its end); output, EXIT and CLOSED only for a process this connection
 *     watches, offsets that never go back, one EXIT, CLOSED only after it, UNWATCHED only for an
 *     UNWATCH sent (frames for a process being unwatched are dropped until then);
 *   - relay streams: new ids only (increasing), at most RELAY_MAX_STREAMS open, DATA within the
 *     window the server granted, CREDIT only for data the server sent; streams the server opened
 *     (RELAY_CONNECT, ids with the top bit) open only when asked for, and only they may be refused.
 * Memory is bounded: at most a header and one control payload (<= MAX_RECORD bytes) are buffered;
 * output, read results and relay data are handed over as views of the input chunk, never gathered.
 * The decoder does no I/O and never throws for any input.
 */
import { signalName } from "../../../domain/Signals.js"
import type { ExitInfo } from "../../../services/Backend.js"
import {
  decodeRecord,
  FrameType,
  HEADER_SIZE,
  HELLO_SIZE,
  MAX_OUTPUT,
  MAX_READ,
  MAX_RECORD,
  MAX_STEP_NAME,
  MAX_TEXT,
  type ProcessRecord,
  PROTOCOL_VERSION,
  RECORD_FIXED,
  RELAY_CHUNK,
  RelayClosedReason,
  WELCOME_SIZE
} from "./AgentProtocol.js"
import { AnswerBook } from "./AnswerBook.js"
import { RelayBook } from "./RelayBook.js"

/** What the decoder reports. Streamed `data` is only valid during the call (it views the input chunk). */
export interface DecoderHandler {
  readonly hello: (boot: Buffer, nonce: Buffer) => void
  readonly welcome: (payload: Buffer) => void
  readonly started: (tag: number, handle: number, pid: number, startMs: number) => void
  readonly spawnFailed: (tag: number, reason: string) => void
  /** `offset`: where `data` starts in its stream (past a gap, the bytes before it fell out). */
  readonly output: (handle: number, stream: "stdout" | "stderr", offset: number, data: Uint8Array) => void
  /** `ended`: processes a teardown of its tree ended; `totals`: what it had written when it exited. */
  readonly exit: (handle: number, exit: ExitInfo, ended: number, totals: { readonly stdout: number; readonly stderr: number }, endMs: number) => void
  readonly closed: (handle: number, ended: number) => void
  readonly unwatched: (handle: number) => void
  readonly watching: (tag: number, record: ProcessRecord) => void
  /** A READ's answer: its start and the stream's total, then its bytes in pieces, then its end. */
  readonly readStart: (tag: number, start: number, total: number) => void
  readonly readData: (tag: number, data: Uint8Array) => void
  readonly readEnd: (tag: number) => void
  readonly record: (tag: number, record: ProcessRecord) => void
  readonly listEnd: (tag: number) => void
  readonly failed: (tag: number, reason: string) => void
  readonly stepResult: (tag: number, granted: boolean, holder: string) => void
  readonly log: (text: string) => void
  readonly relayOpen: (id: number) => void
  readonly relayData: (id: number, data: Uint8Array) => void
  readonly relayEof: (id: number) => void
  readonly relayCredit: (id: number, bytes: number) => void
  /** `refused`: a stream the server asked for (RELAY_CONNECT) could not connect. */
  readonly relayClosed: (id: number, reset: boolean, refused: boolean) => void
  /** Once, then nothing more: the connection broke the protocol. */
  readonly violation: (reason: string) => void
}

const NAMES: Readonly<Record<number, string>> = Object.fromEntries(
  Object.entries(FrameType).map(([name, type]) => [type, name.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase()])
)

/** [min, max] payload bytes of each agent -> server type; absent: unknown type. */
const BOUNDS: Readonly<Record<number, readonly [number, number]>> = {
  [FrameType.Hello]: [HELLO_SIZE, HELLO_SIZE],
  [FrameType.Welcome]: [WELCOME_SIZE, WELCOME_SIZE],
  [FrameType.Started]: [16, 16],
  [FrameType.SpawnFailed]: [0, MAX_TEXT],
  [FrameType.Stdout]: [9, MAX_OUTPUT],
  [FrameType.Stderr]: [9, MAX_OUTPUT],
  [FrameType.Exit]: [33, 33],
  [FrameType.Closed]: [4, 4],
  [FrameType.Log]: [0, MAX_TEXT],
  [FrameType.Unwatched]: [0, 0],
  [FrameType.Watching]: [RECORD_FIXED, MAX_RECORD],
  [FrameType.ReadResult]: [16, 16 + MAX_READ],
  [FrameType.Proc]: [RECORD_FIXED, MAX_RECORD],
  [FrameType.ListEnd]: [0, 0],
  [FrameType.Failed]: [0, MAX_TEXT],
  [FrameType.StepResult]: [1, 1 + MAX_STEP_NAME],
  [FrameType.RelayOpen]: [0, 0],
  [FrameType.RelayData]: [1, RELAY_CHUNK],
  [FrameType.RelayEof]: [0, 0],
  [FrameType.RelayCredit]: [4, 4],
  [FrameType.RelayClosed]: [1, 1]
}

/** Streamed types and the prefix of theirs that is gathered before the rest is handed over. */
const PREFIX: Readonly<Record<number, number>> = {
  [FrameType.Stdout]: 8,
  [FrameType.Stderr]: 8,
  [FrameType.ReadResult]: 16,
  [FrameType.RelayData]: 0
}

/** The largest offset the server can count exactly. */
const MAX_OFFSET = Number.MAX_SAFE_INTEGER

export class FrameDecoder {
  private readonly header = Buffer.alloc(HEADER_SIZE)
  private headerFill = 0
  private type = 0
  private id = 0
  private remaining = 0
  private inPayload = false
  private readonly control = Buffer.alloc(MAX_RECORD)
  private controlLength = 0
  private controlFill = 0
  /** The next byte's offset in the stream of the output frame being streamed. */
  private streamAt = 0
  private stage: "hello" | "welcome" | "ready" = "hello"
  private failed = false
  /** What the server asked and what it watches: the agent's answers are checked against it. */
  readonly answers = new AnswerBook()
  /** Relay streams: ids, windows and credits. */
  readonly relay = new RelayBook()

  constructor(private readonly handler: DecoderHandler) {}

  /** Whether a violation stopped the decoder. */
  get broken(): boolean {
    return this.failed
  }

  push(chunk: Uint8Array): void {
    if (this.failed) return
    const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    let offset = 0
    const end = buffer.length
    while (offset < end && !this.failed) {
      if (!this.inPayload) {
        const n = Math.min(HEADER_SIZE - this.headerFill, end - offset)
        buffer.copy(this.header, this.headerFill, offset, offset + n)
        this.headerFill += n
        offset += n
        if (this.headerFill < HEADER_SIZE) return
        this.headerFill = 0
        if (!this.beginFrame(this.header.readUInt32LE(0), this.header.readUInt8(4), this.header.readUInt32LE(5))) return
        if (this.remaining === 0) {
          this.endFrame()
          continue
        }
        this.inPayload = true
        continue
      }
      const prefix = PREFIX[this.type]
      if (prefix !== undefined && this.controlFill >= prefix) {
        const n = Math.min(this.remaining, end - offset)
        this.streamPiece(buffer.subarray(offset, offset + n))
        offset += n
        this.remaining -= n
      } else {
        const want = prefix ?? this.controlLength
        const n = Math.min(want - this.controlFill, end - offset)
        buffer.copy(this.control, this.controlFill, offset, offset + n)
        this.controlFill += n
        offset += n
        this.remaining -= n
        if (prefix !== undefined && this.controlFill === prefix && !this.beginStream()) return
      }
      if (this.remaining === 0 && !this.failed) {
        this.inPayload = false
        this.endFrame()
      }
    }
  }

  private fail(reason: string): false {
    if (!this.failed) {
      this.failed = true
      this.handler.violation(reason)
    }
    return false
  }

  /** Checks a header; false after a violation. */
  private beginFrame(length: number, type: number, id: number): boolean {
    const bounds = BOUNDS[type]
    const name = NAMES[type] ?? String(type)
    if (bounds === undefined) return this.fail(`unknown frame type ${type} (id ${id})`)
    if (length < bounds[0] || length > bounds[1]) {
      return this.fail(`${name} frame of ${length} bytes for id ${id} (allowed: ${bounds[0]}..${bounds[1]})`)
    }
    if (this.stage === "hello" && type !== FrameType.Hello) return this.fail(`${name} before HELLO`)
    if (this.stage === "welcome" && type !== FrameType.Welcome) return this.fail(`${name} before WELCOME`)
    if (this.stage === "ready" && (type === FrameType.Hello || type === FrameType.Welcome)) return this.fail(`a second ${name}`)
    if ((type === FrameType.Hello || type === FrameType.Welcome || type === FrameType.Log) && id !== 0) {
      return this.fail(`${name} with id ${id} (must be 0)`)
    }
    this.type = type
    this.id = id
    this.remaining = length
    this.controlLength = PREFIX[type] === undefined ? length : 0
    this.controlFill = 0
    if (type === FrameType.RelayData) {
      const problem = this.relay.data(id, length)
      if (problem !== undefined) return this.fail(problem)
    }
    return true
  }

  /** The prefix of a streamed frame is in: check it before any of the rest is handed over. */
  private beginStream(): boolean {
    const prefix = this.control
    if (this.type === FrameType.ReadResult) {
      const start = prefix.readBigUInt64LE(0)
      const total = prefix.readBigUInt64LE(8)
      const length = this.remaining
      if (total > MAX_OFFSET || start > total || start + BigInt(length) > total) {
        return this.fail(`READ_RESULT for tag ${this.id} with start ${start}, ${length} bytes and total ${total}`)
      }
      const problem = this.answers.readResult(this.id, Number(start), Number(total), length)
      if (problem !== undefined) return this.fail(problem)
      this.handler.readStart(this.id, Number(start), Number(total))
      return true
    }
    const offset = prefix.readBigUInt64LE(0)
    const stream = this.type === FrameType.Stdout ? "stdout" : "stderr"
    if (offset + BigInt(this.remaining) > MAX_OFFSET) return this.fail(`${NAMES[this.type]} for p${this.id} at offset ${offset}`)
    const problem = this.answers.output(this.id, stream, Number(offset), this.remaining)
    if (problem !== undefined) return this.fail(problem)
    this.streamAt = Number(offset)
    return true
  }

  private streamPiece(data: Buffer): void {
    switch (this.type) {
      case FrameType.RelayData:
        if (this.relay.delivers(this.id)) this.handler.relayData(this.id, data)
        return
      case FrameType.ReadResult:
        this.handler.readData(this.id, data)
        return
      default: {
        const stream = this.type === FrameType.Stdout ? "stdout" : "stderr"
        if (this.answers.delivers(this.id)) this.handler.output(this.id, stream, this.streamAt, data)
        this.streamAt += data.length
      }
    }
  }

  private endFrame(): void {
    const payload = this.control.subarray(0, this.controlLength)
    const id = this.id
    const problem = (reason: string | undefined) => reason === undefined || void this.fail(reason)
    switch (this.type) {
      case FrameType.Hello: {
        const version = payload.readUInt32LE(0)
        if (version !== PROTOCOL_VERSION) return void this.fail(`the agent speaks protocol ${version}, not ${PROTOCOL_VERSION}`)
        this.stage = "welcome"
        return this.handler.hello(Buffer.from(payload.subarray(4, 20)), Buffer.from(payload.subarray(20, 52)))
      }
      case FrameType.Welcome:
        this.stage = "ready"
        return this.handler.welcome(Buffer.from(payload))
      case FrameType.Log:
        return this.handler.log(payload.toString("utf8"))
      case FrameType.Stdout:
      case FrameType.Stderr:
      case FrameType.RelayData:
        return
      case FrameType.ReadResult:
        return this.handler.readEnd(id)
      case FrameType.Started: {
        const handle = payload.readUInt32LE(0)
        const pid = payload.readUInt32LE(4)
        if (handle === 0 || pid === 0 || pid > 4_194_304) return void this.fail(`STARTED for tag ${id} with handle ${handle} and pid ${pid}`)
        if (problem(this.answers.started(id, handle))) this.handler.started(id, handle, pid, Number(payload.readBigUInt64LE(8)))
        return
      }
      case FrameType.SpawnFailed:
        if (problem(this.answers.answered(id, "spawn", "SPAWN_FAILED"))) this.handler.spawnFailed(id, payload.toString("utf8"))
        return
      case FrameType.Exit:
        return this.exitFrame(payload)
      case FrameType.Closed: {
        const deliver = this.answers.delivers(id)
        if (problem(this.answers.closed(id)) && deliver) this.handler.closed(id, payload.readUInt32LE(0))
        return
      }
      case FrameType.Unwatched:
        if (problem(this.answers.unwatched(id))) this.handler.unwatched(id)
        return
      case FrameType.Watching:
      case FrameType.Proc: {
        const record = decodeRecord(Buffer.from(payload))
        if (typeof record === "string") return void this.fail(`${NAMES[this.type]} for tag ${id}: ${record}`)
        if (this.type === FrameType.Proc) {
          if (problem(this.answers.listed(id))) this.handler.record(id, record)
        } else if (problem(this.answers.watching(id, record.handle))) {
          this.handler.watching(id, record)
        }
        return
      }
      case FrameType.ListEnd:
        if (problem(this.answers.answered(id, "list", "LIST_END"))) this.handler.listEnd(id)
        return
      case FrameType.Failed:
        if (problem(this.answers.failed(id))) this.handler.failed(id, payload.toString("utf8"))
        return
      case FrameType.StepResult: {
        const granted = payload[0]!
        if (granted > 1) return void this.fail(`STEP_RESULT for tag ${id} with ${granted}`)
        if (problem(this.answers.answered(id, "step", "STEP_RESULT"))) this.handler.stepResult(id, granted === 1, payload.toString("utf8", 1))
        return
      }
      default:
        return this.relayFrame(payload)
    }
  }

  private exitFrame(payload: Buffer): void {
    const handle = this.id
    const kind = payload[0]!
    const value = payload.readUInt32LE(1)
    let exit: ExitInfo
    if (kind === 0 && value <= 255) exit = { exitCode: value, signal: null }
    else if (kind === 1 && value >= 1 && value <= 64) exit = { exitCode: null, signal: signalName(value) ?? `SIG${value}` }
    else return void this.fail(`EXIT for p${handle} with kind ${kind} and value ${value}`)
    const stdout = payload.readBigUInt64LE(9)
    const stderr = payload.readBigUInt64LE(17)
    if (stdout > MAX_OFFSET || stderr > MAX_OFFSET) return void this.fail(`EXIT for p${handle} with totals ${stdout} and ${stderr}`)
    const deliver = this.answers.delivers(handle)
    const problem = this.answers.exit(handle, Number(stdout), Number(stderr))
    if (problem !== undefined) return void this.fail(problem)
    if (!deliver) return
    this.handler.exit(handle, exit, payload.readUInt32LE(5), { stdout: Number(stdout), stderr: Number(stderr) }, Number(payload.readBigUInt64LE(25)))
  }

  private relayFrame(payload: Buffer): void {
    const id = this.id
    switch (this.type) {
      case FrameType.RelayOpen: {
        const problem = this.relay.open(id)
        if (problem !== undefined) return void this.fail(problem)
        // A RELAY_CONNECT the server gave up on (and reset) opens unseen: it closes soon.
        if (this.relay.delivers(id)) this.handler.relayOpen(id)
        return
      }
      case FrameType.RelayClosed: {
        const reason = payload[0]!
        const problem = this.relay.closed(id, reason)
        if (problem !== undefined) return void this.fail(problem)
        return this.handler.relayClosed(id, reason !== RelayClosedReason.Clean, reason === RelayClosedReason.Refused)
      }
      case FrameType.RelayEof: {
        const problem = this.relay.eof(id)
        if (problem !== undefined) return void this.fail(problem)
        if (this.relay.delivers(id)) this.handler.relayEof(id)
        return
      }
      default: {
        const bytes = payload.readUInt32LE(0)
        const problem = this.relay.credit(id, bytes)
        if (problem !== undefined) return void this.fail(problem)
        if (this.relay.delivers(id)) this.handler.relayCredit(id, bytes)
      }
    }
  }
}
