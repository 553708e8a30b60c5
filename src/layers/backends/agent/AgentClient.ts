/**
 * The server side of the kt-agent protocol (AgentProtocol.ts, native/kt-agent.c): one AgentClient
 * drives one agent — one computer. It is a plain class fed by the agent's channel; backends use it
 * through AgentProcesses.ts, and start it with AgentLauncher.ts (host) or DockerAgent.ts.
 *
 * Everything the agent says goes through FrameDecoder first. A protocol violation, like the agent's
 * death, ends only this computer: every process of it ends (SIGKILL), `onLost` gets the reason
 * ("agent protocol violation: …"), the agent is killed, and nothing is thrown into the caller.
 * Its failures are ProviderErrors of the backend that runs it ("Unavailable": the agent is gone).
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberId from "effect/FiberId"
import type { Duplex, Readable, Writable } from "node:stream"
import type { AgentChannel } from "./AgentChannel.js"
import { type ProviderError, providerError, SpawnFailed } from "../../../domain/Errors.js"
import { signalNumber } from "../../../domain/Signals.js"
import type { ExitInfo } from "../../../services/Backend.js"
import {
  type AgentSpawnSpec,
  encodeFrame,
  encodeSize,
  encodeSpawn,
  encodeU16,
  encodeU32,
  FrameType,
  RELAY_MAX_STREAMS,
  SERVER_STREAM
} from "./AgentProtocol.js"
import { FrameDecoder } from "./FrameDecoder.js"
import { RelayHub, type RelayListener } from "./Relay.js"

/** Callbacks of one process started through the agent. */
export interface ProcessHandlers {
  /** `data` is only valid during the call (its memory is reused for the next read): copy what you keep. */
  readonly onStdout: (data: Uint8Array) => void
  readonly onStderr: (data: Uint8Array) => void
  /** Once; after every byte the process itself wrote. `ended`: processes a teardown of its tree ended. */
  readonly onExit: (exit: ExitInfo, ended: number) => void
  /** Once, last: no more output will come. `ended`: as for onExit, since; undefined when the agent died. */
  readonly onClosed: (ended: number | undefined) => void
}

type SpawnResult = { readonly pid: number } | { readonly failed: string } | { readonly error: string }

interface Entry {
  readonly handlers: ProcessHandlers
  pending: ((result: SpawnResult) => void) | undefined
  exited: boolean
}

/**
 * The agent process as the client needs it: a child process here, or an agent started inside a
 * container through the engine (see DockerAgent.ts). `close` comes after its output ended.
 */
export interface AgentProcess {
  readonly stdin: Writable | null
  readonly stdout: Readable | null
  readonly stderr: Readable | null
  readonly pid?: number | undefined
  on(event: "error", listener: (error: Error) => void): unknown
  on(event: "close", listener: (code: number | null, signal: NodeJS.Signals | null) => void): unknown
  kill(signal?: NodeJS.Signals): boolean
}

export interface AgentOptions {
  /** Called when the agent dies or breaks the protocol other than through `shutdown`. */
  readonly onLost?: ((reason: string) => void) | undefined
  /** Where connections to the agent's relay port go (the agent must have been given --relay-port). */
  readonly relay?: RelayListener | undefined
  /** The agent's own diagnostics (LOG frames), e.g. a capability bounding set it could not clear. */
  readonly onLog?: ((text: string) => void) | undefined
}

/** How long to wait for the rest of the channel after the agent exited. */
const DRAIN_AFTER_EXIT = "1 second"
/**
 * How much of the agent process's stderr is read into its messages: what its launcher, bubblewrap
 * (through kt-sandbox's bounded relay) and the agent itself say is short; the rest is not looked at.
 */
const STDERR_LIMIT = 64 * 1024
/** Control characters (terminal escapes included) of stderr text, shown as "?" in messages. */
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g

