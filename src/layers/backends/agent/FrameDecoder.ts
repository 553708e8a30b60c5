/**
 * The server's decoder of the agent's frames. The agent runs inside the computer, so its channel is
 * untrusted input: every frame is checked before anything acts on it, and the first violation stops
 * the decoder for good (its owner ends that computer with the reason). Checked:
 *   - the header: a known agent -> server type, a payload length within that type's bound (before
 *     anything is allocated or buffered), READY first and once;
 *   - the payload: exact sizes and value ranges (exit kind, code, signal, relay reason);
 *   - the protocol state of each id, against what the server asked for: STARTED or SPAWN_FAILED only
 *     for a requested spawn, output only for a started process, one EXIT, CLOSED only after EXIT,
 *     RELEASED only for a release; frames for a process being released are dropped until RELEASED;
 *   - relay streams: new ids only (increasing), at most RELAY_MAX_STREAMS open, DATA within the
 *     window the server granted, CREDIT only for data the server sent; streams the server opened
 *     (RELAY_CONNECT, ids with the top bit) open only when asked for, and only they may be refused.
 * Memory is bounded: at most a header and one control payload (<= MAX_TEXT bytes) are buffered;
 * output and relay data are handed over as views of the input chunk, never copied, never gathered.
 * The decoder does no I/O and never throws for any input.
 */
import type { ExitInfo } from "../../../services/Backend.js"
import { signalName } from "../../../domain/Signals.js"
import {
  FrameType,
  HEADER_SIZE,
  MAX_OUTPUT,
  MAX_TEXT,
  PROTOCOL_VERSION,
  RELAY_CHUNK,
  RELAY_MAX_STREAMS,
  RELAY_WINDOW,
  RelayClosedReason,
  SERVER_STREAM
} from "./AgentProtocol.js"

/** What the decoder reports. Output `data` is only valid during the call (it views the input chunk). */
export interface DecoderHandler {
  readonly ready: (version: number, relayPort: number) => void
  readonly started: (id: number, pid: number) => void
  readonly spawnFailed: (id: number, reason: string) => void
  readonly output: (id: number, stream: "stdout" | "stderr", data: Uint8Array) => void
  /** `ended`: processes a teardown of this process's tree ended so far. */
  readonly exit: (id: number, exit: ExitInfo, ended: number) => void
  readonly closed: (id: number, ended: number) => void
  readonly released: (id: number) => void
  readonly log: (text: string) => void
  readonly relayOpen: (id: number) => void
  readonly relayData: (id: number, data: Uint8Array) => void
  readonly relayEof: (id: number) => void
  readonly relayCredit: (id: number, bytes: number) => void
  /** `refused`: a stream the server asked for could not connect. */
  readonly relayClosed: (id: number, reset: boolean, refused: boolean) => void
  /** Once, then nothing more: the channel broke the protocol. */
  readonly violation: (reason: string) => void
}

type ProcessState = "spawning" | "running" | "exited" | "releasing"
interface StreamState {
  /** A RELAY_CONNECT not answered yet. */
  connecting: boolean
  resetting: boolean
  agentEof: boolean
  /** Bytes of the agent's DATA the server has not credited yet. */
  agentUnacked: number
  /** Bytes of the server's DATA the agent has not credited yet. */
  serverUnacked: number
}

const NAMES: Readonly<Record<number, string>> = Object.fromEntries(
  Object.entries(FrameType).map(([name, type]) => [type, name.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase()])
)

/** [min, max] payload bytes of each agent -> server type; absent: unknown type. */
const BOUNDS: Readonly<Record<number, readonly [number, number]>> = {
  [FrameType.Ready]: [8, 8],
  [FrameType.Started]: [4, 4],
  [FrameType.SpawnFailed]: [0, MAX_TEXT],
  [FrameType.Stdout]: [1, MAX_OUTPUT],
  [FrameType.Stderr]: [1, MAX_OUTPUT],
  [FrameType.Exit]: [9, 9],
  [FrameType.Closed]: [4, 4],
  [FrameType.Log]: [0, MAX_TEXT],
  [FrameType.Released]: [0, 0],
  [FrameType.RelayOpen]: [0, 0],
  [FrameType.RelayData]: [1, RELAY_CHUNK],
  [FrameType.RelayEof]: [0, 0],
  [FrameType.RelayCredit]: [4, 4],
  [FrameType.RelayClosed]: [1, 1]
}

/** The kernel's PID_MAX_LIMIT. */
const PID_MAX = 4_194_304

const isStreamed = (type: number) => type === FrameType.Stdout || type === FrameType.Stderr || type === FrameType.RelayData

export class FrameDecoder {
  private readonly header = Buffer.alloc(HEADER_SIZE)
  private headerFill = 0
  private type = 0
  private id = 0
  private remaining = 0
  private inPayload = false
  private readonly control = Buffer.alloc(MAX_TEXT)
  private controlLength = 0
  private controlFill = 0
  private wasReady = false
  private relayEnabled = false
  private lastStream = 0
  private failed = false
  private readonly processes = new Map<number, ProcessState>()
  private readonly streams = new Map<number, StreamState>()

