/**
 * The fallback path for processes of the Docker backend, for images where the kt-agent cannot run
 * (another architecture, no room to copy it): one Engine API exec per process, started hijacked
 * (`POST /exec/{id}/start` upgraded to a raw duplex socket), its output delivered through
 * ProcessEvents (the socket is paused while the consumer is behind).
 *
 * Every exec runs through a small `/bin/sh` wrapper (see `wrapperArgv`) which
 *   1. checks that argv[0] can be found on the process's PATH (a missing command is a SpawnFailed,
 *      not a process that prints "not found"),
 *   2. on a TTY, sets the terminal size with `stty` before the program starts (the Engine API can
 *      resize only after start, which races with a program that reads its size at once),
 *   3. writes the header line `KT<pid>` on stdout (WrapperHeader.ts): the in-container pid, in band,
 *   4. `exec env -i K=V… argv`: the process gets exactly SpawnSpec.env (`docker exec` would merge
 *      the container's and the image's environment in).
 * runc makes every exec process a session and process-group leader, so the pid is also the
 * process group: signals go to `-pid` with a second short exec (DockerSignal.ts), which works for
 * remote engines too (exec.inspect's Pid is a host pid). Closing a process's Scope SIGKILLs its
 * whole session. The image needs /bin/sh, `env` and `kill`; `ps` lets that SIGKILL also reach
 * processes that left the group.
 */
import type Docker from "dockerode"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { Duplex } from "node:stream"
import { type ProviderError, SpawnFailed, Unsupported } from "../../../domain/Errors.js"
import { normalizeSignal, signalName, signalNumber } from "../../../domain/Signals.js"
import { type BackendProcess, checkSpec, type ExitInfo, type SpawnSpec, throughEnv } from "../../../services/Backend.js"
import { ProcessEvents } from "../ProcessEvents.js"
import { WrapperHeaderDecoder } from "../WrapperHeader.js"
import { type Engine, hasStatus } from "./DockerEngine.js"
import { Demuxer } from "./Demuxer.js"
import { kill } from "./DockerSignal.js"

/** The default search path of `env`/execvp when the process has no PATH. */
const DEFAULT_PATH = "/bin:/usr/bin"
const HEADER_TIMEOUT = "30 seconds"
/** How long the exit code is looked for once the stream ended (the engine records it a moment later). */
const EXIT_POLLS = 20
const EXIT_POLL = Duration.millis(50)

const WRAPPER = [
  `PATH=$1; c=$2; t=$3; shift 3`,
  `case $c in */*) [ -f "$c" ] && [ -x "$c" ] ;; *) command -v -- "$c" >/dev/null 2>&1 ;; esac ||`,
  ` { printf 'KTE%s\\n' "'$c': command not found (PATH=$PATH)"; exit 127; }`,
  `[ -z "$t" ] || stty $t 2>/dev/null`,
  `printf 'KT%s\\n' $$`,
  // On a TTY the engine may stop copying the terminal as soon as the program exits, losing its
  // last output: the wrapper keeps the terminal open a moment longer.
  `if [ -n "$t" ]; then env -i -- "$@"; s=$?; sleep 0.2; exit $s; fi`,
  `exec env -i -- "$@"`
].join("\n")

/** The exec's Cmd: the wrapper, then the environment as K=V, then argv. */
export const wrapperArgv = (spec: SpawnSpec, env: Readonly<Record<string, string>>): Array<string> => [
  "/bin/sh", "-c", WRAPPER, "kilntainers",
  env["PATH"] ?? DEFAULT_PATH,
  spec.argv[0]!,
  spec.tty ? `cols ${spec.tty.cols} rows ${spec.tty.rows}` : "",
  ...Object.entries(env).map(([key, value]) => `${key}=${value}`),
  ...spec.argv
]

const startupReason = (text: string, code: number | null) => {
  const said = text.replace(/\s+$/, "")
  if (/resource temporarily unavailable|cannot allocate memory|fork/i.test(said)) {
    return `the computer has no room for another process (its pids or memory limit is reached): ${said}`
  }
  const oci = /OCI runtime exec failed: (?:exec failed: )?(?:unable to start container process: )?(.*?)(?:: unknown)?$/s.exec(said)
  if (oci) return oci[1]!
  if (said !== "") return said
  return `the process ended before it started (exit code ${code ?? "unknown"})`
}

