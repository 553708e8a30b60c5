/**
 * One process of the Modal backend: a `sandbox.exec` of a small `/bin/sh` wrapper, turned into the
 * backend's ordered ProcessEvent stream.
 *
 * The wrapper (see `wrapperArgv`):
 *   1. makes itself a process-group leader: when it is not one already, it re-executes itself under
 *      `setsid` (which then does not fork, so the pid stays) — signals go to the whole group with a
 *      second exec, `kill -s SIG -- -pgid`;
 *   2. changes to the working directory and checks that argv[0] can be found on the process's PATH
 *      (a bad directory or a missing command is a SpawnFailed, not a process that prints an error);
 *   3. on a TTY, sets the size with `stty` (Modal's PTY is a fixed 80x24);
 *   4. writes one header line `KT<pid> <tty>` on stdout;
 *   5. runs `env -i K=V… argv` in the foreground — the process gets exactly SpawnSpec.env (Modal's
 *      exec env only adds to the sandbox's) — while catching the usual signals itself (the handlers
 *      are reset in the child), so that it outlives a signalled process;
 *   6. when the process has ended, writes an end marker `\0KTX<nonce>:<code>\0` on stdout and on
 *      stderr. Everything the process itself wrote precedes the marker in each pipe, so Exit is
 *      emitted once both markers have arrived: after all of the process's own output, even when
 *      children that outlive it keep the pipes open (their later output still follows).
 * When the wrapper itself is SIGKILLed (no marker), Exit comes when Modal reports the end of the
 * exec and the streams have ended, or 2 s after that.
 */
import { Deferred, Effect, Either, Fiber, Queue, Stream, Take } from "effect"
import { randomBytes } from "node:crypto"
import { BackendError, SpawnFailed } from "../../domain/Errors.js"
import { normalizeSignal, signalName, signalNumber } from "../../domain/Signals.js"
import type { ExitInfo, ProcessEvent, SpawnSpec } from "../../services/Backend.js"
import type { ExecHandle, ModalGatewayError, SandboxHandle } from "./ModalGateway.js"
import type { Scope } from "effect"

const DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
const HEADER_LIMIT = 4096
const HEADER_TIMEOUT = "60 seconds"
const UNMARKED_EXIT_GRACE = "2 seconds"
const TRAPPED = "HUP INT QUIT TERM USR1 USR2 PIPE ALRM"

const WRAPPER = [
  `n=$1; p=$2; d=$3; c=$4; t=$5`,
  // 1. own process group (field 5 of /proc/<pid>/stat, counted after the command name)
  `s=$(cat /proc/$$/stat 2>/dev/null); s=\${s##*) }; set -- $s`,
  `if [ "$3" != "$$" ] && [ -z "$KT_SETSID" ]; then`,
  `  command -v setsid >/dev/null 2>&1 || { printf 'KTE%s\\n' "the image has no 'setsid' (util-linux or busybox) to give the process its own process group"; exit 127; }`,
  `  KT_SETSID=1 exec setsid /bin/sh -c "$KT_W" kilntainers "$n" "$p" "$d" "$c" "$t"`,
  `fi`,
  `exec 3<&0`, // keep stdin for the process
  `eval "set -- $KT_A"`,
  // 2. directory and command
  `cd -- "$d" 2>/dev/null || { printf 'KTE%s\\n' "cannot change to the working directory '$d'"; exit 127; }`,
  `case $c in */*) [ -f "$c" ] && [ -x "$c" ] ;; *) PATH=$p command -v -- "$c" >/dev/null 2>&1 ;; esac ||`,
  ` { printf 'KTE%s\\n' "'$c': command not found (PATH=$p)"; exit 127; }`,
  // 3. terminal size, 4. header
  `[ -z "$t" ] || stty $t 2>/dev/null`,
  `y=$(tty 2>/dev/null) || y=-`,
  `printf 'KT%s %s\\n' $$ "$y"`,
  // 5. the process, 6. the end marker
  `trap : ${TRAPPED}`,
  `env -i "$@" <&3 3<&-`,
  `r=$?`,
  `printf '\\000KTX%s:%s\\000' "$n" "$r"; [ -n "$t" ] || printf '\\000KTX%s:%s\\000' "$n" "$r" >&2`,
  `exit $r`
].join("\n")

