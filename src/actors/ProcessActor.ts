import type * as Chunk from "effect/Chunk"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as PubSub from "effect/PubSub"
import * as Queue from "effect/Queue"
import * as Scope from "effect/Scope"
import { MailboxFull, ProcessExited, StdinClosed } from "../domain/Errors.js"
import type { OutputView, ProcessInfo, ProcessStatus, ReadOptions } from "../domain/Process.js"
import { type BackendProcess, type ExitInfo, forEachEventChunk, type ProcessEvent } from "../services/Backend.js"
import type { LiveOutput, OutputLimit, ProcessCommandError, ProcessHandle } from "../services/Processes.js"
import { ProcessOutput, type StoreRead } from "./ProcessOutput.js"
import * as TerminalInput from "./TerminalInput.js"

export interface ProcessActorOptions {
  readonly id: string
  readonly computerId: string
  readonly command: string
  readonly cwd: string
  readonly tty: { readonly cols: number; readonly rows: number } | undefined
  readonly headBytes: number
  readonly tailBytes: number
  readonly mailboxCapacity: number
  /** Past this many bytes of stdout and stderr together, the process (its whole tree) is killed. */
  readonly outputLimit?: OutputLimit | undefined
  /** Called once, when the process has exited and its exit is recorded, before `exited` completes. */
  readonly onExit: (actor: ProcessActor) => Effect.Effect<void>
  /**
   * The computer's store of this process's output (it holds its processes): then the logs are
   * windows in front of it, and any retained byte is read from the computer.
   */
  readonly store?: StoreRead | undefined
  /**
   * A process this server attached to rather than started (the computer holds it): when it began
   * and ended on the computer's clock, and where its streams are followed from (earlier bytes are
   * read from the store).
   */
  readonly adopted?: {
    readonly startedAt: number
    readonly endedAt: number | undefined
    readonly from: { readonly stdout: number; readonly stderr: number }
  } | undefined
  /**
   * The computer's record of why it ends (it holds its processes), shared by every server: told why
   * this server signals or limits it, and asked when a signal ended it for a reason not known here
   * (another server's kill).
   */
  readonly why?: {
    readonly tell: (text: string) => Effect.Effect<void>
    readonly ask: Effect.Effect<string | undefined>
  } | undefined
}

type Command =
  | { readonly _tag: "Write"; readonly data: Uint8Array }
  | { readonly _tag: "Eof" }
  | { readonly _tag: "Signal"; readonly signal: string; readonly reason: string | undefined }
  | { readonly _tag: "Resize"; readonly cols: number; readonly rows: number }

type CommandError = Exclude<ProcessCommandError, MailboxFull>

interface Envelope {
  readonly command: Command
  readonly reply: Deferred.Deferred<void, CommandError>
}

/** A process as an actor: it owns the running process, its output and its terminal. */
export type ProcessActor = ProcessHandle

const iso = (millis: number) => new Date(millis).toISOString()
/** Why a process ended whose output stopped without an exit. */
const LOST_PROCESS = "the backend lost the process"
/** ps shows this much of a command line. */
const COMMAND_SHOWN = 200

/**
 * Starts the actor of a process the backend has already spawned. Its fibers live in the given
 * Scope: the drain (output to storage, terminal and subscribers, never blocked by a reader) and
 * the mailbox (stdin, EOF, signals, resize — one at a time, bounded).
 */
