/**
 * One connection to a kt-agent, below the requests AgentClient makes: the link, the handshake,
 * decoding every frame, the table of requests waiting for their answer by tag, which processes
 * this connection watches (and holds back, for back-pressure), and the connection's end
 * (`detach`, `shutdown`, or lost). Apart from AgentClient.ts so the requests read on their own.
 *
 * Everything the agent says goes through FrameDecoder first. A protocol violation, like the link's
 * end, ends only this connection: every watch learns it (`onClosed(undefined)`), pending requests
 * fail, `onLost` gets the reason ("agent protocol violation: …"), and nothing is thrown into the
 * caller. Its failures are ProviderErrors of the backend ("Unavailable": the connection is gone).
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import type { ExitInfo } from "../../../services/Backend.js"
import type { AgentChannel } from "./AgentChannel.js"
import * as Handshake from "./AgentHandshake.js"
import { encodeFrame, FrameType, type ProcessRecord, SERVER_STREAM } from "./AgentProtocol.js"
import { FrameDecoder } from "./FrameDecoder.js"
import { RelayHub, type RelayListener } from "./Relay.js"

/** What a watch of one process hears. */
export interface WatchHandlers {
  /** `data` is only valid during the call (its memory is reused): copy what you keep. */
  readonly onOutput: (stream: "stdout" | "stderr", offset: number, data: Uint8Array) => void
  /** Once; after every byte the process itself wrote. `ended`: processes a teardown of its tree ended. */
  readonly onExit: (exit: ExitInfo, ended: number, endMs: number) => void
  /**
   * Once, last. `ended`: as for onExit, since. Undefined: this connection ended (or stopped watching)
   * first — the process itself may well be running on.
   */
  readonly onClosed: (ended: number | undefined) => void
}

/** How bytes move to and from the agent: a socket, or an engine exec of the connector. */
export interface AgentLink {
  /** Chunks from the agent (paused while output is held: back-pressure). */
  readonly channel: AgentChannel
  readonly write: (bytes: Buffer) => void
  /** Ends the link (the agent sees the connection close). */
  readonly close: () => void
}

export interface AgentOptions {
  /** Called when the connection ends, once established, other than through `detach` or `shutdown`. */
  readonly onLost?: ((reason: string) => void) | undefined
  /** Where connections to the agent's relay port go: this connection then carries them. */
  readonly relay?: RelayListener | undefined
  /** The agent's own diagnostics (LOG frames), e.g. a capability bounding set it could not clear. */
  readonly onLog?: ((text: string) => void) | undefined
}

type Pending =
  | { readonly kind: "spawn"; readonly resume: (result: { handle: number; pid: number; startMs: number } | { failed: string } | { error: string }) => void }
  | { readonly kind: "watch"; readonly resume: (result: ProcessRecord | { failed: string } | { error: string }) => void }
  | { readonly kind: "read"; readonly resume: (result: { start: number; total: number; data: Buffer } | { failed: string } | { error: string }) => void; pieces: Array<Buffer>; start: number; total: number }
  | { readonly kind: "list"; readonly resume: (result: Array<ProcessRecord> | { error: string }) => void; readonly records: Array<ProcessRecord> }
  | { readonly kind: "step"; readonly resume: (result: { granted: boolean; holder: string } | { error: string }) => void }

export abstract class AgentConnection {
  protected readonly decoder: FrameDecoder
  protected readonly relay: RelayHub
  protected readonly pending = new Map<number, Pending>()
  protected readonly watches = new Map<number, WatchHandlers>()
  protected readonly unwatched = new Map<number, Array<() => void>>()
  private readonly ended = Deferred.unsafeMake<string>(FiberId.none)
  private readonly greeted = Deferred.unsafeMake<Handshake.Welcome, string>(FiberId.none)
  protected nextTag = 1
  protected nextStream = SERVER_STREAM
  protected dead: string | undefined
  private leaving = false
  private welcomed: Handshake.Welcome | undefined
  private hello: { readonly boot: Buffer; readonly nonce: Buffer; readonly serverNonce: Buffer } | undefined
  /** Processes whose consumers are full: while any, the link is not read. */
  private readonly held = new Set<number>()

