import { Clock, Duration, Effect, Either, Layer, Option, Queue, Schedule } from "effect"
import type { ComputerActor } from "../actors/ComputerActor.js"
import { truncateMiddle } from "../actors/OutputLog.js"
import type { ProcessActor } from "../actors/ProcessActor.js"
import { parseStdinEscapes } from "../actors/StdinEscapes.js"
import { processEnvironment } from "../domain/Environment.js"
import { InvalidInput, ProcessExited, ProcessNotFound } from "../domain/Errors.js"
import type { ProcessInfo, ReadOptions } from "../domain/Process.js"
import { normalizeSignal, signalNumber } from "../domain/Signals.js"
import type { ExitInfo } from "../services/Backend.js"
import { Computers } from "../services/Computers.js"
import {
  type ExecInput,
  type ExecResult,
  Processes,
  type ProgressReporter,
  type SpawnInput,
  type WaitInput
} from "../services/Processes.js"
import { Settings } from "../services/Settings.js"

/** The most stdin one sandbox_exec call takes. */
export const maxExecStdinBytes = 8 * 1024 * 1024
/** Default inline bytes per stream in spawn/stdout results. */
export const defaultInlineBytes = 16 * 1024

const encoder = new TextEncoder()
 
const ansi = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g
const decoder = () => new TextDecoder("utf-8", { fatal: false })

const exitCodeOf = (exit: ExitInfo): number =>
  exit.exitCode ?? (exit.signal !== null ? 128 + (signalNumber(exit.signal) ?? 9) : 1)

const withProgress = <A, E>(
  work: Effect.Effect<A, E>,
  progress: ProgressReporter | undefined,
  message: (elapsedMs: number) => string
): Effect.Effect<A, E> =>
  progress === undefined
    ? work
    : Effect.gen(function*() {
      const start = yield* Clock.currentTimeMillis
      let tick = 0
      const ticker = Clock.currentTimeMillis.pipe(
        Effect.flatMap((now) => progress({ progress: ++tick, message: message(now - start) })),
        Effect.repeat(Schedule.spaced(Duration.seconds(1))),
        Effect.delay(Duration.seconds(1))
      )
      return yield* Effect.raceFirst(work, Effect.zipRight(ticker, Effect.never))
    })