export class AgentClient {
  private readonly entries = new Map<number, Entry>()
  /**
   * Opens when the client is done (the agent died, broke the protocol, or was shut down). Latches:
   * the channel's callbacks open them synchronously, and every fiber waiting goes on.
   */
  private readonly gone = Effect.unsafeMakeLatch(false)
  /** Opens when the agent process exited (its channel may still hold frames). */
  private readonly agentExited = Effect.unsafeMakeLatch(false)
  /** Why the agent process exited, once it has (its channel may still hold frames). */
  private exitReason: string | undefined
  private readonly decoder: FrameDecoder
  private readonly relay: RelayHub
  private nextId = 1
  private nextStream = SERVER_STREAM
  private dead: string | undefined
  private closing = false
  private stderrTail = ""
  private stderrBytes = 0
  /** Done once the agent reported READY, or failed with why it never will. */
  private readonly readiness = Deferred.unsafeMake<void, string>(FiberId.none)
  /** Processes whose consumers are full: while any, the channel is not read. */
  private readonly held = new Set<number>()

  /**
   * `channel`: where the agent's frames come from (a FIFO, or the process's stdout); it is paused
   * while output is held. `channelIsStdout`: the process's 'close' comes after the channel ended.
   */
  constructor(
    private readonly backend: string,
    private readonly child: AgentProcess,
    private readonly channel: AgentChannel,
    channelIsStdout: boolean,
    private readonly options: AgentOptions = {}
  ) {
    this.relay = new RelayHub(backend, (type, id, payload) => this.send(type, id, payload), options.relay)
    this.decoder = new FrameDecoder({
      ready: () => Deferred.unsafeDone(this.readiness, Exit.void),
      started: (id, pid) => this.settle(id, { pid }),
      spawnFailed: (id, reason) => {
        const entry = this.entries.get(id)
        this.entries.delete(id)
        entry?.pending?.({ failed: reason })
      },
      output: (id, stream, data) => {
        const entry = this.entries.get(id)
        if (entry === undefined) return
        if (stream === "stdout") entry.handlers.onStdout(data)
        else entry.handlers.onStderr(data)
      },
      exit: (id, exit, ended) => {
        const entry = this.entries.get(id)
        if (entry === undefined || entry.exited) return
        entry.exited = true
        entry.handlers.onExit(exit, ended)
      },
      closed: (id, ended) => {
        const entry = this.entries.get(id)
        this.entries.delete(id)
        this.holdOutput(id, false)
        entry?.handlers.onClosed(ended)
      },
      released: () => {},
      log: (text) => {
        this.stderr(`[agent] ${text}\n`)
        options.onLog?.(text)
      },
      relayOpen: (id) => this.relay.open(id, this.decoder),
      relayData: (id, data) => this.relay.data(id, data),
      relayEof: (id) => this.relay.eof(id),
      relayCredit: (id, bytes) => this.relay.credit(id, bytes),
      relayClosed: (id, reset) => this.relay.closed(id, reset),
      violation: (reason) => this.violation(reason)
    })
    let channelEnded = channelIsStdout
    const onChannelEnd = () => {
      channelEnded = true
      if (this.exitReason !== undefined) this.die(this.exitReason)
    }
    channel.start((chunk) => this.push(chunk), channelIsStdout ? () => {} : onChannelEnd)
    child.stderr?.on("data", (chunk: Buffer) => {
      this.stderrBytes += chunk.length
      if (this.stderrBytes <= STDERR_LIMIT) this.stderr(chunk.toString("utf8"))
    })
    this.child.stdin?.on("error", () => {})
    child.on("error", (error) => this.die(`cannot start the agent: ${error.message}`))
    child.on("close", (code, signal) => {
      const how = signal ? `was killed by ${signal}` : `exited with code ${code}`
      const detail = this.stderrTail.trim()
      this.exitReason = `the computer's agent ${how}${detail ? `: ${detail}` : ""}`
      // Frames still in the channel come first (see drainAfterExit).
      if (channelEnded) this.die(this.exitReason)
      this.agentExited.unsafeOpen()
    })
  }

