/**
 * Processes of a computer started through its kt-agent (AgentClient), as BackendProcesses: shared
 * by the backends that run an agent inside their computers (host sandbox, Docker containers).
 */
import { Chunk, Effect, Option, Stream } from "effect"
import { BackendError, Unsupported } from "../../domain/Errors.js"
import type { BackendProcess, ExitInfo, ProcessEvent, SpawnSpec } from "../../services/Backend.js"
import type * as AgentClient from "./AgentClient.js"

/** First size of a process's output buffer; it doubles as needed. */
const BUFFER_INITIAL = 64 * 1024
/** Buffered output past which the process's output is held back until its consumer pulls. */
const BUFFER_HOLD = 4 * 1024 * 1024
/** A buffer this big is dropped after a round that used little of it. */
const BUFFER_SHRINK_ABOVE = 1024 * 1024
const EMPTY_BUFFER = Buffer.alloc(0)

type Pending =
  | { readonly _tag: "Stdout" | "Stderr"; readonly start: number; end: number }
  | Extract<ProcessEvent, { readonly _tag: "Exit" }>

/**
 * The events of one process, buffered until read: Exit at most once, nothing after the end.
 *
 * Aliasing rule: output is copied into one of two buffers, and each pull of `events` hands out
 * everything gathered since the last one as a chunk of views into that buffer. That memory is
 * filled again after the *next* pull, so a consumer must copy whatever it keeps of a chunk before
 * it pulls again (ProcessActor's OutputLog and TerminalScreen copy). This keeps heavy output from
 * allocating per read. When more than BUFFER_HOLD bytes wait, `hold(true)` stops the source
 * (backpressure) until the consumer pulls.
 */
export class EventSink {
  private front: Buffer = EMPTY_BUFFER
  private back: Buffer = EMPTY_BUFFER
  private fill = 0
  private pending: Array<Pending> = []
  private exited = false
  private ended = false
  private holding = false
  private wake: (() => void) | undefined
  hold: (hold: boolean) => void = () => {}

  readonly data = (data: Uint8Array) => this.push("Stdout", data)
  readonly stderr = (data: Uint8Array) => this.push("Stderr", data)

  readonly exit = (exit: ExitInfo) => {
    if (this.exited || this.ended) return
    this.exited = true
    this.pending.push({ _tag: "Exit", exit })
    this.notify()
  }

  readonly end = () => {
    if (this.ended) return
    this.exit({ exitCode: null, signal: "SIGKILL" })
    this.ended = true
    this.setHolding(false)
    this.notify()
  }

  private readonly pull: Effect.Effect<Chunk.Chunk<ProcessEvent>, Option.Option<never>> = Effect.suspend(() => {
    if (this.pending.length > 0) return Effect.succeed(this.take())
    if (this.ended) return Effect.fail(Option.none())
    return Effect.async<Chunk.Chunk<ProcessEvent>, Option.Option<never>>((resume) => {
      // Resumed with `pull` itself: the chunk holds everything that arrived until the fiber runs.
      this.wake = () => resume(this.pull)
      return Effect.sync(() => {
        this.wake = undefined
      })
    })
  })

  readonly events: Stream.Stream<ProcessEvent> = Stream.repeatEffectChunkOption(this.pull)

  private push(tag: "Stdout" | "Stderr", data: Uint8Array) {
    if (this.ended || data.byteLength === 0) return
    const end = this.fill + data.byteLength
    if (end > this.back.length) {
      const grown = Buffer.allocUnsafeSlow(Math.max(end, 2 * this.back.length, BUFFER_INITIAL))
      this.back.copy(grown, 0, 0, this.fill)
      this.back = grown
    }
    this.back.set(data, this.fill)
    const last = this.pending[this.pending.length - 1]
    if (last !== undefined && last._tag === tag && last.end === this.fill) last.end = end
    else this.pending.push({ _tag: tag, start: this.fill, end })
    this.fill = end
    if (end >= BUFFER_HOLD) this.setHolding(true)
    this.notify()
  }

  /** Hands out what is pending; the consumer is done with the previous chunk, whose buffer is refilled next. */
  private take(): Chunk.Chunk<ProcessEvent> {
    const buffer = this.back
    const events = this.pending.map((event): ProcessEvent =>
      event._tag === "Exit" ? event : { _tag: event._tag, data: buffer.subarray(event.start, event.end) }
    )
    this.pending = []
    this.back = this.front.length > BUFFER_SHRINK_ABOVE && this.fill < BUFFER_INITIAL ? EMPTY_BUFFER : this.front
    this.front = buffer
    this.fill = 0
    this.setHolding(false)
    return Chunk.unsafeFromArray(events)
  }

  private setHolding(holding: boolean) {
    if (this.holding === holding) return
    this.holding = holding
    this.hold(holding)
  }

  private notify() {
    const wake = this.wake
    this.wake = undefined
    wake?.()
  }
}

export const killOnClose = (client: AgentClient.AgentClient, id: number, sink: EventSink) =>
  Effect.sync(() => {
    if (client.isOpen(id)) client.signal(id, "SIGKILL")
    // Also after CLOSED: a TTY process holds its terminal until released.
    client.release(id)
    sink.end()
  })

export const agentAlive = (backend: string, client: AgentClient.AgentClient) =>
  Effect.suspend(() => {
    const failure = client.failure
    return failure === undefined ? Effect.void : Effect.fail(new BackendError({ backend, reason: failure }))
  })

export const signalProcess = (backend: string, client: AgentClient.AgentClient, id: number) => (signal: string) =>
  Effect.gen(function*() {
    yield* agentAlive(backend, client)
    if (!client.signal(id, signal)) return yield* new BackendError({ backend, reason: `unknown signal '${signal}'` })
  })

/** Starts a process with pipes through the agent; closing the Scope kills its group. */
export const spawnPipes = (backend: string, client: AgentClient.AgentClient, spec: SpawnSpec) =>
  Effect.gen(function*() {
    const sink = new EventSink()
    // Output may arrive before the spawn effect resumes with the process's id.
    const held: { id: number | undefined; early: boolean } = { id: undefined, early: false }
    sink.hold = (hold) => (held.id === undefined ? (held.early = hold) : client.holdOutput(held.id, hold))
    const { id, pid } = yield* Effect.acquireRelease(
      client.spawn({ argv: spec.argv, cwd: spec.cwd, env: spec.env }, {
        onStdout: sink.data,
        onStderr: sink.stderr,
        onExit: sink.exit,
        onClosed: sink.end
      }),
      ({ id }) => killOnClose(client, id, sink)
    )
    held.id = id
    if (held.early) client.holdOutput(id, true)
    const process: BackendProcess = {
      pid,
      events: sink.events,
      write: (data) => agentAlive(backend, client).pipe(Effect.andThen(() => client.write(id, data))),
      closeStdin: agentAlive(backend, client).pipe(Effect.andThen(() => client.closeStdin(id))),
      signal: signalProcess(backend, client, id),
      resize: () => Effect.fail(new Unsupported({ backend, feature: "resize of a process without a TTY" }))
    }
    return process
  })