  constructor(
    protected readonly backend: string,
    private readonly link: AgentLink,
    key: Buffer,
    private readonly options: AgentOptions = {}
  ) {
    this.relay = new RelayHub(backend, (type, id, payload) => this.send(type, id, payload), options.relay)
    this.decoder = new FrameDecoder({
      hello: (boot, nonce) => {
        const { payload, serverNonce } = Handshake.auth(key, boot, nonce, options.relay !== undefined)
        this.hello = { boot, nonce, serverNonce }
        if (options.relay !== undefined) this.decoder.relay.enable()
        this.send(FrameType.Auth, 0, payload)
      },
      welcome: (payload) => {
        const hello = this.hello!
        const welcome = Handshake.welcome(key, hello.boot, hello.nonce, hello.serverNonce, payload)
        if (welcome === undefined) return this.die("the computer's agent did not prove its key (not the computer's agent)", true)
        this.welcomed = welcome
        Deferred.unsafeDone(this.greeted, Exit.succeed(welcome))
      },
      started: (tag, handle, pid, startMs) => this.answer(tag, "spawn", { handle, pid, startMs }),
      spawnFailed: (tag, reason) => this.answer(tag, "spawn", { failed: reason }),
      output: (handle, stream, offset, data) => this.watches.get(handle)?.onOutput(stream, offset, data),
      exit: (handle, exit, ended, _totals, endMs) => this.watches.get(handle)?.onExit(exit, ended, endMs),
      closed: (handle, ended) => {
        const watch = this.watches.get(handle)
        this.watches.delete(handle)
        this.holdOutput(handle, false)
        watch?.onClosed(ended)
      },
      unwatched: (handle) => {
        const waiting = this.unwatched.get(handle)
        const next = waiting?.shift()
        if (waiting !== undefined && waiting.length === 0) this.unwatched.delete(handle)
        next?.()
      },
      watching: (tag, record) => this.answer(tag, "watch", record),
      readStart: (tag, start, total) => {
        const request = this.pending.get(tag)
        if (request?.kind === "read") {
          request.start = start
          request.total = total
        }
      },
      readData: (tag, data) => {
        const request = this.pending.get(tag)
        if (request?.kind === "read") request.pieces.push(Buffer.from(data))
      },
      readEnd: (tag) => {
        const request = this.pending.get(tag)
        if (request?.kind === "read") this.answer(tag, "read", { start: request.start, total: request.total, data: Buffer.concat(request.pieces) })
      },
      record: (tag, record) => {
        const request = this.pending.get(tag)
        if (request?.kind === "list") request.records.push(record)
      },
      listEnd: (tag) => {
        const request = this.pending.get(tag)
        if (request?.kind === "list") this.answer(tag, "list", request.records)
      },
      failed: (tag, reason) => {
        const request = this.pending.get(tag)
        if (request?.kind === "watch") this.answer(tag, "watch", { failed: reason })
        else if (request?.kind === "read") this.answer(tag, "read", { failed: reason })
      },
      stepResult: (tag, granted, holder) => this.answer(tag, "step", { granted, holder }),
      log: (text) => options.onLog?.(text),
      relayOpen: (id) => this.relay.open(id, this.decoder.relay),
      relayData: (id, data) => this.relay.data(id, data),
      relayEof: (id) => this.relay.eof(id),
      relayCredit: (id, bytes) => this.relay.credit(id, bytes),
      relayClosed: (id, reset) => this.relay.closed(id, reset),
      violation: (reason) => this.die(`agent protocol violation: ${reason}`, true)
    })
    link.channel.start((chunk) => this.push(chunk), () => this.die("the connection to the computer's agent ended", false))
  }

  private answer(tag: number, kind: Pending["kind"], result: unknown): void {
    const request = this.pending.get(tag)
    if (request === undefined || request.kind !== kind) return
    this.pending.delete(tag)
    ;(request.resume as (result: unknown) => void)(result)
  }

  protected unavailable(operation: string, reason: string): ProviderError {
    return providerError(this.backend, operation, "Unavailable", reason)
  }

  private push(chunk: Buffer): void {
    try {
      this.decoder.push(chunk)
    } catch (error) {
      // A handler failed on this input: the connection is unusable, the server is not.
      this.die(`agent protocol violation: the server could not handle a frame: ${error instanceof Error ? error.message : String(error)}`, true)
    }
  }

