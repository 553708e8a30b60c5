/**
 * One process of the Docker backend: an Engine API exec, started hijacked (`POST /exec/{id}/start`
 * upgraded to a raw duplex socket), turned into the backend's ordered ProcessEvent stream.
 *
 * Every exec runs through a small `/bin/sh` wrapper (see `wrapperArgv`) which
 *   1. checks that argv[0] can be found on the process's PATH (a missing command is a SpawnFailed,
 *      not a process that prints "not found"),
 *   2. on a TTY, sets the terminal size with `stty` before the program starts (the Engine API can
 *      resize only after start, which races with a program that reads its size at once),
 *   3. writes one header line `KT<pid>` on stdout: the in-container pid, learnt in band,
 *   4. `exec env -i K=V… argv`: the process gets exactly SpawnSpec.env (`docker exec` would merge
 *      the container's and the image's environment in).
 * runc makes every exec process a session and process-group leader, so the pid is also the
 * process group: signals go to `-pid` with a second short exec (`kill -s SIG -- -pid`), which
 * works for remote engines too (exec.inspect's Pid is a host pid).
 */
import type Docker from "dockerode"
import { Deferred, Effect, Either, Queue, Stream, Take } from "effect"
import type { Duplex } from "node:stream"
import { BackendError, SpawnFailed } from "../../domain/Errors.js"
import { normalizeSignal, signalName, signalNumber } from "../../domain/Signals.js"
import type { ExitInfo, ProcessEvent, SpawnSpec } from "../../services/Backend.js"

/** The default search path of `env`/execvp when the process has no PATH. */
const DEFAULT_PATH = "/bin:/usr/bin"
const HEADER_LIMIT = 4096

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

/** A reason why the spec cannot be run, or undefined. */
export const invalidSpec = (spec: SpawnSpec): string | undefined => {
  if (spec.argv.length === 0 || spec.argv[0] === "") return "argv is empty"
  if (spec.argv.some((arg) => arg.includes("\0"))) return "an argument contains a NUL byte"
  // `env -i` would take an argv[0] containing '=' for a variable.
  if (spec.argv[0]!.includes("=")) return "a command name containing '=' is not supported by the docker backend"
  if (!spec.cwd.startsWith("/")) return `the working directory must be absolute, got '${spec.cwd}'`
  if (spec.cwd.includes("\0")) return "the working directory contains a NUL byte"
  for (const [key, value] of Object.entries(spec.env)) {
    if (key === "" || key.includes("=") || key.includes("\0") || value.includes("\0")) {
      return `invalid environment variable '${key}'`
    }
  }
  return undefined
}

/**
 * Splits the engine's multiplexed stream (non-TTY execs): frames of an 8-byte header
 * `[type, 0, 0, 0, size(u32 BE)]` then `size` bytes; type 1 = stdout, 2 = stderr.
 */
export class Demuxer {
  private pending: Buffer | undefined
  constructor(private readonly onFrame: (type: number, payload: Buffer) => void) {}

  push(chunk: Buffer) {
    let buffer = this.pending === undefined ? chunk : Buffer.concat([this.pending, chunk])
    this.pending = undefined
    while (buffer.length >= 8) {
      const size = buffer.readUInt32BE(4)
      if (buffer.length < 8 + size) break
      if (size > 0) this.onFrame(buffer[0]!, buffer.subarray(8, 8 + size))
      buffer = buffer.subarray(8 + size)
    }
    if (buffer.length > 0) this.pending = Buffer.from(buffer)
  }
}

const engineMessage = (error: unknown): string => {
  if (error && typeof error === "object") {
    const json = (error as { json?: unknown }).json
    if (json && typeof json === "object" && typeof (json as { message?: unknown }).message === "string") {
      return (json as { message: string }).message.trim()
    }
    if (typeof (error as { message?: unknown }).message === "string") return (error as { message: string }).message.trim()
  }
  return String(error)
}

/** A message for a failed engine call: what was attempted and what the engine said. */
export const describeError = (what: string, error: unknown) => `${what}: ${engineMessage(error)}`

/** The HTTP status of a failed engine call, when there was one. */
export const statusOf = (error: unknown): number | undefined =>
  error && typeof error === "object" && typeof (error as { statusCode?: unknown }).statusCode === "number"
    ? (error as { statusCode: number }).statusCode
    : undefined

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

