/**
 * The server side of the kt-agent protocol (see native/kt-agent.c for the frame layout).
 *
 * One AgentClient drives one agent process — one computer. Internally it is a plain class fed by
 * the agent's stdout; the Effect API at the bottom is what backends use.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { execFile, spawn as spawnChild } from "node:child_process"
import { randomBytes } from "node:crypto"
import { closeSync, constants as fsConstants, openSync, rmSync, unlinkSync } from "node:fs"
import { type OnReadOpts, Socket, type SocketConstructorOpts } from "node:net"
import { constants } from "node:os"
import type { Readable, Writable } from "node:stream"
import { BackendError, SpawnFailed } from "../../domain/Errors.js"
import type { ExitInfo } from "../../services/Backend.js"

/** Frame types of the agent protocol. */
export const FrameType = {
  Spawn: 1,
  Stdin: 2,
  StdinEof: 3,
  Signal: 4,
  SpawnTty: 5,
  Release: 6,
  Ready: 16,
  Started: 17,
  SpawnFailed: 18,
  Stdout: 19,
  Stderr: 20,
  Exit: 21,
  Closed: 22,
  Log: 23
} as const

/** Bytes before the payload: u32 payload length, u8 type, u32 process id (little-endian). */
export const HEADER_SIZE = 9

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
}

/** `u32 argc | u32 envc | cwd\0 | argv\0… | K=V\0…`; undefined when a string holds a NUL byte. */
export const encodeSpawn = (spec: AgentSpawnSpec): Buffer | undefined => {
  const env = Object.entries(spec.env).map(([key, value]) => `${key}=${value}`)
  const strings = [spec.cwd, ...spec.argv, ...env]
  if (strings.some((s) => s.includes("\0"))) return undefined
  const body = Buffer.from(strings.join("\0") + "\0", "utf8")
  const payload = Buffer.allocUnsafe(8 + body.length)
  payload.writeUInt32LE(spec.argv.length, 0)
  payload.writeUInt32LE(env.length, 4)
  body.copy(payload, 8)
  return payload
}

/** Receives decoded frames. Output payloads arrive as slices of the input chunks, possibly split. */
export interface FrameHandler {
  readonly output: (type: number, id: number, data: Uint8Array) => void
  readonly control: (type: number, id: number, payload: Buffer) => void
}

const isOutput = (type: number) => type === FrameType.Stdout || type === FrameType.Stderr

/**
 * Incremental decoder. Output payloads are never copied: each piece is a `subarray` of the chunk
 * it arrived in. Control payloads (small) are gathered when they straddle chunks.
 */
export class FrameDecoder {
  private readonly header = Buffer.allocUnsafe(HEADER_SIZE)
  private headerFill = 0
  private type = 0
  private id = 0
  private remaining = 0
  private inPayload = false
  private control: Buffer | undefined
  private controlFill = 0

  constructor(private readonly handler: FrameHandler) {}

  push(chunk: Buffer): void {
    let offset = 0
    const end = chunk.length
    while (offset < end) {
      if (!this.inPayload) {
        let header: Buffer
        let at: number
        if (this.headerFill === 0 && end - offset >= HEADER_SIZE) {
          header = chunk
          at = offset
          offset += HEADER_SIZE
        } else {
          const n = Math.min(HEADER_SIZE - this.headerFill, end - offset)
          chunk.copy(this.header, this.headerFill, offset, offset + n)
          this.headerFill += n
          offset += n
          if (this.headerFill < HEADER_SIZE) return
          this.headerFill = 0
          header = this.header
          at = 0
        }
        this.remaining = header.readUInt32LE(at)
        this.type = header.readUInt8(at + 4)
        this.id = header.readUInt32LE(at + 5)
        if (this.remaining === 0) {
          if (!isOutput(this.type)) this.handler.control(this.type, this.id, Buffer.alloc(0))
          continue
        }
        this.inPayload = true
        if (!isOutput(this.type)) {
          if (end - offset >= this.remaining) {
            const payload = chunk.subarray(offset, offset + this.remaining)
            offset += this.remaining
            this.inPayload = false
            this.handler.control(this.type, this.id, payload)
            continue
          }
          this.control = Buffer.allocUnsafe(this.remaining)
          this.controlFill = 0
        }
      }
      const n = Math.min(this.remaining, end - offset)
      if (this.control === undefined) {
        this.handler.output(this.type, this.id, chunk.subarray(offset, offset + n))
      } else {
        chunk.copy(this.control, this.controlFill, offset, offset + n)
        this.controlFill += n
      }
      offset += n
      this.remaining -= n
      if (this.remaining === 0) {
        this.inPayload = false
        if (this.control !== undefined) {
          const payload = this.control
          this.control = undefined
          this.handler.control(this.type, this.id, payload)
        }
      }
    }
  }
}

