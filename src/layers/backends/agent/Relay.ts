/**
 * The server's end of the agent's relay (native/kt-agent/relay.c): each connection accepted on the
 * agent's loopback port inside the computer arrives here as a RelayConnection, for the server's
 * egress proxy to serve.
 *
 * Flow control is per stream: the agent sends at most RELAY_WINDOW bytes that the server has not
 * credited, and the server credits only what its consumer has read; the server sends at most
 * RELAY_WINDOW bytes the agent has not credited (written to the client socket). A slow consumer
 * therefore stalls only its own stream, and each stream holds at most a window per direction.
 *
 * The server opens streams too (`RelayHub.connect`, for preview URLs): the agent connects to a
 * loopback port inside the computer and the stream works the same way from then on.
 */
import * as Effect from "effect/Effect"
import * as FiberSet from "effect/FiberSet"
import * as Stream from "effect/Stream"
import type * as Scope from "effect/Scope"
import { Duplex } from "node:stream"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import { encodeU32, FrameType, RELAY_CHUNK, RELAY_WINDOW, SERVER_STREAM } from "./AgentProtocol.js"

/** One connection to the relay port, made by a process inside the computer. */
export interface RelayConnection {
  readonly id: number
  /**
   * The connection as a Node duplex (bytes from the client are readable, writes go back to it), for
   * code that wants a socket: `http.Server#emit("connection", socket)`, `pipeline`, TLS.
   */
  readonly socket: Duplex
  /** The client's bytes; ends when the client shuts down its side, fails when the connection is reset. */
  readonly read: Stream.Stream<Uint8Array, ProviderError>
  /** Sends bytes to the client; waits while its window is full. */
  readonly write: (data: Uint8Array) => Effect.Effect<void, ProviderError>
  /** No more bytes to the client (half-close); the client can still send. */
  readonly end: Effect.Effect<void>
  /**
   * Closes gracefully: the client gets EOF after everything written, and whatever it still sends is
   * read and discarded until it closes too (closing a TCP socket with unread input would reset it and
   * could cut the client's last bytes off).
   */
  readonly close: Effect.Effect<void>
  /** Aborts the connection: the client sees a reset. */
  readonly abort: Effect.Effect<void>
}

/** Receives the relay's connections (see `listener`). */
export type RelayListener = (connection: RelayConnection) => void

/** A relay handler: runs once per connection; the connection is closed when it ends. */
export type RelayHandler = (connection: RelayConnection) => Effect.Effect<void>

/** The relay of the computers of a backend (host, Docker). */
export interface RelaySettings {
  /** The loopback port the agent listens on inside each computer (e.g. 3128). */
  readonly port: number
  /** Serves one connection made inside the computer `computerId`; it is closed when the effect ends. */
  readonly handler: (computerId: string, connection: RelayConnection) => Effect.Effect<void>
}

type Send = (type: number, id: number, payload?: Uint8Array) => void

/** What a stream tells the decoder, so that it can check the agent's answers. */
interface FlowTracker {
  relaySent(id: number, bytes: number): void
  relayConsumed(id: number, bytes: number): void
  relayReset(id: number): void
}


class RelaySocket extends Duplex {
  private credit = RELAY_WINDOW
  private received = 0
  private credited = 0
  private pending: { data: Buffer; done: (error?: Error | null) => void } | undefined
  private finalDone: ((error?: Error | null) => void) | undefined
  /** The agent ended the stream, or the server reset it: nothing more goes either way. */
  gone = false

  constructor(readonly id: number, private readonly send: Send, private readonly flow: FlowTracker) {
    super({ readableHighWaterMark: RELAY_WINDOW, writableHighWaterMark: RELAY_CHUNK, allowHalfOpen: true })
    // A reset or a dead agent destroys the socket with an error: its users see it through read and
    // write; an 'error' event nobody listens to must not take the server down.
    this.on("error", () => {})
  }