/** What the computer lends a process: how to signal its group and whether it is still addressable. */
export interface ExecHost {
  readonly backend: string
  /** Delivers a signal (canonical name) to a process group; `session` also reaches its session. */
  readonly kill: (pgid: number, signal: string, session: boolean) => Effect.Effect<void, BackendError>
  /** False once the container was restarted, reset, removed or lost: its pids mean nothing now. */
  readonly current: () => boolean
}

/** A started exec, as the computer tracks it. */
export interface ExecProcess {
  readonly pid: number
  readonly events: Stream.Stream<ProcessEvent>
  readonly write: (data: Uint8Array) => Effect.Effect<void, BackendError>
  readonly closeStdin: Effect.Effect<void, BackendError>
  readonly signal: (signal: string) => Effect.Effect<void, BackendError>
  readonly resize: (cols: number, rows: number) => Effect.Effect<void, BackendError>
  /** Drops the connection: the event stream ends (with Exit SIGKILL when none was seen). */
  readonly abort: () => void
  /** SIGKILLs the process's session and waits (bounded) for its stream to end. */
  readonly terminate: Effect.Effect<void>
}

/**
 * Starts a created exec hijacked and waits for the wrapper's header. Fails with SpawnFailed when the
 * process could not start (command not found, bad working directory, pids limit reached).
 */