/** Callbacks of one process started through the agent. */
export interface ProcessHandlers {
  /** `data` is only valid during the call (its memory is reused for the next read): copy what you keep. */
  readonly onStdout: (data: Uint8Array) => void
  readonly onStderr: (data: Uint8Array) => void
  /**
   * Once; after every byte the process itself wrote. For a TTY process, `terminalBytes` is how many
   * bytes the terminal must deliver before this exit.
   */
  readonly onExit: (exit: ExitInfo, terminalBytes: number | undefined) => void
  /**
   * Once, last: no more output will come. For a TTY process, `terminalBytes` is the total the
   * terminal will deliver; release the process once they were read (the agent holds the terminal
   * open until then). Undefined when the agent died.
   */
  readonly onClosed: (terminalBytes: number | undefined) => void
}

interface Entry {
  readonly handlers: ProcessHandlers
  readonly command: string
  pending: ((result: { readonly pid: number } | { readonly failed: string } | { readonly error: string }) => void) | undefined
  exited: boolean
  closed: boolean
}

/** How to start the agent: bwrap plus its arguments, or the agent itself when unsandboxed. */
export interface AgentCommand {
  readonly file: string
  readonly args: ReadonlyArray<string>
  readonly cwd: string
  /** The agent's own environment (children never inherit it). */
  readonly env: Readonly<Record<string, string>>
  /**
   * Where to create the FIFO that carries the agent's output (its stdout); it is removed once both
   * ends are open. Without it the output comes over an ordinary pipe.
   */
  readonly channel?: string | undefined
}

/** Read size of the output channel (the agent raises the FIFO to this capacity when output is heavy). */
const CHANNEL_READ = 1 << 20
/** How long to wait for the rest of the output channel after the agent exited. */
const DRAIN_AFTER_EXIT_MS = 1000

const signalNumbers = constants.signals as Readonly<Record<string, number>>
const signalNames = new Map(Object.entries(signalNumbers).map(([name, n]) => [n, name]))

