/**
 * One process of the Modal backend: a `sandbox.exec` of the wrapper (ModalWrapper.ts), turned into
 * the backend's ordered ProcessEvent stream.
 *
 * Output flows through ProcessEvents, the one bounded constructor of a process's events: the two
 * pumps (stdout, stderr) wait while the consumer is behind, which stops reading from Modal, which
 * holds the process back (back-pressure end to end). Exit is emitted once both end markers have
 * arrived — after all of the process's own output, even when children that outlive it keep the
 * pipes open (their later output still follows) — and the stream ends when both pipes have closed.
 *
 * Without a marker (the wrapper was SIGKILLed, or the sandbox went away) Exit is SIGKILL, emitted
 * when the pipes close. The exec's own `wait()` is not used for long-running processes: the SDK
 * retries it forever and it cannot be stopped, so a process of a sandbox that went away would
 * leave a loop behind.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Fiber from "effect/Fiber"
import * as Stream from "effect/Stream"
import type * as Scope from "effect/Scope"
import { randomBytes } from "node:crypto"
import { type ProviderError, SpawnFailed } from "../../../domain/Errors.js"
import { normalizeSignal, signalName, signalNumber } from "../../../domain/Signals.js"
import type { ExitInfo, SpawnSpec } from "../../../services/Backend.js"
import { ProcessEvents } from "../ProcessEvents.js"
import { WrapperHeaderDecoder } from "../WrapperHeader.js"
import { modalError } from "./ModalError.js"
import type { ExecHandle, ExecRequest } from "./ModalGateway.js"
import { wrapperExec } from "./ModalWrapper.js"
import { MarkerScanner } from "./WrapperOutput.js"

const HEADER_TIMEOUT = "60 seconds"
/**
 * How long a process whose sandbox has ended keeps its stream open for the kernel to note the loss
 * (it closes the process then), so that `ps` says the computer was lost rather than just "killed".
 */
const LOSS_GRACE = "5 seconds"

/** What the connection lends a process. */
export interface ExecHost {
  /** Starts a command in the sandbox (bounded by the call timeout). */
  readonly exec: (request: ExecRequest) => Effect.Effect<ExecHandle, ProviderError>
  /** Delivers a signal (canonical name) to a process group; `session` also reaches its session. */
  readonly kill: (pgid: number, signal: string, session: boolean) => Effect.Effect<void, ProviderError>
  /** False once the sandbox has ended: its pids mean nothing now. */
  readonly current: () => boolean
  /**
   * Asks Modal whether the sandbox has ended (a process lost its wrapper without a word); when it
   * has, the connection reports the loss at once. Never fails: no answer is "still running".
   */
  readonly ended: Effect.Effect<boolean>
}

export interface ModalProcess {
  readonly pid: number
  readonly tty: string | undefined
  readonly pull: ProcessEvents["pull"]
  readonly write: (data: Uint8Array) => Effect.Effect<void, ProviderError>
  readonly closeStdin: Effect.Effect<void, ProviderError>
  readonly signal: (signal: string) => Effect.Effect<void, ProviderError>
  /** SIGKILLs the process's session (bounded, skipped when the sandbox has ended) and ends the event stream. */
  readonly terminate: Effect.Effect<void>
}

