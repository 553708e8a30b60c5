/**
 * A process in a sandbox, through envd's process service.
 *
 * Output: by default from the SDK's own Connect client for the process service (`commands.rpc`,
 * a protected member), so stdout and stderr arrive as the bytes the process wrote; the public
 * `onStdout`/`onStderr` callbacks hand out UTF-8-decoded strings, which destroys binary output.
 * When that client is not there (another SDK version) the public API is the fallback: output is
 * re-encoded as UTF-8 (binary output is not exact, and a signal's name is not reported by the
 * SDK). Both deliver through the one bounded constructor, ProcessEvents: envd's stream is pulled
 * only as fast as the runtime takes events (the next message is read after `offer` returns), and
 * the SDK awaits the public callbacks, which wait in `offer` likewise. Exit comes from the
 * stream's end event, which envd sends after all of the process's output.
 *
 *   write / closeStdin  `commands.sendStdin` / `commands.closeStdin` (envd ≥ 0.5.2; older envd
 *            goes through the stdin relay of ProcessScript.ts); TTY: `pty.sendInput`, EOF = Ctrl-D.
 *   signal   envd only knows SIGKILL and SIGTERM for one pid; every signal is delivered to the
 *            process group by a second command, `kill -s SIG -- -<pgid>`.
 *   TTY      the same Start call with a PTY of the asked size; `pty.resize` resizes it.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { identity } from "effect/Function"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { CommandExitError, SandboxError, TimeoutError } from "e2b"
import type { CommandHandle, Sandbox } from "e2b"
import { type ProviderError, SpawnFailed, Unsupported } from "../../../domain/Errors.js"
import { normalizeSignal } from "../../../domain/Signals.js"
import { type BackendProcess, checkSpec, type ExitInfo, type ProcessEvent, type SpawnSpec } from "../../../services/Backend.js"
import { ProcessEvents } from "../ProcessEvents.js"
import { e2bError, fromSdk } from "./E2BError.js"
import { canCloseStdin, startHeaders } from "./EnvdVersion.js"
import { exitInfo, LOST_EXIT, processScript, RELAY_EOF, relayLine, shellJoin, signalCommand } from "./ProcessScript.js"

export interface ExecContext {
  readonly sandbox: Sandbox
  readonly envdVersion: string
  readonly requestTimeoutMs: number
  /** "auto": the SDK's process client when it is there, else the public API. */
  readonly outputApi: "auto" | "rpc" | "public"
  readonly scrub: (text: string) => string
  /** The connection found the sandbox gone: nothing more is asked of it. */
  readonly gone: Effect.Effect<boolean>
  /** Runs when the output stream breaks before the end event (the sandbox may be gone). */
  readonly onDropped: Effect.Effect<void>
}

// ---- the SDK's process client (see the header) ------------------------------------------------

export interface ProcessStartRequest {
  readonly process: {
    readonly cmd: string
    readonly args: ReadonlyArray<string>
    readonly envs: Readonly<Record<string, string>>
    readonly cwd?: string
  }
  readonly pty?: { readonly size: { readonly cols: number; readonly rows: number } }
  readonly stdin?: boolean
}

type Output = { readonly case: "stdout" | "stderr" | "pty"; readonly value: Uint8Array } | { readonly case: undefined; readonly value?: undefined }

export interface ProcessStreamMessage {
  readonly event?: {
    readonly event:
      | { readonly case: "start"; readonly value: { readonly pid: number } }
      | { readonly case: "data"; readonly value: { readonly output: Output } }
      | { readonly case: "end"; readonly value: { readonly exitCode: number; readonly status: string; readonly error?: string } }
      | { readonly case: "keepalive" | undefined; readonly value?: unknown }
  }
}

export interface ProcessRpc {
  readonly start: (
    request: ProcessStartRequest,
    options: { readonly headers?: Record<string, string>; readonly signal?: AbortSignal; readonly timeoutMs?: number }
  ) => AsyncIterable<ProcessStreamMessage>
}

/** The SDK's Connect client for envd's process service, when this SDK version has it. */
export const processRpc = (sandbox: Pick<Sandbox, "commands">): ProcessRpc | undefined => {
  const rpc = (sandbox.commands as unknown as { readonly rpc?: Partial<ProcessRpc> } | undefined)?.rpc
  return typeof rpc?.start === "function" ? (rpc as ProcessRpc) : undefined
}

// ---- exec -------------------------------------------------------------------------------------

const KEEPALIVE = { "Keepalive-Ping-Interval": "50" }

/** How long a process of a lost sandbox waits for the kernel to end it. */
const LOST_WAIT = Duration.seconds(10)

/** The output event of a data message, if it carries bytes. */
const outputEvent = (output: Output): ProcessEvent | undefined =>
  output.case === undefined || output.value.byteLength === 0
    ? undefined
    : { _tag: output.case === "stderr" ? "Stderr" : "Stdout", data: output.value }