/** The running agent of one computer. */
/**
 * The agent process as the client needs it: a child process here, or an agent started inside a
 * container through the engine (see DockerAgent.ts). `close` comes after stdout ended.
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

export class AgentClient {
  private readonly entries = new Map<number, Entry>()
  private readonly idleWaiters = new Set<() => void>()
  private readonly exitWaiters = new Set<() => void>()
  private nextId = 1
  private dead: string | undefined
  private closing = false
  private stderrTail = ""
  private readyWaiter: ((error: string | undefined) => void) | undefined
  private wasReady = false

  /** The FIFO the agent writes its frames to (absent: its stdout pipe). */
  private readonly channel: Socket | undefined
  /** Processes whose consumers are full: while any, the channel is not read. */
  private readonly held = new Set<number>()

  private constructor(
    private readonly backend: string,
    private readonly child: AgentProcess,
    private readonly stdin: Writable,
    channelFd: number | undefined,
    private readonly onLost: ((reason: string) => void) | undefined
  ) {
    const decoder = new FrameDecoder({
      output: (type, id, data) => {
        const entry = this.entries.get(id)
        if (entry === undefined) return
        if (type === FrameType.Stdout) entry.handlers.onStdout(data)
        else entry.handlers.onStderr(data)
      },
      control: (type, id, payload) => this.onControl(type, id, payload)
    })
    let exitReason: string | undefined
    let channelEnded = false
    const onChannelEnd = () => {
      channelEnded = true
      if (exitReason !== undefined) this.die(exitReason)
    }
    if (channelFd === undefined) {
      child.stdout!.on("data", (chunk: Buffer) => decoder.push(chunk))
      // 'close' below comes after stdout ended.
      channelEnded = true
    } else {
      // One reused buffer for every read: no allocation per read (output is copied out by the handlers).
      const buffer = Buffer.allocUnsafe(CHANNEL_READ)
      const onread: OnReadOpts = {
        buffer,
        callback: (n) => {
          decoder.push(buffer.subarray(0, n))
          return true
        }
      }
      // Node supports `onread` for any socket; its types only declare it for net.connect.
      const options: SocketConstructorOpts & { readonly onread: OnReadOpts } = { fd: channelFd, readable: true, writable: false, onread }
      this.channel = new Socket(options)
      this.channel.on("end", onChannelEnd)
      this.channel.on("close", onChannelEnd)
      this.channel.on("error", () => {})
    }
    child.stderr!.on("data", (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString("utf8")).slice(-4000)
    })
    stdin.on("error", () => {})
    child.on("error", (error) => this.die(`cannot start the agent: ${error.message}`))
    child.on("close", (code, signal) => {
      const how = signal ? `was killed by ${signal}` : `exited with code ${code}`
      const detail = this.stderrTail.trim()
      exitReason = `the computer's agent ${how}${detail ? `: ${detail}` : ""}`
      // Frames still in the channel come first; something else holding it open must not hang us.
      if (channelEnded) this.die(exitReason)
      else setTimeout(onChannelEnd, DRAIN_AFTER_EXIT_MS).unref()
    })
  }

  /** Starts the agent process (`channel`: a FIFO there must not exist yet); see `ready`. */
  static launch(backend: string, command: AgentCommand, onLost?: (reason: string) => void): AgentClient {
    let readFd: number | undefined
    let writeFd: number | undefined
    if (command.channel !== undefined) {
      try {
        readFd = openSync(command.channel, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK)
        writeFd = openSync(command.channel, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK)
      } catch (error) {
        if (readFd !== undefined) closeSync(readFd)
        throw error
      } finally {
        unlinkSync(command.channel)
      }
    }
    try {
      const child = spawnChild(command.file, [...command.args], {
        cwd: command.cwd,
        env: { ...command.env },
        stdio: ["pipe", writeFd ?? "pipe", "pipe"]
      })
      return new AgentClient(backend, child, child.stdin!, readFd, onLost)
    } catch (error) {
      if (readFd !== undefined) closeSync(readFd)
      throw error
    } finally {
      if (writeFd !== undefined) closeSync(writeFd)
    }
  }

  /** Talks to an agent that is already running (its stdio given), e.g. inside a container. */
  static attach(backend: string, process: AgentProcess, onLost?: (reason: string) => void): AgentClient {
    return new AgentClient(backend, process, process.stdin!, undefined, onLost)
  }

  /** Succeeds once the agent reported READY; fails with the reason it did not (e.g. bwrap's message). */
  readonly ready: Effect.Effect<void, BackendError> = Effect.async((resume) => {
    if (this.wasReady) return resume(Effect.void)
    if (this.dead !== undefined) return resume(Effect.fail(new BackendError({ backend: this.backend, reason: this.dead })))
    this.readyWaiter = (error) =>
      resume(error === undefined ? Effect.void : Effect.fail(new BackendError({ backend: this.backend, reason: error })))
    return Effect.sync(() => {
      this.readyWaiter = undefined
    })
  })

  /** Why the agent is unusable, or undefined while it runs. */
  get failure(): string | undefined {
    return this.dead
  }

  get pid(): number | undefined {
    return this.child.pid
  }

  private onControl(type: number, id: number, payload: Buffer): void {
    switch (type) {
      case FrameType.Ready: {
        this.wasReady = true
        const waiter = this.readyWaiter
        this.readyWaiter = undefined
        waiter?.(undefined)
        return
      }
      case FrameType.Started: {
        const entry = this.entries.get(id)
        const pending = entry?.pending
        if (entry) entry.pending = undefined
        pending?.({ pid: payload.readUInt32LE(0) })
        return
      }
      case FrameType.SpawnFailed: {
        const entry = this.entries.get(id)
        this.entries.delete(id)
        this.checkIdle()
        entry?.pending?.({ failed: payload.toString("utf8") })
        return
      }
      case FrameType.Exit: {
        const entry = this.entries.get(id)
        if (entry === undefined || entry.exited) return
        entry.exited = true
        const value = payload.readUInt32LE(1)
        const exit: ExitInfo = payload[0] === 1
          ? { exitCode: null, signal: signalNames.get(value) ?? `SIG${value}` }
          : { exitCode: value, signal: null }
        this.checkIdle()
        entry.handlers.onExit(exit, payload.length >= 13 ? Number(payload.readBigUInt64LE(5)) : undefined)
        return
      }
      case FrameType.Closed: {
        const entry = this.entries.get(id)
        if (entry === undefined) return
        this.entries.delete(id)
        entry.closed = true
        entry.handlers.onClosed(payload.length >= 8 ? Number(payload.readBigUInt64LE(0)) : undefined)
        return
      }
      default:
        return
    }
  }

  private die(reason: string): void {
    if (this.dead !== undefined) return
    this.dead = this.closing ? "the computer was closed" : reason
    this.held.clear()
    this.channel?.destroy()
    if (!this.closing) this.onLost?.(reason)
    const waiter = this.readyWaiter
    this.readyWaiter = undefined
    waiter?.(reason)
    const entries = [...this.entries.values()]
    this.entries.clear()
    for (const entry of entries) {
      if (entry.pending) {
        entry.pending({ error: this.dead })
        continue
      }
      if (!entry.exited) {
        entry.exited = true
        entry.handlers.onExit({ exitCode: null, signal: "SIGKILL" }, undefined)
      }
      entry.closed = true
      entry.handlers.onClosed(undefined)
    }
    this.checkIdle()
    for (const waiter of this.exitWaiters) waiter()
    this.exitWaiters.clear()
  }

  private checkIdle(): void {
    if (this.liveCount() > 0) return
    for (const waiter of this.idleWaiters) waiter()
    this.idleWaiters.clear()
  }

  private send(type: number, id: number, payload?: Uint8Array): void {
    if (this.dead === undefined) this.stdin.write(encodeFrame(type, id, payload))
  }

  /** Processes started and not yet exited. */
  liveCount(): number {
    let n = 0
    for (const entry of this.entries.values()) if (!entry.exited && entry.pending === undefined) n++
    return n
  }

  /**
   * Starts a process (pipes) or, with `tty`, registers a TTY process that starts when kt-exec
   * connects with the returned id and nonce. Resolves with its pid.
   */
  private start(
    spec: AgentSpawnSpec,
    handlers: ProcessHandlers,
    tty: ((id: number, nonce: string) => void) | undefined
  ): Effect.Effect<{ readonly id: number; readonly pid: number }, SpawnFailed | BackendError> {
    const command = spec.argv.join(" ")
    return Effect.async((resume) => {
      if (this.dead !== undefined) {
        resume(Effect.fail(new BackendError({ backend: this.backend, reason: this.dead })))
        return
      }
      const payload = encodeSpawn(spec)
      if (payload === undefined || spec.argv.length === 0) {
        resume(Effect.fail(new SpawnFailed({ command, reason: "argv is empty or contains a NUL byte" })))
        return
      }
      const id = this.nextId++
      const entry: Entry = { handlers, command, pending: undefined, exited: false, closed: false }
      entry.pending = (result) => {
        entry.pending = undefined
        if ("pid" in result) resume(Effect.succeed({ id, pid: result.pid }))
        else if ("failed" in result) resume(Effect.fail(new SpawnFailed({ command, reason: result.failed })))
        else resume(Effect.fail(new BackendError({ backend: this.backend, reason: result.error })))
      }
      this.entries.set(id, entry)
      if (tty === undefined) {
        this.send(FrameType.Spawn, id, payload)
      } else {
        const nonce = randomBytes(16).toString("hex")
        this.send(FrameType.SpawnTty, id, Buffer.concat([Buffer.from(nonce, "latin1"), payload]))
        tty(id, nonce)
      }
      return Effect.sync(() => {
        // Interrupted while starting: whatever starts is killed and forgotten.
        if (entry.pending !== undefined) {
          entry.pending = undefined
          this.entries.delete(id)
          this.send(FrameType.Release, id)
        }
      })
    })
  }

  /** Starts a process with stdin/stdout/stderr pipes. */
  spawn(spec: AgentSpawnSpec, handlers: ProcessHandlers) {
    return this.start(spec, handlers, undefined)
  }

  /** Registers a TTY process; `launch` must start kt-exec with the id and nonce it is given. */
  spawnTty(spec: AgentSpawnSpec, handlers: ProcessHandlers, launch: (id: number, nonce: string) => void) {
    return this.start(spec, handlers, launch)
  }

  /** Fails a TTY process that is still starting (kt-exec ended before the agent started it). */
  abandon(id: number, reason: string): void {
    const entry = this.entries.get(id)
    if (entry?.pending === undefined) return
    this.entries.delete(id)
    this.send(FrameType.Release, id)
    entry.pending({ failed: reason })
  }

  write(id: number, data: Uint8Array): void {
    this.send(FrameType.Stdin, id, data)
  }

  closeStdin(id: number): void {
    this.send(FrameType.StdinEof, id)
  }

  /** Signals the process group; false when the name is unknown. */
  signal(id: number, signal: string): boolean {
    const n = signalNumbers[signal]
    if (n === undefined) return false
    const payload = Buffer.allocUnsafe(4)
    payload.writeUInt32LE(n, 0)
    this.send(FrameType.Signal, id, payload)
    return true
  }

  /** Whether the process still has output to deliver (not closed). */
  isOpen(id: number): boolean {
    return this.entries.has(id)
  }

  /** Whether the process has exited (or is unknown). */
  hasExited(id: number): boolean {
    return this.entries.get(id)?.exited ?? true
  }

  /**
   * Forgets the process: the agent closes its pipes and reports nothing more about it. A TTY
   * process must be released even after it closed, to let go of its terminal.
   */
  release(id: number): void {
    this.entries.delete(id)
    this.holdOutput(id, false)
    this.send(FrameType.Release, id)
    this.checkIdle()
  }

  /**
   * Backpressure: while any process holds the output, the channel is not read, so the agent blocks
   * on it and its processes block on their full pipes. Only for the FIFO channel.
   */
  holdOutput(id: number, hold: boolean): void {
    const channel = this.channel
    if (channel === undefined || this.dead !== undefined) return
    const before = this.held.size
    if (hold) this.held.add(id)
    else this.held.delete(id)
    if (before === 0 && this.held.size > 0) channel.pause()
    else if (before > 0 && this.held.size === 0) channel.resume()
  }

  /** Signals every live process group. */
  signalAll(signal: string): void {
    for (const [id, entry] of this.entries) if (entry.pending === undefined) this.signal(id, signal)
  }

  /** Waits until no started process is running. */
  readonly awaitIdle: Effect.Effect<void> = Effect.async((resume) => {
    if (this.liveCount() === 0) return resume(Effect.void)
    const waiter = () => resume(Effect.void)
    this.idleWaiters.add(waiter)
    return Effect.sync(() => this.idleWaiters.delete(waiter))
  })

  /** Ends the agent: closing its stdin makes it SIGKILL every group it started and exit. */
  readonly shutdown: Effect.Effect<void> = Effect.suspend(() => {
    this.closing = true
    this.stdin.end()
    return Effect.async<void>((resume) => {
      if (this.dead !== undefined) return resume(Effect.void)
      const waiter = () => resume(Effect.void)
      this.exitWaiters.add(waiter)
      return Effect.sync(() => this.exitWaiters.delete(waiter))
    }).pipe(
      // Runs in finalizers (uninterruptible): without this the timeout could not stop the wait.
      Effect.interruptible,
      Effect.timeout("2 seconds"),
      Effect.catchAll(() => Effect.sync(() => this.child.kill("SIGKILL")))
    )
  })
}