/** Starts the process and waits for the wrapper's header. */
export const start = (options: {
  readonly host: ExecHost
  readonly spec: SpawnSpec
  readonly command: string
}): Effect.Effect<ModalProcess, SpawnFailed | ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const { host, spec, command } = options
    const tty = spec.tty !== undefined
    const env = tty && spec.env["TERM"] === undefined ? { ...spec.env, TERM: "xterm-256color" } : spec.env
    const nonce = randomBytes(12).toString("hex")
    const events = new ProcessEvents()
    const header = yield* Deferred.make<{ readonly pid: number; readonly tty: string | undefined }, SpawnFailed>()
    const decoder = new WrapperHeaderDecoder()
    const stdoutScanner = new MarkerScanner(nonce)
    const stderrScanner = new MarkerScanner(nonce)
    const delivered = new Set<number>()
    const early: Array<Uint8Array> = []
    let headerDone = false
    /** The exit code, once each stream's output before its marker has been handed on. */
    let stdoutCode: number | undefined
    let stderrMarked = false
    let ended = false
    let awaitingLoss = false

    const push = (tag: "Stdout" | "Stderr", chunks: ReadonlyArray<Uint8Array>) => {
      for (const chunk of chunks) (tag === "Stdout" ? events.data : events.stderr)(chunk)
    }
    /** Hands output on, then waits while the consumer is behind. */
    const emit = (tag: "Stdout" | "Stderr", chunks: ReadonlyArray<Uint8Array>) =>
      Effect.suspend(() => {
        push(tag, chunks)
        return events.untilReleased
      })
    const exitInfo = (code: number | null): ExitInfo => {
      if (code === null) return { exitCode: null, signal: "SIGKILL" }
      if (code > 128 && delivered.has(code - 128)) return { exitCode: null, signal: signalName(code - 128) ?? null }
      return { exitCode: code, signal: null }
    }
    const settle = () => {
      if (stdoutCode !== undefined && (tty || stderrMarked)) events.exit(exitInfo(stdoutCode))
    }
    /** Output before the marker, then (once both markers are in) Exit, then output after it. */
    const scan = (scanner: MarkerScanner, tag: "Stdout" | "Stderr", chunk: Uint8Array) =>
      Effect.suspend(() => {
        const scanned = scanner.push(chunk)
        push(tag, scanned.before)
        if (scanned.code !== undefined) {
          if (tag === "Stdout") stdoutCode = scanned.code
          else stderrMarked = true
          settle()
        }
        push(tag, scanned.after)
        return events.untilReleased
      })
    const onStdout = (chunk: Uint8Array) =>
      Effect.suspend(() => {
        if (headerDone) return scan(stdoutScanner, "Stdout", chunk)
        const result = decoder.push(chunk)
        if (result._tag === "Pending") return Effect.void
        headerDone = true
        if (result._tag === "Failed") return Deferred.fail(header, new SpawnFailed({ command, reason: result.reason }))
        return Deferred.succeed(header, { pid: result.pid, tty: result.tty }).pipe(
          Effect.andThen(emit("Stderr", early.splice(0))),
          Effect.andThen(scan(stdoutScanner, "Stdout", result.rest))
        )
      })
    const onStderr = (chunk: Uint8Array) =>
      Effect.suspend(() => {
        if (headerDone) return scan(stderrScanner, "Stderr", chunk)
        early.push(Uint8Array.from(chunk))
        return Effect.void
      })
    const pump = (stream: Stream.Stream<Uint8Array, ProviderError>, onChunk: (chunk: Uint8Array) => Effect.Effect<void>, scanner: MarkerScanner, tag: "Stdout" | "Stderr") =>
      stream.pipe(
        Stream.runForEach(onChunk),
        Effect.ignore,
        Effect.andThen(Effect.suspend(() => (headerDone ? emit(tag, scanner.flush()) : Effect.void)))
      )

    const wrapper = wrapperExec(spec, env, nonce)
    const exec: ExecHandle = yield* host.exec({ argv: wrapper.argv, env: wrapper.env, pty: tty }).pipe(
      Effect.catchIf((error) => error.reason === "Invalid", (error) => Effect.fail(new SpawnFailed({ command, reason: error.detail })))
    )
    // Started inside an acquire (uninterruptible): the pumps and their supervisor must stay stoppable.
    const stdoutDone = yield* Effect.forkScoped(Effect.interruptible(pump(exec.stdout, onStdout, stdoutScanner, "Stdout")))
    const stderrDone = yield* Effect.forkScoped(Effect.interruptible(pump(exec.stderr, onStderr, stderrScanner, "Stderr")))
    /** Ends the stream: Exit (SIGKILL unless a marker was seen), then the end. */
    const finish = Effect.sync(() => {
      ended = true
      events.end()
    })
    const supervisor = yield* Effect.forkScoped(Effect.interruptible(Effect.gen(function*() {
      // Both pipes closed: the process and every holder of its output are gone.
      yield* Fiber.await(stdoutDone)
      yield* Fiber.await(stderrDone)
      if (!headerDone) {
        headerDone = true
        const said = [decoder.leftover(), Buffer.concat(early).toString("utf8").trim()].filter((s) => s !== "").join("; ")
        yield* Deferred.fail(header, new SpawnFailed({ command, reason: said !== "" ? said : "the process ended before it started" }))
      } else if (stdoutCode === undefined && (yield* host.ended)) {
        // No end marker because the sandbox itself went: the kernel, told by the connection, ends
        // this process noting why (its Scope closes and `terminate` finishes the stream).
        awaitingLoss = true
        yield* Effect.sleep(LOSS_GRACE)
      }
      settle()
      yield* finish
    })))
    const stopAll = Effect.all([Fiber.interrupt(stdoutDone), Fiber.interrupt(stderrDone), Fiber.interrupt(supervisor)], { discard: true })

    const started = yield* Deferred.await(header).pipe(
      Effect.timeoutFail({
        duration: HEADER_TIMEOUT,
        onTimeout: () => new SpawnFailed({ command, reason: "the process did not start within 60 s" })
      }),
      Effect.tapError(() => stopAll.pipe(Effect.andThen(finish)))
    )

    const gone = () => ended || !host.current()
    let stdinClosed = false
    const write = (data: Uint8Array) =>
      Effect.suspend(() =>
        gone()
          ? Effect.fail(modalError("write to the process", "NotFound", "the process has ended"))
          : stdinClosed
          ? Effect.fail(modalError("write to the process", "Invalid", "its stdin is closed"))
          : exec.writeStdin(data)
      )
    const signal = (name: string) =>
      Effect.suspend(() => {
        const canonical = normalizeSignal(name)
        if (Either.isLeft(canonical)) return Effect.fail(modalError("signal the process", "Invalid", canonical.left))
        if (gone()) return Effect.void
        const n = signalNumber(canonical.right)
        if (n !== undefined) delivered.add(n)
        return host.kill(started.pid, canonical.right, false)
      })
    const terminate = Effect.suspend(() => {
      if (ended) return Effect.void
      delivered.add(9)
      const kill = host.current()
        ? host.kill(started.pid, "SIGKILL", true).pipe(
          Effect.interruptible,
          Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => modalError("kill the process", "Timeout", "no answer within 10 s") }),
          Effect.catchAll((error) => Effect.logWarning(`modal backend: cannot kill process ${started.pid}: ${error.detail}`))
        )
        : Effect.void
      // The rest of its output first (bounded), unless the sandbox has gone and there is none to come.
      const drained = Effect.suspend(() =>
        awaitingLoss ? Effect.void : Fiber.await(supervisor).pipe(Effect.interruptible, Effect.timeout("3 seconds"))
      )
      return kill.pipe(
        Effect.andThen(drained),
        Effect.ignore,
        Effect.ensuring(stopAll.pipe(Effect.andThen(finish)))
      )
    })
    const process: ModalProcess = {
      pid: started.pid,
      tty: started.tty,
      pull: events.pull,
      write,
      closeStdin: Effect.suspend(() => {
        if (tty) return write(new Uint8Array([4]))
        if (stdinClosed || gone()) return Effect.void
        stdinClosed = true
        return exec.closeStdin.pipe(Effect.catchAll(() => Effect.void))
      }),
      signal,
      terminate
    }
    return process
  })