  /** The agent's bytes for this stream (a view of the channel's buffer: copied). */
  deliver(data: Uint8Array): void {
    this.received += data.byteLength
    this.push(Buffer.from(data))
    this.grant()
  }

  /** Credits what the consumer has taken out of the readable buffer. */
  private grant(): void {
    if (this.gone) return
    const consumed = this.received - this.readableLength - this.credited
    // Small credits are batched, except when everything was read (the agent may be waiting for it).
    if (consumed <= 0 || (consumed < RELAY_WINDOW / 4 && this.readableLength > 0)) return
    this.credited += consumed
    this.flow.relayConsumed(this.id, consumed)
    this.send(FrameType.RelayCreditIn, this.id, encodeU32(consumed))
  }

  addCredit(bytes: number): void {
    this.credit += bytes
    this.pump()
  }

  override _read(): void {
    this.grant()
  }

  /**
   * Every way of consuming goes through read() (flowing mode, async iteration, paused reads), except
   * a chunk handed straight to a 'data' listener, which `deliver` credits. Crediting here too means
   * an emptied buffer is always credited, so a full window can never wait for a _read that Node
   * will not call.
   */
  override read(size?: number): any {
    const chunk: unknown = super.read(size)
    this.grant()
    return chunk
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (error?: Error | null) => void): void {
    if (this.gone) return done(new Error("the relay connection is closed"))
    this.pending = { data: chunk, done }
    this.pump()
  }

  private pump(): void {
    while (this.pending !== undefined && this.credit > 0 && !this.gone) {
      const { data, done } = this.pending
      const n = Math.min(data.length, this.credit, RELAY_CHUNK)
      this.credit -= n
      this.flow.relaySent(this.id, n)
      this.send(FrameType.RelayDataIn, this.id, data.subarray(0, n))
      if (n === data.length) {
        this.pending = undefined
        done()
      } else {
        this.pending.data = data.subarray(n)
      }
    }
    if (this.pending === undefined && this.finalDone !== undefined) {
      const done = this.finalDone
      this.finalDone = undefined
      this.send(FrameType.RelayEofIn, this.id)
      done()
    }
  }

  override _final(done: (error?: Error | null) => void): void {
    if (this.gone) return done()
    this.finalDone = done
    this.pump()
  }

  override _destroy(error: Error | null, done: (error?: Error | null) => void): void {
    // Both directions ended cleanly (autoDestroy): the agent closes the stream by itself. Otherwise abort.
    const clean = error === null && this.writableFinished && this.readableEnded
    if (!this.gone && !clean) {
      this.gone = true
      this.flow.relayReset(this.id)
      this.send(FrameType.RelayReset, this.id)
    }
    this.pending?.done(error ?? new Error("the relay connection was closed"))
    this.pending = undefined
    done(error)
  }
}

/** A relay connection failed: the client reset it, or the computer's agent is gone. */
const failed = (backend: string, operation: string, detail: string, cause?: unknown) =>
  providerError(backend, operation, "Unavailable", detail, cause)

const connectionOf = (socket: RelaySocket, backend: string): RelayConnection => ({
  id: socket.id,
  socket,
  // Reading to the end must not destroy the socket (Node's default): the other direction may go on.
  read: Stream.fromAsyncIterable(
    { [Symbol.asyncIterator]: () => socket.iterator({ destroyOnReturn: false }) as AsyncIterator<Buffer> },
    (error) => failed(backend, "read from a relay connection", error instanceof Error ? error.message : String(error), error)
  ),
  write: (data) =>
    Effect.async<void, ProviderError>((resume) => {
      if (socket.destroyed || socket.writableEnded) {
        return resume(Effect.fail(failed(backend, "write to a relay connection", "the connection is closed")))
      }
      socket.write(data, (error) =>
        resume(error ? Effect.fail(failed(backend, "write to a relay connection", error.message, error)) : Effect.void))
    }),
  end: Effect.async<void>((resume) => {
    if (socket.destroyed || socket.writableEnded) return resume(Effect.void)
    socket.end(() => resume(Effect.void))
  }),
  close: Effect.sync(() => {
    if (socket.destroyed) return
    if (!socket.writableEnded) socket.end()
    socket.resume()
  }),
  abort: Effect.sync(() => {
    socket.destroy()
  })
})