/** Creates the FIFO (Node cannot); one left behind by a crash is replaced. */
const mkfifo = (backend: string, path: string) =>
  Effect.async<void, BackendError>((resume) => {
    rmSync(path, { force: true })
    const child = execFile("mkfifo", ["-m", "600", path], { env: { PATH: "/usr/bin:/bin" }, timeout: 10_000 }, (error, _stdout, stderr) =>
      resume(
        error
          ? Effect.fail(new BackendError({ backend, reason: `cannot create the agent's channel ${path}: ${stderr.trim() || error.message}` }))
          : Effect.void
      ))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/**
 * Starts an agent that lives as long as the Scope; fails with the agent's own words when it cannot
 * start. `onLost` is called when the agent dies other than through `shutdown` (killed from outside).
 */
export const make = (
  backend: string,
  command: AgentCommand,
  onLost?: (reason: string) => void
): Effect.Effect<AgentClient, BackendError, Scope.Scope> =>
  Effect.gen(function*() {
    if (command.channel !== undefined) yield* mkfifo(backend, command.channel)
    const client = yield* Effect.acquireRelease(
      Effect.try({
        try: () => AgentClient.launch(backend, command, onLost),
        catch: (error) => new BackendError({ backend, reason: `cannot start the agent: ${String(error)}` })
      }),
      (client) => client.shutdown
    )
    yield* client.ready.pipe(
      Effect.timeoutFail({
        duration: "20 seconds",
        onTimeout: () => new BackendError({ backend, reason: "the computer's agent did not start within 20 seconds" })
      })
    )
    return client
  })