  /**
   * Once the agent process has exited, gives its channel a moment to deliver what it still holds,
   * then gives up on it: something else holding a FIFO channel open must not keep the computer
   * from being reported lost. Run it in the agent's Scope (AgentLauncher does) when the channel is
   * not the process's own stdout.
   */
  readonly drainAfterExit: Effect.Effect<void> = this.agentExited.await.pipe(
    Effect.zipRight(Effect.sleep(DRAIN_AFTER_EXIT)),
    Effect.zipRight(Effect.sync(() => {
      if (this.exitReason !== undefined) this.die(this.exitReason)
    }))
  )

  private unavailable(operation: string, reason: string): ProviderError {
    return providerError(this.backend, operation, "Unavailable", reason)
  }

  private push(chunk: Buffer): void {
    try {
      this.decoder.push(chunk)
    } catch (error) {
      // A handler failed on this input: the computer is unusable, the server is not.
      this.violation(`the server could not handle a frame: ${error instanceof Error ? error.message : String(error)}`)
    }
  }

  /** The agent's stderr is untrusted text: bounded (STDERR_LIMIT, the last 4000 characters kept) and without control characters. */
  private stderr(text: string): void {
    this.stderrTail = (this.stderrTail + text.replace(CONTROL, "?")).slice(-4000)
  }

  private violation(reason: string): void {
    this.die(`agent protocol violation: ${reason}`)
    this.child.kill("SIGKILL")
  }

  /** Succeeds once the agent reported READY; fails with the reason it did not (e.g. bwrap's message). */
  readonly ready: Effect.Effect<void, ProviderError> = Deferred.await(this.readiness).pipe(
    Effect.mapError((reason) => this.unavailable("start the computer's agent", reason))
  )

  /** Why the agent is unusable, or undefined while it runs. */
  get failure(): string | undefined {
    return this.dead
  }

  get pid(): number | undefined {
    return this.child.pid
  }

  private settle(id: number, result: SpawnResult): void {
    const entry = this.entries.get(id)
    const pending = entry?.pending
    if (entry) entry.pending = undefined
    pending?.(result)
  }

  private die(reason: string): void {
    if (this.dead !== undefined) return
    this.dead = this.closing ? "the computer was closed" : reason
    this.held.clear()
    this.channel.destroy()
    this.relay.dead()
    if (!this.closing) this.options.onLost?.(reason)
    // A no-op once it was ready.
    Deferred.unsafeDone(this.readiness, Exit.fail(reason))
    const entries = [...this.entries.values()]
    this.entries.clear()
    for (const entry of entries) {
      if (entry.pending) {
        entry.pending({ error: this.dead })
        continue
      }
      if (!entry.exited) {
        entry.exited = true
        entry.handlers.onExit({ exitCode: null, signal: "SIGKILL" }, 0)
      }
      entry.handlers.onClosed(undefined)
    }
    this.gone.unsafeOpen()
  }

  private send(type: number, id: number, payload?: Uint8Array): void {
    if (this.dead === undefined) this.child.stdin?.write(encodeFrame(type, id, payload))
  }

  /** Starts a process with pipes, or on a terminal of the given size; resolves with its id and pid. */
  spawn(
    spec: AgentSpawnSpec,
    handlers: ProcessHandlers,
    tty?: { readonly cols: number; readonly rows: number }
  ): Effect.Effect<{ readonly id: number; readonly pid: number }, SpawnFailed | ProviderError> {
    const command = spec.argv.join(" ")
    return Effect.async((resume) => {
      if (this.dead !== undefined) {
        resume(Effect.fail(this.unavailable("start a process", this.dead)))
        return
      }
      // A terminal's process always gets its shell: interactive programs start under it.
      const payload = encodeSpawn(tty === undefined ? spec : { ...spec, direct: undefined })
      const id = this.nextId++
      const entry: Entry = { handlers, pending: undefined, exited: false }
      entry.pending = (result) => {
        entry.pending = undefined
        if ("pid" in result) resume(Effect.succeed({ id, pid: result.pid }))
        else if ("failed" in result) resume(Effect.fail(new SpawnFailed({ command, reason: result.failed })))
        else resume(Effect.fail(this.unavailable("start a process", result.error)))
      }
      this.entries.set(id, entry)
      this.decoder.expectSpawn(id)
      if (tty === undefined) this.send(spec.direct?.length ? FrameType.SpawnDirect : FrameType.Spawn, id, payload)
      else this.send(FrameType.SpawnTty, id, Buffer.concat([encodeSize(tty.cols, tty.rows), payload]))
      return Effect.sync(() => {
        // Interrupted while starting: whatever starts is killed and forgotten.
        if (entry.pending !== undefined) {
          entry.pending = undefined
          this.release(id)
        }
      })
    })
  }