  constructor(private readonly handler: DecoderHandler) {}

  /** Whether a violation stopped the decoder. */
  get broken(): boolean {
    return this.failed
  }

  // ---- what the server did (the decoder checks the agent's answers against it) ----

  /** A SPAWN or SPAWN_TTY with this id was sent. */
  expectSpawn(id: number): void {
    if (!this.processes.has(id)) this.processes.set(id, "spawning")
  }

  /** A RELEASE was sent: the process's frames are dropped until RELEASED. */
  releasing(id: number): void {
    if (this.processes.has(id)) this.processes.set(id, "releasing")
  }

  /** Whether RELEASE makes sense for this id (it is known and not released yet). */
  isLive(id: number): boolean {
    const state = this.processes.get(id)
    return state !== undefined && state !== "releasing"
  }

  /** A RELAY_CONNECT with this id was sent: its RELAY_OPEN (or RELAY_CLOSED) is expected. */
  expectConnect(id: number): void {
    this.streams.set(id, { connecting: true, resetting: false, agentEof: false, agentUnacked: 0, serverUnacked: 0 })
  }

  /** The server sent `bytes` of relay DATA on the stream. */
  relaySent(id: number, bytes: number): void {
    const stream = this.streams.get(id)
    if (stream) stream.serverUnacked += bytes
  }

  /** The server credited `bytes` of the agent's DATA on the stream. */
  relayConsumed(id: number, bytes: number): void {
    const stream = this.streams.get(id)
    if (stream) stream.agentUnacked = Math.max(0, stream.agentUnacked - bytes)
  }

  /** The server sent RELAY_RESET: the stream's frames are dropped until RELAY_CLOSED. */
  relayReset(id: number): void {
    const stream = this.streams.get(id)
    if (stream) stream.resetting = true
  }