const quote = (value: string) => `'${value.replace(/'/g, `'\\''`)}'`

/**
 * The exec's argv: the wrapper with nonce, PATH, cwd, command and terminal size as arguments; the
 * process's K=V environment and argv go in one quoted variable, so the wrapper can re-execute itself.
 */
export const wrapperArgv = (spec: SpawnSpec, env: Readonly<Record<string, string>>, nonce: string): Array<string> => {
  const words = [...Object.entries(env).map(([key, value]) => `${key}=${value}`), ...spec.argv].map(quote).join(" ")
  return [
    "/bin/sh", "-c", `KT_W=${quote(WRAPPER)}; KT_A=${quote(words)}; export KT_W KT_A; exec /bin/sh -c "$KT_W" kilntainers "$@"`,
    "kilntainers",
    nonce,
    env["PATH"] ?? DEFAULT_PATH,
    spec.cwd,
    spec.argv[0]!,
    spec.tty ? `cols ${spec.tty.cols} rows ${spec.tty.rows}` : ""
  ]
}

/** Signals a process group; `session` also reaches processes of its session that left the group. */
export const KILL_SCRIPT = [
  `kill -s "$1" -- "-$2" 2>/dev/null; r=$?`,
  `if [ "$3" = session ]; then`,
  `  for f in /proc/[0-9]*/stat; do s=$(cat "$f" 2>/dev/null) || continue; q=\${s%% *}; s=\${s##*) }; set -- "$1" "$2" "$3" $s`,
  `    [ "$7" = "$2" ] && kill -s "$1" "$q" 2>/dev/null; set -- "$1" "$2" "$3"; done`,
  `fi`,
  `exit $r`
].join("\n")

/** A reason why the spec cannot be run, or undefined. */
export const invalidSpec = (spec: SpawnSpec): string | undefined => {
  if (spec.argv.length === 0 || spec.argv[0] === "") return "argv is empty"
  if (spec.argv.some((arg) => arg.includes("\0"))) return "an argument contains a NUL byte"
  if (spec.argv[0]!.includes("=")) return "a command name containing '=' is not supported by the modal backend"
  if (!spec.cwd.startsWith("/") || spec.cwd.includes("\0")) return `the working directory must be an absolute path, got '${spec.cwd}'`
  for (const [key, value] of Object.entries(spec.env)) {
    if (key === "" || key.includes("=") || key.includes("\0") || value.includes("\0")) return `invalid environment variable '${key}'`
  }
  return undefined
}

/**
 * Finds the end marker in one output stream; output is passed on without it. Only a tail that could
 * be the start of the marker is held back (so a prompt without a newline is not delayed).
 */
export class MarkerScanner {
  private readonly prefix: Buffer
  private held: Buffer = Buffer.alloc(0)
  /** The exit code once the marker was seen. */
  code: number | undefined

  constructor(nonce: string, private readonly emit: (data: Uint8Array) => void) {
    this.prefix = Buffer.from(`\0KTX${nonce}:`)
  }

  push(chunk: Uint8Array) {
    if (this.code !== undefined) return this.emit(chunk)
    const data = this.held.length === 0 ? Buffer.from(chunk) : Buffer.concat([this.held, chunk])
    this.held = Buffer.alloc(0)
    const at = data.indexOf(this.prefix)
    if (at >= 0) {
      const end = data.indexOf(0, at + this.prefix.length)
      if (end < 0) {
        if (at > 0) this.emit(data.subarray(0, at))
        this.held = data.subarray(at)
        return
      }
      if (at > 0) this.emit(data.subarray(0, at))
      this.code = Number(data.subarray(at + this.prefix.length, end).toString("latin1"))
      if (end + 1 < data.length) this.emit(data.subarray(end + 1))
      return
    }
    // Hold back a tail that is a proper prefix of the marker.
    for (let keep = Math.min(this.prefix.length - 1, data.length); keep > 0; keep--) {
      if (data.subarray(data.length - keep).equals(this.prefix.subarray(0, keep))) {
        if (data.length > keep) this.emit(data.subarray(0, data.length - keep))
        this.held = data.subarray(data.length - keep)
        return
      }
    }
    this.emit(data)
  }

  /** The stream ended: whatever was held is output after all. */
  flush() {
    if (this.held.length > 0) this.emit(this.held)
    this.held = Buffer.alloc(0)
  }
}