export const make = (
  process: BackendProcess,
  options: ProcessActorOptions
): Effect.Effect<ProcessActor, never, Scope.Scope> =>
  Effect.gen(function*() {
    const adopted = options.adopted
    const scope = yield* Effect.scope
    // Its finalizers go on the scope as they are: they need none of the fiber's context, and
    // Effect.addFinalizer's restoring of the adding fiber's FiberRefs (two diffs, two patches each)
    // was a good part of what a short process cost the server.
    const onClose = (finalizer: () => Effect.Effect<unknown>) => Scope.addFinalizer(scope, Effect.suspend(finalizer))
    const startedAt = adopted?.startedAt ?? (yield* Clock.currentTimeMillis)
    const output = new ProcessOutput({ headBytes: options.headBytes, tailBytes: options.tailBytes }, options.store)
    const { stderr, stdout } = output
    stdout.startAt(adopted?.from.stdout ?? 0)
    stderr.startAt(adopted?.from.stderr ?? 0)
    // A terminal's screen, and its input: the client's bytes in order with the terminal's answers.
    const terminal = options.tty ? yield* TerminalInput.make(process, options.tty) : undefined
    const screen = terminal?.screen
    // The screen outlives the process as its last rendering: let the terminal parse every byte it
    // was given first (bounded), since a disposed terminal renders no more.
    if (screen !== undefined) {
      yield* onClose(() => Effect.promise(() => screen.snapshot()).pipe(
        Effect.timeout(Duration.seconds(2)),
        Effect.interruptible,
        Effect.ignore,
        Effect.zipRight(Effect.sync(() => screen.dispose()))
      ))
    }

    // Sliding: a slow subscriber loses old live chunks (they stay in the logs), the process never waits.
    // Made for the first subscriber: most processes never have one, and a PubSub costs more to make
    // than a short process takes to run.
    let live: PubSub.PubSub<LiveOutput> | undefined
    yield* onClose(() => live === undefined ? Effect.void : PubSub.shutdown(live))
    const liveOutput = Effect.suspend(() =>
      live === undefined
        ? Effect.tap(PubSub.sliding<LiveOutput>(1024), (made) => Effect.sync(() => {
          live = made
        }))
        : Effect.succeed(live)
    )
    let subscribers = 0
    const exitDeferred = yield* Deferred.make<ExitInfo>()
    const closedDeferred = yield* Deferred.make<void>()

    let exit: ExitInfo | undefined
    /** Its exit is being recorded (the computer is asked why first). */
    let ending = false
    let endedAt: number | undefined
    let reason: string | undefined
    let stdinClosed = false
    // An adopted process's quiet is measured from when this server began to follow it.
    let lastActivity = adopted === undefined ? startedAt : yield* Clock.currentTimeMillis
    let limitReached = false

    const status = (): ProcessStatus => exit === undefined ? "running" : "terminated"

    const info = (): ProcessInfo => ({
      pid: options.id,
      computer_id: options.computerId,
      command: options.command.length > COMMAND_SHOWN ? `${options.command.slice(0, COMMAND_SHOWN)}…` : options.command,
      status: status(),
      ...(exit?.exitCode !== undefined && exit.exitCode !== null ? { exitCode: exit.exitCode } : {}),
      ...(exit?.signal ? { signal: exit.signal } : {}),
      cwd: options.cwd,
      tty: screen !== undefined,
      createdAt: iso(startedAt),
      ...(endedAt === undefined ? {} : { endedAt: iso(endedAt) }),
      ...(process.pid === null ? {} : { osPid: process.pid }),
      ...(reason !== undefined && exit !== undefined ? { reason } : {}),
      ...(exit?.descendantsKilled ? { descendantsKilled: exit.descendantsKilled } : {})
    })

    const publish = (event: LiveOutput) => subscribers > 0 && live !== undefined ? PubSub.publish(live, event) : Effect.void

    const self = yield* Deferred.make<ProcessActor>()
    const recordExit = (info: ExitInfo) =>
      Effect.gen(function*() {
        if (exit !== undefined || ending) return
        ending = true
        // Asked before the exit shows: whoever sees it ended sees why. Bounded, and not cut short by
        // a stop meanwhile, which finds the exit being recorded and leaves it to this.
        const why = options.why
        // The exit is recorded whole or not at all: a stop that lands after the ask must not leave
        // `exit` set with its Deferred never completed (waiters would wait forever).
        yield* Effect.uninterruptible(Effect.gen(function*() {
          if (info.exitCode === null && reason === undefined && why !== undefined) {
            yield* why.ask.pipe(
              Effect.timeoutTo({ duration: Duration.seconds(2), onTimeout: () => undefined, onSuccess: (note) => note }),
              Effect.tap((note) =>
                Effect.sync(() => {
                  reason ??= note
                })
              )
            )
          }
          exit = info
          endedAt = adopted?.endedAt ?? (yield* Clock.currentTimeMillis)
          // Listed as finished and in the audit trail before anyone waiting sees it ended.
          yield* options.onExit(yield* Deferred.await(self))
          yield* Deferred.succeed(exitDeferred, info)
        }))
        // Whoever waits for the exit (a call about to answer) goes first, live subscribers after.
        yield* Effect.yieldNow()
        yield* publish({ _tag: "Exit", exit: info })
      })

    // Output is handled a whole chunk of events at a time: storage and terminal synchronously, one
    // clock read, and live publishing only while someone listens.
    const onEvents = (events: Chunk.Chunk<ProcessEvent>): Effect.Effect<void> =>
      Effect.gen(function*() {
        let pending: Array<LiveOutput> = []
        let sawOutput = false
        const flush = Effect.gen(function*() {
          if (sawOutput) lastActivity = yield* Clock.currentTimeMillis
          sawOutput = false
          if (pending.length === 0 || live === undefined) return
          yield* PubSub.publishAll(live, pending)
          pending = []
        })
        for (const event of events) {
          if (event._tag === "Exit") {
            yield* flush
            yield* recordExit(event.exit)
            continue
          }
          // A backend may reuse an event's memory once the next chunk is pulled: the logs and the
          // screen copy, live subscribers get their own copy. (`new Uint8Array` copies; the data is
          // often a Buffer, whose `slice` is a view of the same memory.)
          const kept = subscribers > 0 ? new Uint8Array(event.data) : event.data
          // What the computer no longer held when this reader got there: counted, shown as omitted.
          if (event.skipped !== undefined) (event._tag === "Stdout" ? stdout : stderr).skip(event.skipped)
          if (event._tag === "Stdout") {
            stdout.append(event.data)
            screen?.write(event.data)
          } else {
            stderr.append(event.data)
          }
          sawOutput = true
          if (subscribers > 0) pending.push({ _tag: event._tag, data: kept })
        }
        yield* flush
        // Checked where the bytes arrive: no fiber per process, and the kill follows the chunk that crossed it.
        const limit = options.outputLimit
        if (limit !== undefined && !limitReached && exit === undefined && stdout.total + stderr.total > limit.bytes) {
          limitReached = true
          reason = limit.reason
          if (options.why !== undefined) yield* options.why.tell(limit.reason)
          yield* Effect.ignore(process.signal("SIGKILL"))
        }
      })

    yield* forEachEventChunk(process, onEvents).pipe(
      // A stream that ends without an Exit means the backend lost the process.
      Effect.zipRight(Effect.suspend(() => {
        if (exit === undefined) reason ??= LOST_PROCESS
        return recordExit({ exitCode: null, signal: "SIGKILL" })
      })),
      // No more output can come: what the computer keeps need not be held here too.
      Effect.ensuring(Effect.zipRight(Effect.sync(() => output.ended()), Deferred.succeed(closedDeferred, undefined))),
      Effect.forkScoped
    )
    // Stopped from outside (computer restarted, deleted or closed) before it exited: the backend
    // kills it with the scope, and the record says so.
    yield* onClose(() => {
      if (exit !== undefined) return Effect.void
      reason ??= "stopped by kilntainers"
      return recordExit({ exitCode: null, signal: "SIGKILL" })
    })

    const handle = (command: Command): Effect.Effect<void, CommandError> => {
      if (exit !== undefined) return new ProcessExited({ id: options.id, status: status() })
      switch (command._tag) {
        case "Write":
          if (stdinClosed) return new StdinClosed({ id: options.id })
          return terminal ? terminal.write(command.data) : process.write(command.data)
        case "Eof":
          if (stdinClosed) return new StdinClosed({ id: options.id })
          if (!screen) stdinClosed = true
          return process.closeStdin
        case "Signal":
          if (command.reason === undefined) return process.signal(command.signal)
          reason = command.reason
          return options.why === undefined
            ? process.signal(command.signal)
            : Effect.zipRight(options.why.tell(command.reason), process.signal(command.signal))
        case "Resize":
          screen?.resize(command.cols, command.rows)
          return process.resize(command.cols, command.rows)
      }
    }

    const gone = () => new ProcessExited({ id: options.id, status: status() })
    /**
     * The mailbox, and the fiber that serves it, start with the first write: most processes (a
     * command that runs to its end) never get one, and a fiber costs more than `true` takes.
     */
    let inbox: Queue.Queue<Envelope> | undefined
    const mailbox = Effect.suspend(() =>
      inbox !== undefined ? Effect.succeed(inbox) : Effect.gen(function*() {
        const made = yield* Queue.dropping<Envelope>(options.mailboxCapacity)
        inbox = made
        yield* Queue.take(made).pipe(
          Effect.flatMap(({ command, reply }) =>
            Effect.exit(handle(command)).pipe(
              Effect.flatMap((result) => Deferred.done(reply, result)),
              Effect.onInterrupt(() => Deferred.fail(reply, gone()))
            )
          ),
          Effect.forever,
          Effect.forkIn(scope)
        )
        return made
      })
    )
    // Requests still queued when the actor stops are answered, never left waiting.
    yield* onClose(() =>
      inbox === undefined ? Effect.void : Queue.takeAll(inbox).pipe(
        Effect.flatMap((pending) => Effect.forEach(pending, ({ reply }) => Deferred.fail(reply, gone()), { discard: true }))
      )
    )

    const ask = (command: Command): Effect.Effect<void, CommandError | MailboxFull> =>
      Effect.gen(function*() {
        if (exit !== undefined) return yield* gone()
        const inbox = yield* mailbox
        const reply = yield* Deferred.make<void, CommandError>()
        const accepted = yield* Queue.offer(inbox, { command, reply })
        if (!accepted) return yield* new MailboxFull({ id: options.id })
        return yield* Deferred.await(reply)
      })

    const read = (opts: ReadOptions): Effect.Effect<OutputView> =>
      Effect.gen(function*() {
        const slice = (stream: "stdout" | "stderr", cursor: number | undefined, maxBytes: number | undefined) =>
          output.read(stream, {
            cursor,
            lines: opts.lines,
            maxBytes,
            mode: cursor === undefined && opts.lines !== undefined
              ? "lines"
              : opts.exact && output.held && cursor !== undefined
              ? "range"
              : "inline"
          })
        const errors = yield* slice("stderr", opts.stderrCursor, opts.stderrMaxBytes ?? opts.maxBytes)
        if (!screen) return { stdout: yield* slice("stdout", opts.stdoutCursor, opts.maxBytes), stderr: errors }
        const snapshot = yield* Effect.promise(() => screen.snapshot(opts.scrollback ? { scrollback: true } : {}))
        // A TTY's raw bytes are escape-laden; they are returned only when asked for.
        const raw = opts.raw
          ? yield* slice("stdout", opts.stdoutCursor, opts.maxBytes)
          : { text: "", from: stdout.total, next: stdout.total, total: stdout.total, omitted: 0 }
        return {
          stdout: raw,
          stderr: errors,
          screen: {
            text: snapshot.text,
            cursor: snapshot.cursor,
            cols: snapshot.cols,
            rows: snapshot.rows,
            alternateScreen: snapshot.alternateScreen,
            ...(snapshot.scrollback !== undefined ? { scrollback: snapshot.scrollback } : {})
          }
        }
      })

    const actor: ProcessActor = {
      id: options.id,
      computerId: options.computerId,
      tty: screen !== undefined,
      info: Effect.sync(info),
      status: Effect.sync(status),
      exited: Deferred.await(exitDeferred),
      closed: Deferred.await(closedDeferred),
      write: (data) => ask({ _tag: "Write", data }),
      // EOF queues behind the writes before it; with none ever written there is nothing to wait for.
      closeStdin: Effect.suspend(() => inbox === undefined ? handle({ _tag: "Eof" }) : ask({ _tag: "Eof" })),
      // Signals and resizes do not queue behind stdin: a process that stopped reading must still be killable.
      signal: (signal, why) => Effect.suspend(() => handle({ _tag: "Signal", signal, reason: why })),
      resize: (cols, rows) => Effect.suspend(() => handle({ _tag: "Resize", cols, rows })),
      read,
      subscribe: Effect.acquireRelease(
        Effect.sync(() => subscribers++).pipe(Effect.zipRight(liveOutput)),
        () => Effect.sync(() => subscribers--)
      ).pipe(Effect.flatMap(PubSub.subscribe)),
      lastActivity: Effect.sync(() => lastActivity),
      totals: Effect.sync(() => ({ stdout: stdout.total, stderr: stderr.total })),
      noteReason: (why) => Effect.sync(() => {
        reason ??= why
      }),
      explainEnd: (why) => Effect.sync(() => {
        const unexplained = reason === undefined || reason === LOST_PROCESS
        if (exit !== undefined && exit.exitCode === null && unexplained) reason = why
      }),
    }
    yield* Deferred.succeed(self, actor)
    return actor
  })