/** The container a process runs in, as its connection lends it. */
export interface ExecHost {
  readonly engine: Engine
  readonly providerId: string
  /** The user ("uid:gid") processes run as (DockerGuest.ts); undefined: the container's. */
  readonly user?: string | undefined
  /** False once the connection is gone (the container lost or closed): its pids mean nothing now. */
  readonly current: () => boolean
}

/**
 * Starts a process through an Engine exec and waits for the wrapper's header. Fails with SpawnFailed
 * when it could not start (command not found, bad working directory, pids limit reached). Closing
 * the Scope SIGKILLs its session (bounded) and drops the connection.
 */
export const spawn = (host: ExecHost, spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const { engine } = host
    const command = spec.argv.join(" ")
    yield* checkSpec(spec, throughEnv(engine.name))
    const tty = spec.tty !== undefined
    const env = tty && spec.env["TERM"] === undefined ? { ...spec.env, TERM: "xterm-256color" } : spec.env
    const exec: Docker.Exec = yield* engine.call("create the process", (signal) =>
      engine.docker.getContainer(host.providerId).exec({
        Cmd: wrapperArgv(spec, env),
        Env: [],
        ...(host.user === undefined ? {} : { User: host.user }),
        WorkingDir: spec.cwd,
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
        Tty: tty,
        abortSignal: signal
      }))

    const sink = new ProcessEvents()
    const header = yield* Deferred.make<void, SpawnFailed>()
    const closed = yield* Deferred.make<void>()
    const finished = yield* Deferred.make<void>()
    const decoder = new WrapperHeaderDecoder()
    const delivered = new Set<number>()
    const earlyStderr: Array<Buffer> = []
    /** The process's pid inside the container, once the header said it: also its process group. */
    let pid = 0
    let started = false
    let stdinClosed = false

    const exitInfo = (code: number | null): ExitInfo => {
      if (code === null) return { exitCode: null, signal: "SIGKILL" }
      // A process killed by a signal shows as 128+n; only when we sent that signal is it reported as one.
      if (code > 128 && delivered.has(code - 128)) return { exitCode: null, signal: signalName(code - 128) ?? null }
      return { exitCode: code, signal: null }
    }
    const stdout = (data: Uint8Array) => {
      if (started) return sink.data(data)
      const result = decoder.push(data)
      if (result._tag === "Started") {
        started = true
        pid = result.pid
        Deferred.unsafeDone(header, Effect.void)
        for (const early of earlyStderr.splice(0)) sink.stderr(early)
        sink.data(result.rest)
      } else if (result._tag === "Failed") {
        Deferred.unsafeDone(header, Effect.fail(new SpawnFailed({ command, reason: result.reason })))
      }
      // Pending: anything else is the engine's own message (OCI runtime exec failed …), kept by the decoder.
    }
    const stderr = (data: Uint8Array) => {
      // The engine copies stdout and stderr independently: stderr may overtake the header.
      if (started) sink.stderr(data)
      else earlyStderr.push(Buffer.from(data))
    }

    // The end, once the socket closed: the exit code (the engine records it a moment later).
    const inspectExit = Effect.gen(function*() {
      for (let attempt = 0; attempt < EXIT_POLLS; attempt++) {
        const info = yield* engine.call("inspect the process", (signal) => exec.inspect({ abortSignal: signal })).pipe(Effect.option)
        if (Option.isNone(info)) return null
        if (!info.value.Running) return info.value.ExitCode ?? null
        yield* Effect.sleep(EXIT_POLL)
      }
      return null
    })
    yield* Deferred.await(closed).pipe(
      Effect.zipRight(inspectExit),
      Effect.flatMap((code) =>
        Effect.sync(() => {
          if (!started) {
            const text = [decoder.leftover(), Buffer.concat(earlyStderr).toString("utf8")].join("\n").trim()
            Deferred.unsafeDone(header, Effect.fail(new SpawnFailed({ command, reason: startupReason(text, code) })))
          }
          sink.exit(exitInfo(code))
          sink.end()
        })
      ),
      Effect.ensuring(Deferred.succeed(finished, undefined)),
      Effect.forkScoped
    )

    /** Runs in the Scope's finalizer: every wait is interruptible and bounded. */
    const terminate = (socket: Duplex) =>
      Effect.gen(function*() {
        if (yield* Deferred.isDone(finished)) return
        if (host.current() && started) {
          delivered.add(9)
          yield* kill(engine, host.providerId, pid, "SIGKILL", true).pipe(
            Effect.interruptible,
            Effect.timeout("5 seconds"),
            Effect.catchAll((error) => Effect.logWarning(`${engine.name} backend: cannot kill process ${pid}: ${error.message}`))
          )
          yield* Deferred.await(finished).pipe(Effect.interruptible, Effect.timeout("3 seconds"), Effect.ignore)
        }
      }).pipe(Effect.ensuring(Effect.sync(() => {
        socket.destroy()
        sink.end()
      })))

    const socket = yield* Effect.acquireRelease(
      engine.call("start the process", () => exec.start({ hijack: true, stdin: true, Tty: tty }) as Promise<Duplex>),
      (socket) => terminate(socket)
    )
    sink.hold = (hold) => (hold ? socket.pause() : socket.resume())
    const demuxer = new Demuxer((type, payload) => (type === 2 ? stderr(payload) : stdout(payload)))
    const onClose = () => Deferred.unsafeDone(closed, Effect.void)
    socket.on("data", (chunk: Buffer) => (tty ? stdout(chunk) : demuxer.push(chunk)))
    socket.on("end", onClose)
    socket.on("close", onClose)
    socket.on("error", onClose)

    yield* Deferred.await(header).pipe(
      Effect.timeoutFail({
        duration: HEADER_TIMEOUT,
        onTimeout: () => new SpawnFailed({ command, reason: `the process did not start within ${HEADER_TIMEOUT}` })
      })
    )
    if (spec.tty !== undefined) {
      yield* engine.call("resize the terminal", () => exec.resize({ h: spec.tty!.rows, w: spec.tty!.cols })).pipe(Effect.ignore)
    }

    const write = (data: Uint8Array): Effect.Effect<void, ProviderError> =>
      Effect.suspend(() =>
        socket.destroyed || !socket.writable || stdinClosed
          ? Effect.fail(engine.fail("write to the process", "Failed", stdinClosed ? "its stdin is closed" : "it has ended"))
          : Effect.async<void, ProviderError>((resume) => {
            socket.write(Buffer.from(data.buffer, data.byteOffset, data.byteLength), (error) =>
              resume(error ? Effect.fail(engine.fail("write to the process", "Failed", error.message, error)) : Effect.void)
            )
          })
      )
    const process: BackendProcess = {
      pid,
      pull: sink.pull,
      write,
      closeStdin: Effect.suspend(() => {
        // On a terminal, EOF is what Ctrl-D types.
        if (tty) return write(new Uint8Array([4]))
        if (stdinClosed || socket.destroyed) return Effect.void
        stdinClosed = true
        return Effect.sync(() => void socket.end())
      }),
      signal: (name) =>
        Effect.suspend(() => {
          const canonical = normalizeSignal(name)
          if (Either.isLeft(canonical)) return Effect.fail(engine.fail("signal the process", "Invalid", canonical.left))
          if (!host.current()) return Effect.void
          return Deferred.isDone(finished).pipe(Effect.flatMap((done) => {
            if (done) return Effect.void
            const n = signalNumber(canonical.right)
            if (n !== undefined) delivered.add(n)
            return kill(engine, host.providerId, pid, canonical.right, false)
          }))
        }),
      resize: (cols, rows) =>
        !tty
          ? Effect.fail(new Unsupported({ backend: engine.name, feature: "resize of a process without a TTY" }))
          : !(Number.isInteger(cols) && Number.isInteger(rows) && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535)
          ? Effect.fail(engine.fail("resize the terminal", "Invalid", `invalid terminal size ${cols}x${rows}`))
          : engine.call("resize the terminal", () => exec.resize({ h: rows, w: cols })).pipe(
            Effect.asVoid,
            // Podman answers a resize with 201 Created, which dockerode takes for a failure.
            Effect.catchIf((error) => hasStatus(error, 201), () => Effect.void)
          )
    }
    return process
  })
