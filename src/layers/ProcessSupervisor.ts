/**
 * The Processes service: every process of every computer, by handle (`p1`, `p2`, … never reused).
 * A process belongs to one computer incarnation: a deleted computer's processes leave every listing,
 * and a session reaches only the processes of computers it may use. Results follow one design for
 * agents (see README "Tool results"): compact, nothing empty, output within one inline budget.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import { parseStdinEscapes } from "../actors/StdinEscapes.js"
import { computerIdProblem } from "../domain/ComputerIds.js"
import { firstNulProblem } from "../domain/CString.js"
import { envProblem, processEnvironment } from "../domain/Environment.js"
import { InvalidInput, ProcessExited, ProcessNotFound, Unsupported } from "../domain/Errors.js"
import type { ProcessInfo } from "../domain/Process.js"
import { normalizeSignal } from "../domain/Signals.js"
import { AuditLog } from "../services/AuditLog.js"
import { Backend } from "../services/Backend.js"
import { type ComputerHandle, Computers } from "../services/Computers.js"
import {
  type ExecInput,
  type KillInput,
  type ListFilter,
  type OutputLimit,
  type ProcessHandle,
  type ProcessRef,
  Processes,
  type ProgressReporter,
  type ReadInput,
  type SpawnInput,
  type StdinInput,
  type WaitInput
} from "../services/Processes.js"
import { Settings } from "../services/Settings.js"
import * as Exec from "./processes/Exec.js"
import * as ProcessAudit from "./processes/ProcessAudit.js"
import * as Validate from "./processes/Validate.js"
import { outputFields, stateOf, withoutRunning } from "./processes/Output.js"
import { callBudget, matchOutput, quiet, settle, withProgress } from "./processes/Waiting.js"

/** A process and the computer (incarnation) it belongs to. */
interface Entry {
  readonly process: ProcessHandle
  readonly computer: ComputerHandle
}

export { maxExecStdinBytes } from "./processes/Exec.js"

/** Why a process the kill tool signalled ended. */
const killReason = (signal: string) => `killed with ${signal} (kill tool)`