export const layer = Layer.effect(
  Processes,
  Effect.gen(function*() {
    const settings = yield* Settings
    const computers = yield* Computers
    const registry = new Map<string, ProcessActor>()
    const finished: Array<string> = []
    let counter = 0

    const onExit = (actor: ProcessActor) =>
      Effect.sync(() => {
        finished.push(actor.id)
        while (finished.length > settings.maxFinished) registry.delete(finished.shift()!)
      })

    const get = (id: string) =>
      Effect.suspend(() => {
        const actor = registry.get(id)
        return actor ? Effect.succeed(actor) : new ProcessNotFound({ id })
      })

    const resolveCwd = (computer: ComputerActor, cwd: string | undefined) =>
      cwd === undefined || cwd === "" ? computer.home : cwd.startsWith("/") ? cwd : `${computer.home}/${cwd}`

    const start = (
      computer: ComputerActor,
      request: {
        readonly command: string
        readonly argv: ReadonlyArray<string>
        readonly cwd: string | undefined
        readonly env: Readonly<Record<string, string>> | undefined
        readonly tty: { readonly cols: number; readonly rows: number } | undefined
        readonly retainBytes?: number
      }
    ) =>
      Effect.gen(function*() {
        const id = `p${++counter}`
        const actor = yield* computer.spawn({
          id,
          command: request.command,
          spec: {
            argv: request.argv,
            cwd: resolveCwd(computer, request.cwd),
            env: processEnvironment({
              home: computer.home,
              shell: settings.shell,
              tty: request.tty !== undefined,
              server: settings.env,
              call: request.env
            }),
            tty: request.tty
          },
          headBytes: Math.max(settings.headBytes, request.retainBytes ?? 0),
          tailBytes: Math.max(settings.tailBytes, request.retainBytes ?? 0),
          mailboxCapacity: settings.mailboxCapacity,
          onExit
        })
        registry.set(id, actor)
        return actor
      })

    const snapshot = (actor: ProcessActor, options: ReadOptions) =>
      Effect.all([actor.info, actor.read(options)]).pipe(
        Effect.map(([info, view]) => ({
          id: info.id,
          status: info.status,
          exitCode: info.exitCode,
          signal: info.signal,
          ...view
        }))
      )

    const validateSize = (name: string, value: number | undefined) =>
      value === undefined || (Number.isInteger(value) && value >= 2 && value <= 1000)
        ? Effect.void
        : new InvalidInput({ message: `${name} must be an integer between 2 and 1000` })

    const spawn = (session: string, input: SpawnInput, progress?: ProgressReporter) =>
      Effect.gen(function*() {
        if (input.command.trim() === "") return yield* new InvalidInput({ message: "command must not be empty" })
        if (input.timeoutMs !== undefined && !(input.timeoutMs >= 0)) {
          return yield* new InvalidInput({ message: "timeoutMs must be a number >= 0" })
        }
        yield* validateSize("cols", input.cols)
        yield* validateSize("rows", input.rows)
        const began = yield* Clock.currentTimeMillis
        const computer = yield* computers.resolve(session, input)
        const actor = yield* start(computer, {
          command: input.command,
          argv: [settings.shell, "-c", input.command],
          cwd: input.cwd,
          env: input.env,
          tty: input.tty ? { cols: input.cols ?? settings.cols, rows: input.rows ?? settings.rows } : undefined
        })
        if (!input.background) {
          const wait = Math.min(input.timeoutMs ?? settings.spawnTimeoutMs, settings.maxTimeoutMs)
          // Races the wait for the exit, never the process: on timeout the process keeps running.
          yield* withProgress(
            actor.exited.pipe(Effect.timeoutOption(Duration.millis(wait))),
            progress,
            (ms) => `process ${actor.id} running for ${Math.round(ms / 1000)} s`
          )
        }
        const view = yield* snapshot(actor, { maxBytes: input.maxBytes ?? defaultInlineBytes })
        const now = yield* Clock.currentTimeMillis
        return { ...view, computer_id: computer.id, durationMs: now - began }
      })

    const truncateFor = (text: string, budget: number) => truncateMiddle(text, Math.max(budget, 0))

    const exec = (session: string, input: ExecInput, progress?: ProgressReporter) =>
      Effect.gen(function*() {
        const command = input.command === "" ? undefined : input.command
        const args = input.args && input.args.length > 0 ? input.args : undefined
        if ((command === undefined) === (args === undefined)) {
          return yield* new InvalidInput({ message: "give exactly one of command (a shell command line) or args (an argv list)" })
        }
        const cwd = input.working_directory === "" ? undefined : input.working_directory
        if (cwd !== undefined && !cwd.startsWith("/")) {
          return yield* new InvalidInput({ message: "working_directory must be an absolute path (start with /)" })
        }
        const timeout = input.timeout ?? settings.timeout
        if (!(Number.isFinite(timeout) && timeout >= 1)) {
          return yield* new InvalidInput({ message: "timeout must be a number of seconds >= 1" })
        }
        const stdin = input.stdin === undefined || input.stdin === "" ? undefined : encoder.encode(input.stdin)
        if (stdin && stdin.length > maxExecStdinBytes) {
          return yield* new InvalidInput({ message: `stdin is larger than ${maxExecStdinBytes} bytes; write a file instead` })
        }
        const began = yield* Clock.currentTimeMillis
        const computer = yield* computers.resolve(session, input)
        const actor = yield* start(computer, {
          command: command ?? args!.join(" "),
          argv: args ?? [settings.shell, "-c", command!],
          cwd,
          env: input.env,
          tty: undefined,
          retainBytes: Math.ceil(settings.outputLimit / 2)
        })
        if (stdin) yield* actor.write(stdin).pipe(Effect.catchTag("ProcessExited", () => Effect.void))
        yield* actor.closeStdin.pipe(Effect.catchTag("ProcessExited", () => Effect.void))
        const exited = yield* withProgress(
          actor.exited.pipe(Effect.timeoutOption(Duration.seconds(timeout))),
          progress,
          (ms) => `command running for ${Math.round(ms / 1000)} s of ${timeout} s`
        )
        let exitCode: number
        if (Option.isNone(exited)) {
          yield* actor.signal("SIGKILL", `timed out after ${timeout} s (sandbox_exec)`).pipe(Effect.ignore)
          yield* actor.exited.pipe(Effect.timeout(Duration.seconds(5)), Effect.ignore)
          exitCode = 124
        } else {
          exitCode = exitCodeOf(exited.value)
        }
        const view = yield* actor.read({})
        const end = yield* Clock.currentTimeMillis
        const limit = settings.outputLimit
        const outBytes = view.stdout.total
        const errBytes = view.stderr.total
        let stdout = view.stdout.text
        let stderr = view.stderr.text
        let truncated = view.stdout.omitted > 0 || view.stderr.omitted > 0
        if (outBytes + errBytes > limit) {
          const errBudget = Math.max(Math.floor(limit / 4), limit - outBytes)
          const outBudget = Math.max(limit - Math.min(errBytes, errBudget), Math.floor(limit / 2))
          const out = truncateFor(stdout, outBudget)
          const err = truncateFor(stderr, limit - Math.min(encoder.encode(out.text).length, outBudget))
          truncated = truncated || out.omitted > 0 || err.omitted > 0
          stdout = out.text
          stderr = err.text
        }
        if (truncated) {
          stderr += `${stderr === "" || stderr.endsWith("\n") ? "" : "\n"}[kilntainers: output was ${outBytes} bytes of stdout and ${errBytes} bytes of stderr, over the ${limit}-byte limit; the middle was cut, head and tail kept. Re-run with head, tail or grep to see the rest.]`
        }
        if (exitCode === 124 && Option.isNone(exited)) {
          stderr += `${stderr === "" || stderr.endsWith("\n") ? "" : "\n"}[kilntainers: command timed out after ${timeout}s; its process group was killed; the output above is what it wrote before that]`
        }
        const result: ExecResult = {
          computer_id: computer.id,
          temporary: computer.temporary,
          stdout,
          stderr,
          exit_code: exitCode,
          exec_duration_ms: end - began,
          timed_out: Option.isNone(exited),
          truncated,
          stdout_bytes: outBytes,
          stderr_bytes: errBytes
        }
        return result
      })

    const list = (filter?: { readonly computer_id?: string | undefined; readonly status?: string | undefined }) =>
      Effect.forEach([...registry.values()], (actor) => actor.info).pipe(
        Effect.map((infos) =>
          infos.filter((info: ProcessInfo) =>
            (filter?.computer_id === undefined || info.computer_id === filter.computer_id) &&
            (filter?.status === undefined || info.status === filter.status)
          )
        )
      )

    const stdin = (id: string, input: string, eof: boolean) =>
      Effect.gen(function*() {
        const actor = yield* get(id)
        const parsed = parseStdinEscapes(input)
        if (Either.isLeft(parsed)) return yield* new InvalidInput({ message: parsed.left })
        const bytes = parsed.right
        if (bytes.length === 0 && !eof) return yield* new InvalidInput({ message: "input is empty and eof is not set: nothing to send" })
        if (bytes.length > 0) yield* actor.write(bytes)
        if (eof) yield* actor.closeStdin
        return { id, bytes: bytes.length, eof }
      })

    const read = (id: string, options: ReadOptions) =>
      Effect.gen(function*() {
        const actor = yield* get(id)
        return yield* snapshot(actor, { ...options, maxBytes: options.maxBytes ?? defaultInlineBytes })
      })

    const kill = (id: string, signal?: string) =>
      Effect.gen(function*() {
        const actor = yield* get(id)
        const name = normalizeSignal(signal ?? "SIGTERM")
        if (Either.isLeft(name)) return yield* new InvalidInput({ message: name.left })
        const status = yield* actor.status
        if (status !== "running") return yield* new ProcessExited({ id, status })
        yield* actor.signal(name.right, `killed with ${name.right} (kill tool)`)
        // Report what happened: most processes end within moments of the signal.
        yield* actor.exited.pipe(Effect.timeout(Duration.seconds(2)), Effect.ignore)
        const info = yield* actor.info
        return { id, signal: name.right, status: info.status, exitCode: info.exitCode, exitSignal: info.signal }
      })

    const matchPattern = (actor: ProcessActor, regex: RegExp) =>
      Effect.scoped(Effect.gen(function*() {
        const live = yield* actor.subscribe
        // Raw bytes (a TTY's too): the rendered screen trims trailing spaces a prompt may end with.
        const current = yield* actor.read({ stdoutCursor: 0, stderrCursor: 0, maxBytes: 1024 * 1024 })
        let window = (current.screen?.text ?? "") + "\n" + current.stdout.text + "\n" + current.stderr.text
        const first = window.replace(ansi, "").match(regex)
        if (first) return first[0]
        const out = decoder()
        const err = decoder()
        window = ""
        while (true) {
          const event = yield* Queue.take(live)
          if (event._tag === "Exit") return yield* Effect.never
          window += event._tag === "Stdout" ? out.decode(event.data, { stream: true }) : err.decode(event.data, { stream: true })
          if (window.length > 256 * 1024) window = window.slice(-128 * 1024)
          const found = window.replace(ansi, "").match(regex)
          if (found) return found[0]
        }
      }))

    const quiet = (actor: ProcessActor, quietMs: number): Effect.Effect<void> =>
      Effect.gen(function*() {
        while (true) {
          const last = yield* actor.lastActivity
          const now = yield* Clock.currentTimeMillis
          if (now - last >= quietMs) return
          yield* Effect.sleep(Duration.millis(quietMs - (now - last)))
        }
      })

    const wait = (input: WaitInput, progress?: ProgressReporter) =>
      Effect.gen(function*() {
        const actor = yield* get(input.id)
        let regex: RegExp | undefined
        if (input.pattern !== undefined && input.pattern !== "") {
          try {
            regex = new RegExp(input.pattern, "m")
          } catch (e) {
            return yield* new InvalidInput({ message: `pattern is not a valid regular expression: ${(e as Error).message}` })
          }
        }
        if (input.quietMs !== undefined && !(input.quietMs > 0)) {
          return yield* new InvalidInput({ message: "quietMs must be a number > 0" })
        }
        if (input.timeoutMs !== undefined && !(input.timeoutMs >= 0)) {
          return yield* new InvalidInput({ message: "timeoutMs must be a number >= 0" })
        }
        const began = yield* Clock.currentTimeMillis
        const timeout = Math.min(input.timeoutMs ?? 30_000, settings.maxTimeoutMs)
        type Outcome = { readonly reason: "exited" | "matched" | "quiet" | "timeout"; readonly match?: string }
        const conditions: Array<Effect.Effect<Outcome>> = [Effect.as(actor.exited, { reason: "exited" as const })]
        if (regex) conditions.unshift(Effect.map(matchPattern(actor, regex), (match) => ({ reason: "matched" as const, match })))
        if (input.quietMs !== undefined) conditions.push(Effect.as(quiet(actor, input.quietMs), { reason: "quiet" as const }))
        const outcome: Outcome = yield* withProgress(
          Effect.raceAll(conditions).pipe(
            Effect.timeoutTo({ duration: Duration.millis(timeout), onSuccess: (o) => o, onTimeout: () => ({ reason: "timeout" as const }) })
          ),
          progress,
          (ms) => `waiting on ${input.id} for ${Math.round(ms / 1000)} s`
        )
        const info = yield* actor.info
        const now = yield* Clock.currentTimeMillis
        return {
          id: input.id,
          reason: outcome.reason,
          status: info.status,
          exitCode: info.exitCode,
          signal: info.signal,
          ...(outcome.match !== undefined ? { match: outcome.match } : {}),
          waitedMs: now - began
        }
      })

    return Processes.of({ spawn, exec, list, get, stdin, read, kill, wait })
  })
)