  /**
   * A connection to 127.0.0.1:port inside the computer, through the agent's relay (RELAY_CONNECT):
   * the computer needs no network for it. Interrupted before it connects, the stream is reset.
   */
  openPort(port: number): Effect.Effect<Duplex, ProviderError> {
    const operation = `connect to port ${port} inside the computer`
    return Effect.async((resume) => {
      if (this.dead !== undefined) return resume(Effect.fail(this.unavailable(operation, this.dead)))
      if (this.relay.serverStreams >= RELAY_MAX_STREAMS) {
        return resume(Effect.fail(providerError(this.backend, operation, "Unavailable", `${RELAY_MAX_STREAMS} connections are open already`)))
      }
      // Never reused; past 2^32 (billions of connections) the ids would wrap onto the agent's.
      const id = this.nextStream++
      if (id > 0xffff_ffff) return resume(Effect.fail(this.unavailable(operation, "no stream ids left")))
      this.decoder.expectConnect(id)
      const pending = this.relay.connect(id, this.decoder, (result) =>
        resume(typeof result === "string" ? Effect.fail(this.unavailable(operation, result)) : Effect.succeed(result)))
      this.send(FrameType.RelayConnect, id, encodeU16(port))
      return Effect.sync(pending.cancel)
    })
  }

  write(id: number, data: Uint8Array): void {
    if (this.entries.has(id)) this.send(FrameType.Stdin, id, data)
  }

  closeStdin(id: number): void {
    if (this.entries.has(id)) this.send(FrameType.StdinEof, id)
  }

  resize(id: number, cols: number, rows: number): void {
    if (this.entries.has(id)) this.send(FrameType.Resize, id, encodeSize(cols, rows))
  }

  /** Signals the process group; SIGKILL ends the whole tree. False when the name is unknown. */
  signal(id: number, signal: string): boolean {
    const n = signalNumber(signal)
    if (n === undefined) return false
    if (this.entries.has(id)) this.send(FrameType.Signal, id, encodeU32(n))
    return true
  }

  /** Forgets a process: the agent tears down its tree if still open, and reports nothing more. */
  release(id: number): void {
    this.entries.delete(id)
    this.holdOutput(id, false)
    if (this.decoder.isLive(id)) {
      this.decoder.releasing(id)
      this.send(FrameType.Release, id)
    }
  }

  /**
   * Backpressure: while any process holds the output, the channel is not read, so the agent blocks
   * on it and its processes block on their full pipes.
   */
  holdOutput(id: number, hold: boolean): void {
    if (this.dead !== undefined) return
    const before = this.held.size
    if (hold && this.entries.has(id)) this.held.add(id)
    else this.held.delete(id)
    if (before === 0 && this.held.size > 0) this.channel.pause()
    else if (before > 0 && this.held.size === 0) this.channel.resume()
  }

  /**
   * Ends the agent: closing its stdin makes it kill every process tree it started, and exit. One
   * that does not within 3 seconds is killed, and its channel given up.
   */
  readonly shutdown: Effect.Effect<void> = Effect.suspend(() => {
    this.closing = true
    this.child.stdin?.end()
    return this.gone.await.pipe(
      // Runs in finalizers (uninterruptible): without this the timeout could not stop the wait.
      Effect.interruptible,
      Effect.timeout("3 seconds"),
      Effect.catchAll(() =>
        Effect.sync(() => {
          this.child.kill("SIGKILL")
          this.die("the computer was closed")
        })
      )
    )
  })
}