export const exec = (ctx: ExecContext, spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const command = shellJoin(spec.argv)
    yield* checkSpec(spec)
    const { sandbox } = ctx
    const tty = spec.tty
    const relay = tty === undefined && !canCloseStdin(ctx.envdVersion)
    const script = processScript(spec.argv, spec.env, { stdinRelay: relay })
    const envd = <A>(operation: string, f: (signal: AbortSignal) => Promise<A>): Effect.Effect<A, ProviderError> =>
      Effect.tryPromise({
        try: f,
        catch: (error) => fromSdk({ operation, plane: "envd", requestTimeoutMs: ctx.requestTimeoutMs, scrub: ctx.scrub }, error)
      })
    const spawnFailed = (error: ProviderError) => new SpawnFailed({ command, reason: error.detail })

    const events = new ProcessEvents()
    const controller = new AbortController()
    let closing = false
    /**
     * The stream broke before the end event: ask whether the sandbox is still there, then end. When
     * it is gone, the kernel ends this process with the computer, saying why first: that is waited
     * for (bounded) rather than an Exit that would come before the reason.
     */
    const dropped = Effect.suspend(() =>
      closing ? Effect.void : ctx.onDropped.pipe(
        Effect.zipRight(ctx.gone),
        Effect.flatMap((gone) => (gone ? Effect.sleep(LOST_WAIT) : Effect.void))
      )
    ).pipe(Effect.as<ExitInfo>(LOST_EXIT))
    /** The process is over (its Exit is out): nothing is left to kill. */
    let ended = false
    const finish = (exit: ExitInfo) =>
      Effect.sync(() => {
        ended = true
        events.exit(exit)
        events.end()
      })
    /** Set when we signal: the public API does not tell which signal ended a process. */
    let lastSignal: string | undefined

    const startRaw = (rpc: ProcessRpc) =>
      Effect.gen(function*() {
        const request: ProcessStartRequest = {
          process: { cmd: "/bin/bash", args: ["-l", "-c", script], envs: { ...spec.env }, cwd: spec.cwd },
          ...(tty ? { pty: { size: { cols: tty.cols, rows: tty.rows } } } : {}),
          stdin: true
        }
        const iterator = rpc.start(request, {
          headers: { ...startHeaders(ctx.envdVersion), ...KEEPALIVE },
          signal: controller.signal,
          timeoutMs: 0
        })[Symbol.asyncIterator]()
        const first = yield* envd("start the process", () => iterator.next()).pipe(
          Effect.timeoutFail({
            duration: Duration.millis(ctx.requestTimeoutMs),
            onTimeout: () => e2bError("start the process", "Timeout", `envd did not answer within ${ctx.requestTimeoutMs} ms`)
          }),
          Effect.mapError(spawnFailed)
        )
        const start = first.done ? undefined : first.value.event?.event
        if (start?.case !== "start") return yield* new SpawnFailed({ command, reason: "envd did not report the process start" })
        // The rest of envd's messages as a Stream, read only as fast as `offer` returns (the runtime
        // takes events), up to the end event. A stream that breaks or stops before it was dropped.
        // Closing the scope interrupts the reading and aborts the request.
        const rest = Stream.fromAsyncIterable({ [Symbol.asyncIterator]: () => iterator }, identity).pipe(
          Stream.map((message) => message.event?.event),
          Stream.tap((event) => {
            const output = event?.case === "data" ? outputEvent(event.value.output) : undefined
            return output === undefined ? Effect.void : events.offer(output)
          }),
          Stream.filterMap((event) => (event?.case === "end" ? Option.some(exitInfo(event.value)) : Option.none()))
        )
        const pump = Stream.runHead(rest).pipe(
          Effect.orElseSucceed(() => Option.none<ExitInfo>()),
          Effect.flatMap(Option.match({ onNone: () => dropped, onSome: (exit) => Effect.succeed(exit) })),
          Effect.flatMap(finish)
        )
        yield* pump.pipe(Effect.ensuring(Effect.sync(() => events.end())), Effect.forkScoped)
        return start.value.pid
      })

    const startPublic = Effect.gen(function*() {
      const runtime = yield* Effect.runtime<never>()
      // The SDK awaits these callbacks: while the runtime is behind, its reading waits.
      const push = (event: ProcessEvent) => Runtime.runPromise(runtime)(events.offer(event))
      const encoder = new TextEncoder()
      const signal = controller.signal
      let handle: CommandHandle
      if (tty) {
        // The PTY runs an interactive bash; the script replaces it (exec) once it reads the line.
        handle = yield* envd("start the process", () =>
          sandbox.pty.create({
            cols: tty.cols,
            rows: tty.rows,
            cwd: spec.cwd,
            envs: { ...spec.env },
            timeoutMs: 0,
            signal,
            onData: (data) => push({ _tag: "Stdout", data })
          })).pipe(Effect.mapError(spawnFailed))
        yield* envd("start the process", () => sandbox.pty.sendInput(handle.pid, encoder.encode(`stty -echo; ${script}\n`))).pipe(
          Effect.mapError(spawnFailed)
        )
      } else {
        handle = yield* envd("start the process", () =>
          sandbox.commands.run(script, {
            background: true,
            cwd: spec.cwd,
            envs: { ...spec.env },
            stdin: true,
            timeoutMs: 0,
            signal,
            onStdout: (data) => push({ _tag: "Stdout", data: encoder.encode(data) }),
            onStderr: (data) => push({ _tag: "Stderr", data: encoder.encode(data) })
          })).pipe(Effect.mapError(spawnFailed))
      }
      const pump = Effect.promise(() =>
        handle.wait().then(
          (result): ExitInfo | undefined => ({ exitCode: result.exitCode, signal: null }),
          (error): ExitInfo | undefined => {
            if (!(error instanceof CommandExitError)) return error instanceof SandboxError && !(error instanceof TimeoutError) ? LOST_EXIT : undefined
            const exit = exitInfo({ exitCode: error.exitCode, status: error.error ?? "" })
            // Go reports -1 for a process ended by a signal.
            return exit.exitCode === -1 ? { exitCode: null, signal: lastSignal ?? "SIGKILL" } : exit
          }
        )
      ).pipe(Effect.flatMap((exit) => (exit === undefined ? dropped : Effect.succeed(exit))), Effect.flatMap(finish))
      yield* Effect.addFinalizer(() => Effect.promise(() => handle.disconnect()))
      yield* pump.pipe(Effect.ensuring(Effect.sync(() => events.end())), Effect.forkScoped)
      return handle.pid
    })

    const rpc = ctx.outputApi === "public" ? undefined : processRpc(sandbox)
    if (rpc === undefined && ctx.outputApi === "rpc") {
      return yield* new SpawnFailed({ command, reason: "this e2b SDK has no process client (commands.rpc)" })
    }
    const pid = yield* (rpc !== undefined ? startRaw(rpc) : startPublic).pipe(
      Effect.onError(() => Effect.sync(() => controller.abort()))
    )
    const signalGroup = (name: string) =>
      envd("signal the process", (signal) =>
        sandbox.commands.run(signalCommand(name, pid), { signal, timeoutMs: ctx.requestTimeoutMs, requestTimeoutMs: ctx.requestTimeoutMs }))
    // Runs before the reading stops (finalizers run last-added first): the tree is killed while its
    // output is still read.
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        closing = true
        if (!ended && !(yield* ctx.gone)) {
          yield* signalGroup("SIGKILL").pipe(
            Effect.timeout("10 seconds"),
            Effect.catchAllCause(() => envd("kill the process", () => sandbox.commands.kill(pid)).pipe(Effect.ignore))
          )
        }
        controller.abort()
      })
    )

    /** Input for a process that has just ended (envd: not found) is dropped, as by a host pipe. */
    const input = (operation: string, f: (signal: AbortSignal) => Promise<unknown>) =>
      Effect.gen(function*() {
        if (yield* ctx.gone) return yield* e2bError(operation, "NotFound", "the sandbox is gone, and this process with it")
        yield* envd(operation, f).pipe(Effect.catchIf((error) => error.reason === "NotFound", () => Effect.void))
      })

    const process: BackendProcess = {
      pid,
      pull: events.pull,
      write: (data) =>
        tty
          ? input("write to the terminal", (signal) => sandbox.pty.sendInput(pid, data, { signal }))
          : relay
          ? input("write to stdin", (signal) => sandbox.commands.sendStdin(pid, relayLine(data), { signal }))
          : input("write to stdin", (signal) => sandbox.commands.sendStdin(pid, data, { signal })),
      closeStdin: tty
        ? input("send EOF", (signal) => sandbox.pty.sendInput(pid, new Uint8Array([4]), { signal }))
        : relay
        ? input("close stdin", (signal) => sandbox.commands.sendStdin(pid, RELAY_EOF, { signal }))
        : input("close stdin", (signal) => sandbox.commands.closeStdin(pid, { signal })),
      signal: (name) =>
        Effect.gen(function*() {
          const normalized = normalizeSignal(name)
          if (normalized._tag === "Left") return yield* e2bError("signal the process", "Invalid", normalized.left)
          if (yield* ctx.gone) return
          lastSignal = normalized.right
          yield* signalGroup(normalized.right)
        }),
      resize: (cols, rows) =>
        tty === undefined
          ? Effect.fail(new Unsupported({ backend: "e2b", feature: "resize of a process without a TTY" }))
          : Number.isInteger(cols) && Number.isInteger(rows) && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535
          ? input("resize the terminal", (signal) => sandbox.pty.resize(pid, { cols, rows }, { signal }))
          : Effect.fail(e2bError("resize the terminal", "Invalid", `invalid terminal size ${cols}x${rows}`))
    }
    return process
  })