/** What the computer lends a process. */
export interface ExecHost {
  readonly backend: string
  readonly sandbox: SandboxHandle
  /** Delivers a signal (canonical name) to a process group; `session` also reaches its session. */
  readonly kill: (pgid: number, signal: string, session: boolean) => Effect.Effect<void, BackendError>
  /** False once the sandbox was reset, destroyed or lost: its pids mean nothing now. */
  readonly current: () => boolean
}

export interface ModalProcess {
  readonly pid: number
  readonly tty: string | undefined
  readonly events: Stream.Stream<ProcessEvent>
  readonly write: (data: Uint8Array) => Effect.Effect<void, BackendError>
  readonly closeStdin: Effect.Effect<void, BackendError>
  readonly signal: (signal: string) => Effect.Effect<void, BackendError>
  /** Ends the event stream now (Exit SIGKILL unless one was seen): the sandbox is gone. */
  readonly abort: () => void
  /** SIGKILLs the process's session (bounded) and ends the event stream. */
  readonly terminate: Effect.Effect<void>
}

/** Starts the process and waits for the wrapper's header. */
export const start = (options: {
  readonly host: ExecHost
  readonly spec: SpawnSpec
  readonly command: string
}): Effect.Effect<ModalProcess, SpawnFailed | BackendError, Scope.Scope> =>
  Effect.gen(function*() {
    const { host, spec, command } = options
    const fail = (reason: string) => new BackendError({ backend: host.backend, reason })
    const tty = spec.tty !== undefined
    const env = tty && spec.env["TERM"] === undefined ? { ...spec.env, TERM: "xterm-256color" } : spec.env
    const nonce = randomBytes(12).toString("hex")
    const queue = yield* Queue.unbounded<Take.Take<ProcessEvent>>()
    const header = yield* Deferred.make<{ readonly pid: number; readonly tty: string | undefined }, SpawnFailed>()
    const delivered = new Set<number>()
    const early: Array<Uint8Array> = []
    let headerText: Buffer | undefined = Buffer.alloc(0)
    let exited = false
    let ended = false

    const offer = (event: ProcessEvent) => {
      if (!ended) Queue.unsafeOffer(queue, Take.of(event))
    }
    const exitInfo = (code: number | null): ExitInfo => {
      if (code === null) return { exitCode: null, signal: "SIGKILL" }
      if (code > 128 && delivered.has(code - 128)) return { exitCode: null, signal: signalName(code - 128) ?? null }
      return { exitCode: code, signal: null }
    }
    const exit = (code: number | null) => {
      if (exited || ended) return
      exited = true
      offer({ _tag: "Exit", exit: exitInfo(code) })
    }
    const end = () => {
      if (ended) return
      exit(null)
      ended = true
      Queue.unsafeOffer(queue, Take.end)
    }

    const stdoutScanner = new MarkerScanner(nonce, (data) => offer({ _tag: "Stdout", data }))
    const stderrScanner = new MarkerScanner(nonce, (data) => {
      if (headerText !== undefined) early.push(data)
      else offer({ _tag: "Stderr", data })
    })
    const settle = () => {
      if (stdoutScanner.code !== undefined && (tty || stderrScanner.code !== undefined)) exit(stdoutScanner.code)
    }
    const onStdout = (chunk: Uint8Array) => {
      if (headerText === undefined) return stdoutScanner.push(chunk)
      headerText = Buffer.concat([headerText, chunk])
      const newline = headerText.indexOf(10)
      if (newline < 0) {
        if (headerText.length > HEADER_LIMIT) headerText = headerText.subarray(0, HEADER_LIMIT)
        return
      }
      const line = headerText.subarray(0, newline).toString("utf8").replace(/\r$/, "")
      const rest = headerText.subarray(newline + 1)
      const parsed = /^KT(\d+) (.*)$/.exec(line)
      if (parsed) {
        headerText = undefined
        Deferred.unsafeDone(header, Effect.succeed({ pid: Number(parsed[1]), tty: parsed[2] === "-" ? undefined : parsed[2] }))
        for (const data of early.splice(0)) offer({ _tag: "Stderr", data })
        if (rest.length > 0) stdoutScanner.push(rest)
      } else if (line.startsWith("KTE")) {
        headerText = undefined
        Deferred.unsafeDone(header, Effect.fail(new SpawnFailed({ command, reason: line.slice(3) })))
      }
    }

    const exec: ExecHandle = yield* host.sandbox.exec({
      argv: wrapperArgv(spec, env, nonce),
      pty: tty
    }).pipe(Effect.mapError((error) => fail(`cannot start the process: ${error.message}`)))

    const pump = (stream: Stream.Stream<Uint8Array, ModalGatewayError>, onData: (data: Uint8Array) => void, scanner: MarkerScanner) =>
      stream.pipe(
        Stream.runForEach((chunk) =>
          Effect.sync(() => {
            onData(chunk)
            settle()
          })
        ),
        Effect.ignore,
        Effect.andThen(Effect.sync(() => {
          scanner.flush()
          settle()
        }))
      )
    const stdoutDone = yield* Effect.forkScoped(pump(exec.stdout, onStdout, stdoutScanner))
    const stderrDone = yield* Effect.forkScoped(pump(exec.stderr, (chunk) => stderrScanner.push(chunk), stderrScanner))
    const supervisor = yield* Effect.forkScoped(Effect.gen(function*() {
      const code = yield* exec.wait.pipe(Effect.either)
      if (headerText !== undefined) {
        // Ended before the header: it could not start.
        yield* Effect.all([Fiber.await(stdoutDone), Fiber.await(stderrDone)]).pipe(Effect.timeout("2 seconds"), Effect.ignore)
        const said = Buffer.concat([headerText ?? Buffer.alloc(0), ...early]).toString("utf8").trim()
        const reason = said !== ""
          ? said
          : Either.isLeft(code)
          ? code.left.message
          : `the process ended before it started (exit code ${code.right})`
        Deferred.unsafeDone(header, Effect.fail(new SpawnFailed({ command, reason })))
      }
      // Marked: Exit is emitted by the scanners. Unmarked (wrapper killed): when the streams end, or after a grace.
      yield* Effect.all([Fiber.await(stdoutDone), Fiber.await(stderrDone)]).pipe(Effect.timeout(UNMARKED_EXIT_GRACE), Effect.ignore)
      if (Either.isRight(code)) exit(code.right)
      else exit(null)
      yield* Effect.all([Fiber.await(stdoutDone), Fiber.await(stderrDone)])
      end()
    }))
    const stopAll = Effect.all([Fiber.interrupt(stdoutDone), Fiber.interrupt(stderrDone), Fiber.interrupt(supervisor)], {
      discard: true
    })

    const started = yield* Deferred.await(header).pipe(
      Effect.timeoutFail({
        duration: HEADER_TIMEOUT,
        onTimeout: () => new SpawnFailed({ command, reason: "the process did not start within 60 s" })
      }),
      Effect.tapError(() => stopAll.pipe(Effect.andThen(Effect.sync(end))))
    )

    let stdinClosed = false
    const open = Effect.suspend(() =>
      ended || exited || !host.current()
        ? Effect.fail(fail("the process has ended"))
        : stdinClosed
        ? Effect.fail(fail("stdin is closed"))
        : Effect.void
    )
    const write = (data: Uint8Array) =>
      open.pipe(
        Effect.andThen(exec.writeStdin(data)),
        Effect.mapError((error) => (error._tag === "BackendError" ? error : fail(`cannot write to the process: ${error.message}`)))
      )
    const signal = (name: string) =>
      Effect.suspend(() => {
        const canonical = normalizeSignal(name)
        if (Either.isLeft(canonical)) return Effect.fail(fail(canonical.left))
        if (ended || exited || !host.current()) return Effect.void
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
          Effect.timeoutFail({ duration: "10 seconds", onTimeout: () => fail("no answer within 10 s") }),
          Effect.catchAll((error) => Effect.logWarning(`${host.backend} backend: cannot kill process ${started.pid}: ${error.reason}`))
        )
        : Effect.void
      return kill.pipe(
        Effect.andThen(Fiber.await(supervisor).pipe(Effect.interruptible, Effect.timeout("3 seconds"))),
        Effect.ignore,
        Effect.ensuring(stopAll.pipe(Effect.andThen(Effect.sync(end))))
      )
    })
    const process: ModalProcess = {
      pid: started.pid,
      tty: started.tty,
      events: Stream.fromQueue(queue).pipe(Stream.flattenTake),
      write,
      closeStdin: Effect.suspend(() => {
        if (tty) return write(new Uint8Array([4]))
        if (stdinClosed || ended || exited) return Effect.void
        stdinClosed = true
        return exec.closeStdin.pipe(Effect.catchAll(() => Effect.void))
      }),
      signal,
      abort: () => {
        end()
        Effect.runFork(stopAll)
      },
      terminate
    }
    return process
  })