export const start = (options: {
  readonly exec: Docker.Exec
  readonly host: ExecHost
  readonly command: string
  readonly tty: boolean
}): Effect.Effect<ExecProcess, SpawnFailed | BackendError> =>
  Effect.gen(function*() {
    const { exec, host, command, tty } = options
    const fail = (reason: string) => new BackendError({ backend: host.backend, reason })
    const queue = yield* Queue.unbounded<Take.Take<ProcessEvent>>()
    const header = yield* Deferred.make<number, SpawnFailed>()
    const finished = yield* Deferred.make<void>()
    const delivered = new Set<number>()
    let headerText: Buffer | undefined = Buffer.alloc(0)
    const earlyStderr: Array<Buffer> = []
    let stdinClosed = false
    let ended = false
    let exited = false

    const offer = (event: ProcessEvent) => {
      if (!ended) Queue.unsafeOffer(queue, Take.of(event))
    }
    const end = (exit: ExitInfo) => {
      if (ended) return
      if (!exited) {
        exited = true
        offer({ _tag: "Exit", exit })
      }
      ended = true
      Queue.unsafeOffer(queue, Take.end)
      Deferred.unsafeDone(finished, Effect.void)
    }
    const exitInfo = (code: number | null): ExitInfo => {
      if (code === null) return { exitCode: null, signal: "SIGKILL" }
      // A process killed by a signal shows as 128+n; only when we sent that signal is it reported as one.
      if (code > 128 && delivered.has(code - 128)) return { exitCode: null, signal: signalName(code - 128) ?? null }
      return { exitCode: code, signal: null }
    }
    const inspectExit = async (): Promise<number | null> => {
      for (let attempt = 0; attempt < 20; attempt++) {
        try {
          const info = await exec.inspect()
          if (!info.Running) return info.ExitCode
        } catch {
          return null
        }
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      return null
    }

    const stdout = (data: Buffer) => {
      if (headerText === undefined) return offer({ _tag: "Stdout", data })
      headerText = Buffer.concat([headerText, data])
      const newline = headerText.indexOf(10)
      if (newline < 0) {
        if (headerText.length > HEADER_LIMIT) headerText = headerText.subarray(0, HEADER_LIMIT)
        return
      }
      const line = headerText.subarray(0, newline).toString("utf8").replace(/\r$/, "")
      const rest = headerText.subarray(newline + 1)
      const pid = /^KT(\d+)$/.exec(line)
      if (pid) {
        headerText = undefined
        Deferred.unsafeDone(header, Effect.succeed(Number(pid[1])))
        for (const data of earlyStderr.splice(0)) offer({ _tag: "Stderr", data })
        if (rest.length > 0) offer({ _tag: "Stdout", data: rest })
      } else if (line.startsWith("KTE")) {
        headerText = undefined
        Deferred.unsafeDone(header, Effect.fail(new SpawnFailed({ command, reason: line.slice(3) })))
      }
      // Anything else is the engine's own message (OCI runtime exec failed …): kept until the end.
    }

    const socket: Duplex = yield* Effect.tryPromise({
      try: () => exec.start({ hijack: true, stdin: true, Tty: tty }) as Promise<Duplex>,
      catch: (error) => fail(describeError("cannot start the process", error))
    })
    const demuxer = new Demuxer((type, payload) => {
      if (type === 2) {
        // The engine copies stdout and stderr independently: stderr may overtake the header.
        if (headerText !== undefined) earlyStderr.push(Buffer.from(payload))
        else offer({ _tag: "Stderr", data: payload })
      } else {
        stdout(payload)
      }
    })
    let closing = false
    const onEnd = () => {
      if (closing) return
      closing = true
      void inspectExit().then((code) => {
        if (headerText !== undefined) {
          const text = Buffer.concat([headerText, ...earlyStderr]).toString("utf8")
          headerText = undefined
          Deferred.unsafeDone(header, Effect.fail(new SpawnFailed({ command, reason: startupReason(text, code) })))
        }
        end(exitInfo(code))
      })
    }
    socket.on("data", (chunk: Buffer) => (tty ? stdout(chunk) : demuxer.push(chunk)))
    socket.on("end", onEnd)
    socket.on("close", onEnd)
    socket.on("error", onEnd)

    const pid = yield* Deferred.await(header).pipe(
      Effect.timeoutFail({
        duration: "30 seconds",
        onTimeout: () => new SpawnFailed({ command, reason: "the process did not start within 30 s" })
      }),
      Effect.tapError(() => Effect.sync(() => socket.destroy()))
    )

    const open = Effect.suspend(() =>
      ended || socket.destroyed || !socket.writable
        ? Effect.fail(fail(stdinClosed ? "stdin is closed" : "the process has ended"))
        : Effect.void
    )
    const write = (data: Uint8Array) =>
      open.pipe(Effect.andThen(Effect.async<void, BackendError>((resume) => {
        socket.write(Buffer.from(data.buffer, data.byteOffset, data.byteLength), (error) =>
          resume(error ? Effect.fail(fail(`cannot write to the process: ${error.message}`)) : Effect.void)
        )
      })))
    const signal = (name: string) =>
      Effect.suspend(() => {
        const canonical = normalizeSignal(name)
        if (Either.isLeft(canonical)) return Effect.fail(fail(canonical.left))
        if (ended || !host.current()) return Effect.void
        const n = signalNumber(canonical.right)
        if (n !== undefined) delivered.add(n)
        return host.kill(pid, canonical.right, false)
      })
    const abort = () => {
      socket.destroy()
    }
    const terminate = Effect.suspend(() => {
      if (ended) return Effect.void
      delivered.add(9)
      // Runs in finalizers: every wait is made interruptible and bounded.
      const kill = host.current()
        ? host.kill(pid, "SIGKILL", true).pipe(
          Effect.interruptible,
          Effect.timeoutFail({ duration: "5 seconds", onTimeout: () => fail("no answer within 5 s") }),
          Effect.catchAll((error) => Effect.logWarning(`${host.backend} backend: cannot kill process ${pid}: ${error.reason}`))
        )
        : Effect.void
      return kill.pipe(
        Effect.andThen(Deferred.await(finished).pipe(Effect.interruptible, Effect.timeout("3 seconds"))),
        Effect.ignore,
        Effect.ensuring(Effect.sync(() => {
          socket.destroy()
          end({ exitCode: null, signal: "SIGKILL" })
        }))
      )
    })
    const process: ExecProcess = {
      pid,
      events: Stream.fromQueue(queue).pipe(Stream.flattenTake),
      write,
      closeStdin: Effect.suspend(() => {
        if (tty) return write(new Uint8Array([4]))
        if (stdinClosed || ended) return Effect.void
        stdinClosed = true
        return Effect.sync(() => socket.end())
      }),
      signal,
      resize: (cols, rows) =>
        !tty
          ? Effect.fail(fail("resize needs a process with a TTY"))
          : !(Number.isInteger(cols) && Number.isInteger(rows) && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535)
          ? Effect.fail(fail(`invalid terminal size ${cols}x${rows}`))
          : Effect.tryPromise({
            try: () => exec.resize({ h: rows, w: cols }),
            catch: (error) => fail(describeError("cannot resize the terminal", error))
          }).pipe(Effect.asVoid),
      abort,
      terminate
    }
    return process
  })