  // ---- decoding ----

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
          this.endControl()
          continue
        }
        this.inPayload = true
        continue
      }
      const n = Math.min(this.remaining, end - offset)
      if (isStreamed(this.type)) {
        this.streamPiece(buffer.subarray(offset, offset + n))
      } else {
        buffer.copy(this.control, this.controlFill, offset, offset + n)
        this.controlFill += n
      }
      offset += n
      this.remaining -= n
      if (this.remaining === 0) {
        this.inPayload = false
        if (!isStreamed(this.type)) this.endControl()
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
    if (!this.wasReady && type !== FrameType.Ready) return this.fail(`${name} before READY`)
    if ((type === FrameType.Ready || type === FrameType.Log) && id !== 0) return this.fail(`${name} with id ${id} (must be 0)`)
    this.type = type
    this.id = id
    this.remaining = length
    this.controlLength = isStreamed(type) ? 0 : length
    this.controlFill = 0
    switch (type) {
      case FrameType.Stdout:
      case FrameType.Stderr: {
        const state = this.processes.get(id)
        if (state === "running" || state === "exited" || state === "releasing") return true
        return this.fail(`${name} for process ${id}, which ${state === undefined ? "was never started" : "has not started"}`)
      }
      case FrameType.RelayData: {
        const stream = this.streams.get(id)
        if (stream === undefined || stream.connecting) return this.fail(`RELAY_DATA for stream ${id}, which is not open`)
        if (stream.resetting) return true
        if (stream.agentEof) return this.fail(`RELAY_DATA for stream ${id} after its EOF`)
        if (stream.agentUnacked + length > RELAY_WINDOW) {
          return this.fail(`RELAY_DATA beyond the window of stream ${id} (${stream.agentUnacked} + ${length} > ${RELAY_WINDOW})`)
        }
        stream.agentUnacked += length
        return true
      }
      default:
        return true
    }
  }

  private streamPiece(data: Buffer): void {
    const state = this.type === FrameType.RelayData ? this.streams.get(this.id) : this.processes.get(this.id)
    if (state === undefined) return
    if (this.type === FrameType.RelayData) {
      if (!(state as StreamState).resetting) this.handler.relayData(this.id, data)
    } else if (state === "running" || state === "exited") {
      this.handler.output(this.id, this.type === FrameType.Stdout ? "stdout" : "stderr", data)
    }
  }

  private endControl(): void {
    const payload = this.control.subarray(0, this.controlLength)
    switch (this.type) {
      case FrameType.Ready: {
        const version = payload.readUInt32LE(0)
        const relayPort = payload.readUInt32LE(4)
        if (this.wasReady) return void this.fail("a second READY")
        if (version !== PROTOCOL_VERSION) return void this.fail(`the agent speaks protocol ${version}, not ${PROTOCOL_VERSION}`)
        if (relayPort > 65535) return void this.fail(`READY with relay port ${relayPort}`)
        this.wasReady = true
        this.relayEnabled = relayPort !== 0
        return this.handler.ready(version, relayPort)
      }
      case FrameType.Log:
        return this.handler.log(payload.toString("utf8"))
      case FrameType.Started:
      case FrameType.SpawnFailed:
      case FrameType.Exit:
      case FrameType.Closed:
      case FrameType.Released:
        return this.processFrame(payload)
      default:
        return this.relayFrame(payload)
    }
  }

  private processFrame(payload: Buffer): void {
    const id = this.id
    const type = this.type
    const state = this.processes.get(id)
    const name = NAMES[type]!
    if (state === undefined) return void this.fail(`${name} for process ${id}, which the server never started`)
    if (state === "releasing") {
      if (type === FrameType.Released) {
        this.processes.delete(id)
        this.handler.released(id)
      }
      return
    }
    switch (type) {
      case FrameType.Started: {
        if (state !== "spawning") return void this.fail(`a second STARTED for process ${id}`)
        const pid = payload.readUInt32LE(0)
        if (pid === 0 || pid > PID_MAX) return void this.fail(`STARTED with pid ${pid} for process ${id}`)
        this.processes.set(id, "running")
        return this.handler.started(id, pid)
      }
      case FrameType.SpawnFailed:
        if (state !== "spawning") return void this.fail(`SPAWN_FAILED for process ${id}, which had started`)
        this.processes.delete(id)
        return this.handler.spawnFailed(id, payload.toString("utf8"))
      case FrameType.Exit: {
        if (state !== "running") {
          return void this.fail(state === "exited" ? `a second EXIT for process ${id}` : `EXIT for process ${id} before STARTED`)
        }
        const kind = payload[0]!
        const value = payload.readUInt32LE(1)
        let exit: ExitInfo
        if (kind === 0 && value <= 255) exit = { exitCode: value, signal: null }
        else if (kind === 1 && value >= 1 && value <= 64) exit = { exitCode: null, signal: signalName(value) ?? `SIG${value}` }
        else return void this.fail(`EXIT for process ${id} with kind ${kind} and value ${value}`)
        this.processes.set(id, "exited")
        return this.handler.exit(id, exit, payload.readUInt32LE(5))
      }
      case FrameType.Closed:
        if (state !== "exited") return void this.fail(`CLOSED for process ${id} before its EXIT`)
        this.processes.delete(id)
        return this.handler.closed(id, payload.readUInt32LE(0))
      default:
        return void this.fail(`RELEASED for process ${id}, which was not released`)
    }
  }

  /** The server's streams still connecting: not counted against the agent's own. */
  private connects(): number {
    let n = 0
    for (const stream of this.streams.values()) if (stream.connecting) n++
    return n
  }

  private relayFrame(payload: Buffer): void {
    const id = this.id
    const stream = this.streams.get(id)
    const name = NAMES[this.type]!
    if (this.type === FrameType.RelayOpen && stream?.connecting === true) {
      stream.connecting = false
      return stream.resetting ? undefined : this.handler.relayOpen(id)
    }
    if (this.type === FrameType.RelayOpen) {
      if (id >= SERVER_STREAM) return void this.fail(`RELAY_OPEN for stream ${id}, which the server did not ask for`)
      if (!this.relayEnabled) return void this.fail("RELAY_OPEN without a relay")
      if (id <= this.lastStream) return void this.fail(`RELAY_OPEN for stream ${id}, not a new id`)
      if (this.streams.size >= RELAY_MAX_STREAMS + this.connects()) return void this.fail(`more than ${RELAY_MAX_STREAMS} relay streams`)
      this.lastStream = id
      this.streams.set(id, { connecting: false, resetting: false, agentEof: false, agentUnacked: 0, serverUnacked: 0 })
      return this.handler.relayOpen(id)
    }
    if (stream === undefined) return void this.fail(`${name} for stream ${id}, which is not open`)
    if (this.type === FrameType.RelayClosed) {
      const reason = payload[0]!
      const refusable = stream.connecting && reason === RelayClosedReason.Refused
      if (reason > RelayClosedReason.Reset && !refusable) return void this.fail(`RELAY_CLOSED for stream ${id} with reason ${reason}`)
      this.streams.delete(id)
      return this.handler.relayClosed(id, reason !== RelayClosedReason.Clean, refusable)
    }
    if (stream.connecting) return void this.fail(`${name} for stream ${id}, which is not connected yet`)
    if (stream.resetting) return
    if (this.type === FrameType.RelayEof) {
      if (stream.agentEof) return void this.fail(`a second RELAY_EOF for stream ${id}`)
      stream.agentEof = true
      return this.handler.relayEof(id)
    }
    const bytes = payload.readUInt32LE(0)
    if (bytes === 0 || bytes > stream.serverUnacked) {
      return void this.fail(`RELAY_CREDIT of ${bytes} bytes for stream ${id}, which has ${stream.serverUnacked} in flight`)
    }
    stream.serverUnacked -= bytes
    this.handler.relayCredit(id, bytes)
  }
}