/** What waits for the answer to a RELAY_CONNECT: undefined once the opener gave up (and reset it). */
type Opening = ((result: Duplex | string) => void) | undefined

/** The relay streams of one agent, driven by AgentClient. */
export class RelayHub {
  private readonly sockets = new Map<number, RelaySocket>()
  private readonly opening = new Map<number, Opening>()

  constructor(
    private readonly backend: string,
    private readonly send: Send,
    private readonly listener: RelayListener | undefined
  ) {}

  /** Streams the server opened or is opening: bounded by the caller (AgentClient) to RELAY_MAX_STREAMS. */
  get serverStreams(): number {
    let n = this.opening.size
    for (const id of this.sockets.keys()) if (id >= SERVER_STREAM) n++
    return n
  }

  /**
   * Waits for the answer to the RELAY_CONNECT `id` (sent by the caller): `done` gets the connected
   * socket, or why there is none. `cancel` gives up: a stream that opens later is reset.
   */
  connect(id: number, flow: FlowTracker, done: (result: Duplex | string) => void): { readonly cancel: () => void } {
    this.opening.set(id, done)
    return {
      cancel: () => {
        if (this.opening.get(id) === undefined) return
        this.opening.set(id, undefined)
        flow.relayReset(id)
        this.send(FrameType.RelayReset, id)
      }
    }
  }

  open(id: number, flow: FlowTracker): void {
    const socket = new RelaySocket(id, this.send, flow)
    if (id >= SERVER_STREAM) {
      const done = this.opening.get(id)
      this.opening.delete(id)
      // Given up: the reset is on its way, and the stream's frames are dropped until it closes.
      if (done === undefined) return
      this.sockets.set(id, socket)
      return done(socket)
    }
    this.sockets.set(id, socket)
    if (this.listener === undefined) {
      socket.destroy()
      return
    }
    this.listener(connectionOf(socket, this.backend))
  }

  data(id: number, data: Uint8Array): void {
    this.sockets.get(id)?.deliver(data)
  }

  eof(id: number): void {
    this.sockets.get(id)?.push(null)
  }

  credit(id: number, bytes: number): void {
    this.sockets.get(id)?.addCredit(bytes)
  }

  closed(id: number, reset: boolean): void {
    if (this.opening.has(id)) {
      const done = this.opening.get(id)
      this.opening.delete(id)
      return done?.("nothing accepts connections on that port inside the computer")
    }
    const socket = this.sockets.get(id)
    this.sockets.delete(id)
    if (socket === undefined || socket.gone) return
    socket.gone = true
    if (reset) socket.destroy(new Error("the connection was reset"))
    else socket.push(null)
  }

  /** The agent is gone: every connection fails. */
  dead(): void {
    for (const socket of this.sockets.values()) {
      socket.gone = true
      socket.destroy(new Error("the computer's agent is gone"))
    }
    this.sockets.clear()
    for (const done of this.opening.values()) done?.("the computer's agent is gone")
    this.opening.clear()
  }
}

/**
 * A RelayListener that runs `handler` for each connection in a fiber of the Scope (interrupted when
 * it closes), and closes the connection when the handler ends.
 */
export const listener = (handler: RelayHandler): Effect.Effect<RelayListener, never, Scope.Scope> =>
  Effect.gen(function*() {
    const run = yield* FiberSet.makeRuntime<never>()
    return (connection) => {
      run(handler(connection).pipe(Effect.ensuring(connection.close)))
    }
  })