export const layer = Layer.scoped(
  Processes,
  Effect.gen(function*() {
    const settings = yield* Settings
    const computers = yield* Computers
    const backend = yield* Backend
    const layerScope = yield* Effect.scope
    const audit = ProcessAudit.make(yield* Effect.serviceOption(AuditLog))
    const registry = new Map<string, Entry>()
    const finished: Array<string> = []
    /** Incarnations whose end is watched: a deleted computer's processes leave every listing. */
    const watched = new Set<number>()
    /** The default computer each session was last told of (spawn names it once, not in every result); bounded. */
    const toldComputer = new Map<string, string>()
    const newsOfComputer = (session: string, named: string | undefined, id: string): { computer_id?: string } => {
      if (named !== undefined || toldComputer.get(session) === id) return {}
      toldComputer.delete(session)
      toldComputer.set(session, id)
      if (toldComputer.size > 10_000) toldComputer.delete(toldComputer.keys().next().value!)
      return { computer_id: id }
    }
    let counter = 0

    const onExit = (process: ProcessHandle) =>
      Effect.sync(() => {
        finished.push(process.id)
        while (finished.length > settings.maxFinished) registry.delete(finished.shift()!)
      })

    /** Drops every process of a computer that is gone from this server (deleted, released, shut down). */
    const forget = (computer: ComputerHandle) =>
      Effect.sync(() => {
        watched.delete(computer.incarnation)
        for (const [id, entry] of registry) if (entry.computer.incarnation === computer.incarnation) registry.delete(id)
      })

    const watch = (computer: ComputerHandle) =>
      watched.has(computer.incarnation)
        ? Effect.void
        : Effect.sync(() => watched.add(computer.incarnation)).pipe(
          Effect.zipRight(Effect.forkIn(Effect.zipRight(computer.closed, forget(computer)), layerScope))
        )

    /** A process this session may reach; another session's private computer's processes do not exist for it. */
    const get = (session: string, ref: ProcessRef): Effect.Effect<ProcessHandle, ProcessNotFound | InvalidInput> =>
      Effect.suspend((): Effect.Effect<ProcessHandle, ProcessNotFound | InvalidInput> => {
        const badId = ref.computer_id === undefined ? undefined : computerIdProblem(ref.computer_id)
        if (badId !== undefined) return Effect.fail(new InvalidInput({ message: badId }))
        const entry = registry.get(ref.id)
        if (entry === undefined || !entry.computer.visibleTo(session)) return Effect.fail(new ProcessNotFound({ id: ref.id }))
        if (ref.computer_id !== undefined && ref.computer_id !== entry.computer.id) {
          return Effect.fail(new InvalidInput({ message: `process '${ref.id}' runs on computer '${entry.computer.id}', not '${ref.computer_id}'` }))
        }
        return Effect.succeed(entry.process)
      })

    /** The call's cwd; absent: --workdir, else the computer's home; relative: against that. */
    const resolveCwd = (computer: ComputerHandle, cwd: string | undefined) => {
      const base = settings.workdir ?? computer.home
      return cwd === undefined || cwd === "" ? base : cwd.startsWith("/") ? cwd : `${base}/${cwd}`
    }

    const start = (
      session: string,
      computer: ComputerHandle,
      request: {
        readonly command: string
        readonly argv: ReadonlyArray<string>
        readonly cwd: string | undefined
        readonly env: Readonly<Record<string, string>> | undefined
        readonly tty: { readonly cols: number; readonly rows: number } | undefined
        readonly retainBytes?: number
        readonly outputLimit?: OutputLimit
      }
    ) =>
      Effect.gen(function*() {
        const id = `p${++counter}`
        const cwd = resolveCwd(computer, request.cwd)
        const audited: ProcessAudit.StartedProcess = {
          session,
          computer: computer.id,
          pid: id,
          command: request.command,
          argv: request.argv,
          cwd,
          tty: request.tty !== undefined,
          shell: request.argv.length === 3 && request.argv[0] === settings.shell && request.argv[1] === "-c"
        }
        yield* audit.started(audited)
        const process = yield* computer.spawn({
          id,
          command: request.command,
          spec: {
            argv: request.argv,
            cwd,
            env: processEnvironment({
              home: computer.home,
              shell: settings.shell,
              tty: request.tty !== undefined,
              backend: backend.environment,
              server: settings.env,
              call: request.env
            }),
            tty: request.tty
          },
          headBytes: Math.max(settings.headBytes, request.retainBytes ?? 0),
          tailBytes: Math.max(settings.tailBytes, request.retainBytes ?? 0),
          mailboxCapacity: settings.mailboxCapacity,
          outputLimit: request.outputLimit,
          onExit: (ended) => Effect.zipRight(onExit(ended), audit.ended(ended, session))
        }).pipe(Effect.tapError((error) => audit.failed(audited, error.message)))
        registry.set(id, { process, computer })
        yield* watch(computer)
        return process
      })

    const budgetOf = (maxBytes: number | undefined) => maxBytes ?? settings.inlineBytes

    const spawn = (session: string, input: SpawnInput, progress?: ProgressReporter) =>
      Effect.gen(function*() {
        if (input.command.trim() === "") return yield* new InvalidInput({ message: "command must not be empty" })
        const problem = firstNulProblem([["command", input.command], ["cwd", input.cwd]]) ?? envProblem(input.env)
        if (problem !== undefined) return yield* new InvalidInput({ message: problem })
        yield* Validate.validateTimeout("timeoutMs", input.timeoutMs)
        yield* Validate.validateSize("cols", input.cols)
        yield* Validate.validateSize("rows", input.rows)
        yield* Validate.validateBudget(input.maxBytes)
        const matcher = yield* Validate.matcherOf(input.pattern)
        if (input.tty && !backend.capabilities.pty) {
          return yield* new Unsupported({ backend: backend.name, feature: "terminals (tty: true)" })
        }
        const computer = yield* computers.resolve(session, input)
        const process = yield* start(session, computer, {
          command: input.command,
          argv: [settings.shell, "-c", input.command],
          cwd: input.cwd,
          env: input.env,
          tty: input.tty ? { cols: input.cols ?? settings.cols, rows: input.rows ?? settings.rows } : undefined
        })
        let match: string | undefined
        let note: string | undefined
        if (!input.background) {
          const budget = callBudget(settings, input.timeoutMs ?? settings.spawnTimeoutMs, progress)
          note = budget.note
          const exited = Effect.asVoid(process.exited)
          // Without a pattern, nothing to race: a race forks two fibers, which costs more than `true` takes.
          const done = matcher === undefined
            ? exited
            : Effect.raceFirst(
              exited,
              Effect.map(matchOutput(process, matcher, { stdout: 0, stderr: 0 }), (found) => {
                match = found
              })
            )
          // Times out the wait, never the process: on timeout the process keeps running.
          yield* withProgress(
            done.pipe(Effect.timeoutOption(Duration.millis(budget.ms))),
            progress,
            (ms) => `process ${process.id} running for ${Math.round(ms / 1000)} s`
          )
        }
        const info = yield* process.info
        const output = yield* outputFields(process, { stdoutCursor: 0, stderrCursor: 0, budget: budgetOf(input.maxBytes) })
        const notes = [
          note === undefined || info.status !== "running" || match !== undefined ? undefined : note,
          yield* computer.warning
        ].filter((n): n is string => n !== undefined)
        return {
          ...stateOf(info),
          ...withoutRunning(output),
          ...newsOfComputer(session, input.computer_id, computer.id),
          ...(match === undefined ? {} : { match }),
          ...(notes.length === 0 ? {} : { note: notes.join("; ") })
        }
      })

    const exec = (session: string, input: ExecInput, progress?: ProgressReporter) =>
      Effect.gen(function*() {
        const checked = yield* Exec.plan(settings, input)
        const began = yield* Clock.currentTimeMillis
        const computer = yield* computers.resolve(session, input)
        const process = yield* start(session, computer, {
          command: checked.command ?? checked.argv!.join(" "),
          argv: checked.argv ?? [settings.shell, "-c", checked.command!],
          cwd: checked.cwd,
          env: input.env,
          tty: undefined,
          retainBytes: Math.ceil(settings.outputLimit / 2),
          outputLimit: Exec.outputLimit(settings)
        })
        const result = yield* Exec.run(settings, process, checked, {
          computer_id: computer.id,
          temporary: computer.temporary,
          began
        }, progress, layerScope)
        const warning = yield* computer.warning
        return warning === undefined ? result : { ...result, note: result.note === undefined ? warning : `${result.note}; ${warning}` }
      })

    const list = (session: string, filter: ListFilter = {}) =>
      Effect.gen(function*() {
        const computerId = filter.computer_id
        const badId = computerId === undefined ? undefined : computerIdProblem(computerId)
        if (badId !== undefined) return yield* new InvalidInput({ message: badId })
        if (filter.limit !== undefined && !(Number.isInteger(filter.limit) && filter.limit >= 1)) {
          return yield* new InvalidInput({ message: "limit must be an integer >= 1" })
        }
        const visible = [...registry.values()].filter((entry) =>
          entry.computer.visibleTo(session) && (computerId === undefined || entry.computer.id === computerId)
        )
        const infos = yield* Effect.forEach(visible, (entry) => entry.process.info)
        const status = filter.status ?? (filter.limit === undefined ? "default" : "all")
        const running = infos.filter((info) => info.status === "running")
        // Newest finished first.
        const done = infos.filter((info) => info.status !== "running").reverse()
        let shown: Array<ProcessInfo>
        if (status === "running") shown = running
        else if (status === "terminated") shown = done
        else if (status === "all") shown = [...running, ...done]
        else shown = [...running, ...done.slice(0, settings.psFinished)]
        const limited = filter.limit === undefined ? shown : shown.slice(0, filter.limit)
        const candidates = status === "running" ? running.length : status === "terminated" ? done.length : infos.length
        const hidden = candidates - limited.length
        return { processes: limited, ...(hidden > 0 ? { hidden } : {}) }
      })

    const stdin = (session: string, input: StdinInput) =>
      Effect.gen(function*() {
        if (!backend.capabilities.stdin) {
          return yield* new Unsupported({ backend: backend.name, feature: "input to a running process (stdin)" })
        }
        const process = yield* get(session, input)
        const parsed = parseStdinEscapes(input.input)
        if (Either.isLeft(parsed)) return yield* new InvalidInput({ message: parsed.left })
        const bytes = parsed.right
        if (bytes.length === 0 && !input.eof) {
          return yield* new InvalidInput({ message: "input is empty and eof is not set: nothing to send" })
        }
        yield* Validate.validateTimeout("yieldMs", input.yieldMs)
        yield* Validate.validateBudget(input.maxBytes)
        const cursors = yield* process.totals
        const since = yield* Clock.currentTimeMillis
        if (bytes.length > 0) yield* process.write(bytes)
        if (input.eof) yield* process.closeStdin
        yield* settle(process, since, Math.min(input.yieldMs ?? settings.stdinYieldMs, settings.maxCallMs))
        const info = yield* process.info
        const output = yield* outputFields(process, {
          stdoutCursor: cursors.stdout,
          stderrCursor: cursors.stderr,
          budget: budgetOf(input.maxBytes)
        })
        return { ...stateOf(info), bytes: bytes.length, ...(input.eof ? { eof: true as const } : {}), ...withoutRunning(output) }
      })

    const read = (session: string, input: ReadInput) =>
      Effect.gen(function*() {
        const process = yield* get(session, input)
        yield* Validate.validateBudget(input.maxBytes)
        const info = yield* process.info
        const output = yield* outputFields(process, {
          stdoutCursor: input.stdoutCursor,
          stderrCursor: input.stderrCursor,
          lines: input.lines ?? 100,
          budget: budgetOf(input.maxBytes),
          scrollback: input.scrollback
        })
        return { ...stateOf(info), ...withoutRunning(output) }
      })

    const kill = (session: string, input: KillInput) =>
      Effect.gen(function*() {
        const process = yield* get(session, input)
        const name = normalizeSignal(input.signal ?? "SIGTERM")
        if (Either.isLeft(name)) return yield* new InvalidInput({ message: name.left })
        if (!backend.capabilities.signals && name.right !== "SIGTERM" && name.right !== "SIGKILL") {
          return yield* new Unsupported({ backend: backend.name, feature: `${name.right} (only ending a process: SIGTERM or SIGKILL)` })
        }
        const status = yield* process.status
        if (status !== "running") return yield* new ProcessExited({ id: input.id, status })
        yield* process.signal(name.right, killReason(name.right))
        // Report what happened: most processes end within moments of the signal.
        yield* process.exited.pipe(Effect.timeout(Duration.seconds(2)), Effect.ignore)
        const info = yield* process.info
        const { reason, ...state } = stateOf(info)
        return {
          ...state,
          // Ended by this very signal: the reason would only repeat it.
          ...(reason === undefined || reason === killReason(name.right) ? {} : { reason }),
          sent: name.right,
          ...(info.descendantsKilled === undefined ? {} : { descendantsKilled: info.descendantsKilled }),
          message: info.status === "running"
            ? `Process ${input.id} was sent ${name.right} and is still running (kill with SIGKILL to force it)`
            : `Process ${input.id} killed successfully`
        }
      })

    const wait = (session: string, input: WaitInput, progress?: ProgressReporter) =>
      Effect.gen(function*() {
        const process = yield* get(session, input)
        const matcher = yield* Validate.matcherOf(input.pattern)
        if (input.quietMs !== undefined && !(input.quietMs > 0)) {
          return yield* new InvalidInput({ message: "quietMs must be a number > 0" })
        }
        yield* Validate.validateTimeout("timeoutMs", input.timeoutMs)
        yield* Validate.validateBudget(input.maxBytes)
        const began = yield* Clock.currentTimeMillis
        const cursors = yield* process.totals
        const budget = callBudget(settings, input.timeoutMs ?? 30_000, progress)
        type Outcome = { readonly reason: "exited" | "matched" | "quiet" | "timeout"; readonly match?: string }
        const conditions: Array<Effect.Effect<Outcome>> = [Effect.as(process.exited, { reason: "exited" as const })]
        if (matcher) {
          conditions.unshift(Effect.map(matchOutput(process, matcher, cursors), (match) => ({ reason: "matched" as const, match })))
        }
        if (input.quietMs !== undefined) conditions.push(Effect.as(quiet(process, input.quietMs), { reason: "quiet" as const }))
        const outcome: Outcome = yield* withProgress(
          Effect.raceAll(conditions).pipe(
            Effect.timeoutTo({ duration: Duration.millis(budget.ms), onSuccess: (o) => o, onTimeout: () => ({ reason: "timeout" as const }) })
          ),
          progress,
          (ms) => `waiting on ${input.id} for ${Math.round(ms / 1000)} s`
        )
        const info = yield* process.info
        const output = yield* outputFields(process, {
          stdoutCursor: cursors.stdout,
          stderrCursor: cursors.stderr,
          budget: budgetOf(input.maxBytes)
        })
        const now = yield* Clock.currentTimeMillis
        return {
          ...stateOf(info),
          outcome: outcome.reason,
          ...(outcome.match !== undefined ? { match: outcome.match } : {}),
          waitedMs: now - began,
          ...withoutRunning(output),
          ...(outcome.reason === "timeout" && budget.note !== undefined ? { note: budget.note } : {})
        }
      })

    return Processes.of({ spawn, exec, list, stdin, read, kill, wait })
  })
)

