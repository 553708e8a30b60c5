/**
 * What the server knows of one agent connection's relay streams, so that FrameDecoder can check the
 * agent's relay frames: ids are new and increasing, at most RELAY_MAX_STREAMS are open, DATA stays
 * within the window the server granted and stops after EOF, CREDIT only for data the server sent;
 * frames of a stream the server reset are dropped until its RELAY_CLOSED. Streams the server opens
 * (RELAY_CONNECT, ids with the top bit) open only when asked for, once, and only they may be refused.
 * Each method answers a violation's reason, or undefined. Relay.ts tells it what the server sends
 * (the FlowTracker side).
 */
import { RELAY_MAX_STREAMS, RELAY_WINDOW, RelayClosedReason, SERVER_STREAM } from "./AgentProtocol.js"

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

export class RelayBook {
  private readonly streams = new Map<number, StreamState>()
  private lastStream = 0
  private enabled = false

  /** This connection asked the agent for relay streams (AUTH's flag): RELAY_OPEN may come. */
  enable(): void {
    this.enabled = true
  }

  // ---- what the server did ----

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

  // ---- what the agent says ----

  /** Whether the stream's frames reach the handler (not while it is being reset). */
  delivers(id: number): boolean {
    return this.streams.get(id)?.resetting === false
  }

  /** The server's streams still connecting: not counted against the agent's own. */
  private connects(): number {
    let n = 0
    for (const stream of this.streams.values()) if (stream.connecting) n++
    return n
  }

  open(id: number): string | undefined {
    const asked = this.streams.get(id)
    if (asked?.connecting === true) {
      asked.connecting = false
      return undefined
    }
    if (id >= SERVER_STREAM) return `RELAY_OPEN for stream ${id}, which the server did not ask for`
    if (!this.enabled) return "RELAY_OPEN on a connection that carries no relay streams"
    if (id <= this.lastStream) return `RELAY_OPEN for stream ${id}, not a new id`
    if (this.streams.size >= RELAY_MAX_STREAMS + this.connects()) return `more than ${RELAY_MAX_STREAMS} relay streams`
    this.lastStream = id
    this.streams.set(id, { connecting: false, resetting: false, agentEof: false, agentUnacked: 0, serverUnacked: 0 })
    return undefined
  }

  data(id: number, length: number): string | undefined {
    const stream = this.streams.get(id)
    if (stream === undefined || stream.connecting) return `RELAY_DATA for stream ${id}, which is not open`
    if (stream.resetting) return undefined
    if (stream.agentEof) return `RELAY_DATA for stream ${id} after its EOF`
    if (stream.agentUnacked + length > RELAY_WINDOW) {
      return `RELAY_DATA beyond the window of stream ${id} (${stream.agentUnacked} + ${length} > ${RELAY_WINDOW})`
    }
    stream.agentUnacked += length
    return undefined
  }

  eof(id: number): string | undefined {
    const stream = this.streams.get(id)
    if (stream === undefined) return `RELAY_EOF for stream ${id}, which is not open`
    if (stream.connecting) return `RELAY_EOF for stream ${id}, which is not connected yet`
    if (stream.resetting) return undefined
    if (stream.agentEof) return `a second RELAY_EOF for stream ${id}`
    stream.agentEof = true
    return undefined
  }

  credit(id: number, bytes: number): string | undefined {
    const stream = this.streams.get(id)
    if (stream === undefined) return `RELAY_CREDIT for stream ${id}, which is not open`
    if (stream.connecting) return `RELAY_CREDIT for stream ${id}, which is not connected yet`
    if (stream.resetting) return undefined
    if (bytes === 0 || bytes > stream.serverUnacked) {
      return `RELAY_CREDIT of ${bytes} bytes for stream ${id}, which has ${stream.serverUnacked} in flight`
    }
    stream.serverUnacked -= bytes
    return undefined
  }

  /** `reason` Refused (2) only for a RELAY_CONNECT not answered yet. */
  closed(id: number, reason: number): string | undefined {
    const stream = this.streams.get(id)
    if (stream === undefined) return `RELAY_CLOSED for stream ${id}, which is not open`
    const refusable = stream.connecting && reason === RelayClosedReason.Refused
    if (reason > RelayClosedReason.Reset && !refusable) return `RELAY_CLOSED for stream ${id} with reason ${reason}`
    this.streams.delete(id)
    return undefined
  }
}