  private die(reason: string, close: boolean): void {
    if (this.dead !== undefined) return
    this.dead = this.leaving ? "the connection to the computer was closed" : reason
    this.held.clear()
    if (close) this.link.close()
    this.link.channel.destroy()
    this.relay.dead()
    Deferred.unsafeDone(this.greeted, Exit.fail(reason))
    // An attach that never got through says so through `ready`; only an established connection is lost.
    if (!this.leaving && this.welcomed !== undefined) this.options.onLost?.(reason)
    const pending = [...this.pending.values()]
    this.pending.clear()
    for (const request of pending) (request.resume as (result: { error: string }) => void)({ error: this.dead })
    const watches = [...this.watches.values()]
    this.watches.clear()
    for (const watch of watches) watch.onClosed(undefined)
    for (const waiting of this.unwatched.values()) for (const wake of waiting) wake()
    this.unwatched.clear()
    Deferred.unsafeDone(this.ended, Exit.succeed(this.dead))
  }

  protected send(type: number, id: number, payload?: Uint8Array): void {
    if (this.dead === undefined) this.link.write(encodeFrame(type, id, payload))
  }

  /** Succeeds once the agent proved the key; fails with the reason it did not. */
  readonly ready: Effect.Effect<Handshake.Welcome, ProviderError> = Deferred.await(this.greeted).pipe(
    Effect.mapError((reason) => this.unavailable("attach to the computer's agent", reason))
  )

  /** What the agent said when it accepted this connection. */
  get welcome(): Handshake.Welcome | undefined {
    return this.welcomed
  }

  /** The agent's boot id (hex): a new one means the computer's agent was started again. */
  get boot(): string | undefined {
    return this.hello?.boot.toString("hex")
  }

  /** Why the connection is unusable, or undefined while it stands. */
  get failure(): string | undefined {
    return this.dead
  }

  /** Completes with the reason once the connection ended. */
  readonly closed: Effect.Effect<string> = Deferred.await(this.ended)

  /** Sends a request; answers what `make`'s entry is resumed with (`{ error }` when the connection ends first). */
  protected request<R>(operation: string, type: number, payload: Buffer | undefined, make: (resume: (result: R) => void) => Pending) {
    return Effect.async<R, ProviderError>((resume) => {
      if (this.dead !== undefined) return resume(Effect.fail(this.unavailable(operation, this.dead)))
      const tag = this.nextTag++
      const pending = make((result) => resume(Effect.succeed(result)))
      this.pending.set(tag, pending)
      this.decoder.answers.expect(tag, this.expectation(pending, payload))
      this.send(type, tag, payload)
      return Effect.sync(() => this.pending.delete(tag))
    })
  }

  private expectation(pending: Pending, payload: Buffer | undefined) {
    switch (pending.kind) {
      case "watch":
        return { kind: "watch" as const, handle: payload!.readUInt32LE(0), stdout: Number(payload!.readBigUInt64LE(4)), stderr: Number(payload!.readBigUInt64LE(12)) }
      case "read":
        return { kind: "read" as const, from: Number(payload!.readBigUInt64LE(5)), most: payload!.readUInt32LE(13) }
      default:
        return { kind: pending.kind }
    }
  }

  /**
   * Backpressure: while any watched process holds its output, the link is not read; the agent then
   * keeps this connection's output in its store (the processes never wait for a server).
   */
  holdOutput(handle: number, hold: boolean): void {
    if (this.dead !== undefined) return
    const before = this.held.size
    if (hold && this.watches.has(handle)) this.held.add(handle)
    else this.held.delete(handle)
    if (before === 0 && this.held.size > 0) this.link.channel.pause()
    else if (before > 0 && this.held.size === 0) this.link.channel.resume()
  }

  /** Lets go of the computer: the connection closes, the agent and its processes live on. */
  readonly detach: Effect.Effect<void> = Effect.suspend(() => {
    this.leaving = true
    this.link.close()
    return this.closed.pipe(
      Effect.timeout("2 seconds"),
      Effect.interruptible,
      Effect.catchAll(() => Effect.sync(() => this.die("the connection to the computer was closed", true))),
      Effect.asVoid
    )
  })

  /**
   * Ends the computer's agent: every process tree it started ends and it exits. Bounded (5 s): the
   * connection is given up after that.
   */
  readonly shutdown: Effect.Effect<void> = Effect.suspend(() => {
    this.leaving = true
    this.send(FrameType.Shutdown, 0)
    return this.closed.pipe(
      Effect.timeout("5 seconds"),
      Effect.interruptible,
      Effect.catchAll(() => Effect.sync(() => this.die("the computer was closed", true))),
      Effect.asVoid
    )
  })
}
