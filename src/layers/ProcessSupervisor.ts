/**
 * The Processes service: each call of a tool, on decoded input. The parts own the rest: which
 * processes exist and who may reach them (`processes/ProcessTable`; those other servers started,
 * `processes/Adoption`), how one starts
 * (`processes/Launch`: cwd, environment, audit), how a call waits (`processes/Waiting`), what a
 * result carries (`processes/Output`, `Listing`, `Exec` for sandbox_exec) and which computer a
 * session was told of (`processes/ComputerNews`). Results follow one design for agents (see README
 * "Tool results"): compact, nothing empty, output within one inline budget.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { AccessDenied, InvalidInput, ProcessExited, Unsupported } from "../domain/Errors.js"
import { AuditLog } from "../services/AuditLog.js"
import { Backend } from "../services/Backend.js"
import { Computers } from "../services/Computers.js"
import type { ExecInput, KillInput, ListFilter, ProcessRef, ReadInput, SpawnInput, StdinInput, WaitInput } from "../services/ProcessInputs.js"
import { type ProcessHandle, Processes, type ProgressReporter } from "../services/Processes.js"
import { noteSubject } from "../services/Progress.js"
import { Settings } from "../services/Settings.js"
import { holdNote, TerminalHolds } from "../services/Terminals.js"
import * as Adoption from "./processes/Adoption.js"
import * as ComputerNews from "./processes/ComputerNews.js"
import * as EgressRefusals from "./processes/EgressRefusals.js"
import * as Exec from "./processes/Exec.js"
import * as Launch from "./processes/Launch.js"
import { listing } from "./processes/Listing.js"
import * as ProcessAudit from "./processes/ProcessAudit.js"
import * as ProcessTable from "./processes/ProcessTable.js"
import { KILL_OUTPUT_BYTES, outputFields, shownCursors, stateOf } from "./processes/Output.js"
import {
  callBudget,
  matchOutput,
  patternNotSeen,
  quiet,
  screenSettled,
  settle,
  TTY_YIELD_MS,
  withProgress
} from "./processes/Waiting.js"

/** Why a process the kill tool signalled ended. */
const killReason = (signal: string) => `killed with ${signal} (kill tool)`

/** A result's `note`: what there is to say of the call, if anything. */
const notesOf = (notes: ReadonlyArray<string | undefined>) => {
  const said = notes.filter((note): note is string => note !== undefined)
  return said.length === 0 ? {} : { note: said.join("; ") }
}

export const layer = Layer.scoped(
  Processes,
  Effect.gen(function*() {
    const settings = yield* Settings
    const computers = yield* Computers
    const backend = yield* Backend
    const layerScope = yield* Effect.scope
    const table = yield* ProcessTable.make(settings.maxFinished)
    const news = ComputerNews.make()
    const auditLog = yield* Effect.serviceOption(AuditLog)
    const refused = EgressRefusals.make(auditLog)
    const audit = ProcessAudit.make(auditLog)
    const start = Launch.make({ settings, environment: backend.environment, audit, table })
    // Processes another server started, on computers that hold theirs: followed on demand.
    const adoption = Adoption.make({
      enabled: backend.capabilities.heldProcesses,
      computers,
      table,
      audit,
      mailboxCapacity: settings.mailboxCapacity
    })
    const get = adoption.get
    // A person who took over a terminal drives it alone (services/Terminals).
    const holds = yield* Effect.serviceOption(TerminalHolds)
    const heldBy = (process: ProcessHandle) =>
      !process.tty || holds._tag === "None" ? Effect.succeed(undefined) : holds.value.current(process.id)
    const heldNote = (process: ProcessHandle) =>
      Effect.flatMap(heldBy(process), (hold) =>
        hold === undefined ? Effect.succeed(undefined) : Effect.map(Clock.currentTimeMillis, (now) => holdNote(hold, now)))

    const budgetOf = (maxBytes: number | undefined) => maxBytes ?? settings.inlineBytes
    const shown = shownCursors()
    const yieldOf = (process: ProcessHandle, yieldMs: number | undefined) =>
      Math.min(yieldMs ?? (process.tty ? Math.max(settings.stdinYieldMs, TTY_YIELD_MS) : settings.stdinYieldMs), settings.maxCallMs)
    /** spawn's `input`, typed now: what kept it from the process, if anything. */
    const typeInto = (process: ProcessHandle, bytes: Uint8Array) =>
      process.write(bytes).pipe(
        Effect.as(undefined),
        Effect.catchAll((error) => Effect.succeed(`input not written: ${error.message}`))
      )

    const spawn = (session: string, input: SpawnInput, progress?: ProgressReporter) =>
      Effect.gen(function*() {
        const matcher = input.pattern
        if (input.tty && !backend.capabilities.pty) {
          return yield* new Unsupported({ backend: backend.name, feature: "terminals (tty: true)" })
        }
        if (input.input !== undefined && !backend.capabilities.stdin) {
          return yield* new Unsupported({ backend: backend.name, feature: "input to a running process (spawn's input)" })
        }
        const computer = yield* computers.resolve(session, input)
        const began = yield* Clock.currentTimeMillis
        const process = yield* start(session, computer, {
          command: input.command,
          argv: [settings.shell, "-c", input.command],
          cwd: input.cwd,
          env: input.env,
          tty: input.tty ? { cols: input.cols ?? settings.cols, rows: input.rows ?? settings.rows } : undefined
        })
        let match: string | undefined
        let note: string | undefined
        let budgetMs = 0
        // Typed at start, unless it waits for a pattern: then once it matched and the screen settled.
        const typeAfterMatch = input.input !== undefined && matcher !== undefined && !input.background
        let inputProblem: string | undefined = input.input === undefined || typeAfterMatch ? undefined : yield* typeInto(process, input.input)
        if (!input.background) {
          const budget = callBudget(settings, input.timeoutMs ?? settings.spawnTimeoutMs, progress)
          note = budget.note
          budgetMs = budget.ms
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
          yield* screenSettled(process, budget.ms - ((yield* Clock.currentTimeMillis) - began))
          if (typeAfterMatch) {
            if (match === undefined) inputProblem = "input not written: the pattern was not seen"
            else {
              const since = yield* Clock.currentTimeMillis
              inputProblem = yield* typeInto(process, input.input!)
              const left = budget.ms - (since - began)
              if (inputProblem === undefined && left > 0) yield* settle(process, since, Math.min(yieldOf(process, undefined), left))
            }
          }
        }
        const info = yield* process.info
        const output = yield* outputFields(process, { stdoutCursor: 0, stderrCursor: 0, budget: budgetOf(input.maxBytes) })
        // Still running and no match: the wait ran out (what it was capped at, and a pattern not seen).
        const unmatched = info.status === "running" && match === undefined
        return {
          ...stateOf(info),
          ...shown.note(process, output),
          ...(yield* news(session, input.computer_id, computer.id)),
          ...(match === undefined ? {} : { match }),
          ...EgressRefusals.field(yield* refused(computer.id, began)),
          ...notesOf([
            unmatched ? note : undefined,
            unmatched && matcher !== undefined && !input.background ? patternNotSeen(process.id, budgetMs, input.tty === true) : undefined,
            inputProblem,
            yield* computer.warning
          ])
        }
      })

    const exec = (session: string, input: ExecInput, progress?: ProgressReporter) =>
      Effect.gen(function*() {
        const checked = Exec.plan(settings, input)
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
          began,
          shown: (cursors) => shown.mark(process, cursors)
        }, progress, layerScope)
        const refusals = yield* refused(computer.id, began)
        const refusedLine = EgressRefusals.stderrLine(refusals)
        const warning = yield* computer.warning
        return {
          ...result,
          ...(refusedLine === undefined ? {} : { stderr: Exec.appendLine(result.stderr, refusedLine) }),
          ...EgressRefusals.field(refusals),
          ...(warning === undefined ? {} : { note: result.note === undefined ? warning : `${result.note}; ${warning}` })
        }
      })

    const list = (session: string, filter: ListFilter = {}) =>
      Effect.gen(function*() {
        yield* adoption.catchUp(session, filter.computer_id)
        const visible = yield* table.visible(session, filter.computer_id)
        return listing(yield* Effect.forEach(visible, (process) => process.info), filter, settings.psFinished)
      })

    const stdin = (session: string, input: StdinInput) =>
      Effect.gen(function*() {
        if (!backend.capabilities.stdin) {
          return yield* new Unsupported({ backend: backend.name, feature: "input to a running process (stdin)" })
        }
        const process = yield* get(session, input)
        const hold = yield* heldBy(process)
        if (hold !== undefined) {
          const now = yield* Clock.currentTimeMillis
          return yield* new AccessDenied({ what: `stdin of process '${process.id}'`, why: holdNote(hold, now) })
        }
        const bytes = input.input ?? new Uint8Array(0)
        const cursors = yield* process.totals
        const since = yield* Clock.currentTimeMillis
        if (bytes.length > 0) yield* process.write(bytes)
        if (input.eof) yield* process.closeStdin
        // A terminal's answer takes longer to settle (TTY_SETTLE_MS): its default wait is longer too.
        yield* settle(process, since, yieldOf(process, input.yieldMs))
        const info = yield* process.info
        const output = yield* outputFields(process, {
          stdoutCursor: cursors.stdout,
          stderrCursor: cursors.stderr,
          budget: budgetOf(input.maxBytes)
        })
        return { ...stateOf(info), bytes: bytes.length, ...(input.eof ? { eof: true as const } : {}), ...shown.note(process, output) }
      })

    const read = (session: string, input: ReadInput) =>
      Effect.gen(function*() {
        const process = yield* get(session, input)
        const info = yield* process.info
        const output = yield* outputFields(process, {
          stdoutCursor: input.stdoutCursor,
          stderrCursor: input.stderrCursor,
          lines: input.lines ?? 100,
          budget: budgetOf(input.maxBytes),
          scrollback: input.scrollback,
          exact: true
        })
        // What it was refused since it started: a read is how an agent looks back at a process.
        return {
          ...stateOf(info),
          ...shown.note(process, output),
          ...EgressRefusals.field(yield* refused(info.computer_id, Date.parse(info.createdAt))),
          ...notesOf([yield* heldNote(process)])
        }
      })

    const kill = (session: string, input: KillInput) =>
      Effect.gen(function*() {
        const process = yield* get(session, input)
        const name = input.signal ?? "SIGTERM"
        if (!backend.capabilities.signals && name !== "SIGTERM" && name !== "SIGKILL") {
          return yield* new Unsupported({ backend: backend.name, feature: `${name} (only ending a process: SIGTERM or SIGKILL)` })
        }
        const status = yield* process.status
        if (status !== "running") return yield* new ProcessExited({ id: input.id, status })
        yield* process.signal(name, killReason(name))
        // Report what happened: most processes end within moments of the signal.
        yield* process.exited.pipe(Effect.timeout(Duration.seconds(2)), Effect.ignore)
        const info = yield* process.info
        const { reason, ...state } = stateOf(info)
        // What it wrote that no result showed (a server's last log lines), its end within a small budget.
        const from = shown.from(process)
        const { next, omitted, screen: _screen, ...unseen } = process.tty
          ? { stdout: "", stderr: "" }
          : shown.note(process, yield* outputFields(process, { stdoutCursor: from.stdout, stderrCursor: from.stderr, budget: KILL_OUTPUT_BYTES }))
        return {
          ...state,
          ...(unseen.stdout === "" ? {} : { stdout: unseen.stdout }),
          ...(unseen.stderr === "" ? {} : { stderr: unseen.stderr }),
          ...(omitted === undefined ? {} : { omitted, ...(next === undefined ? {} : { next }) }),
          // Ended by this very signal: the reason would only repeat it.
          ...(reason === undefined || reason === killReason(name) ? {} : { reason }),
          sent: name,
          ...(info.descendantsKilled === undefined ? {} : { descendantsKilled: info.descendantsKilled }),
          message: info.status === "running"
            ? `Process ${input.id} was sent ${name} and is still running (kill with SIGKILL to force it)`
            : `Process ${input.id} killed successfully`
        }
      })

    const wait = (session: string, input: WaitInput, progress?: ProgressReporter) =>
      Effect.gen(function*() {
        const process = yield* get(session, input)
        const matcher = input.pattern
        const began = yield* Clock.currentTimeMillis
        const cursors = yield* process.totals
        yield* noteSubject(process.computerId, process.id, cursors)
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
        if (outcome.reason === "matched") yield* screenSettled(process, budget.ms - ((yield* Clock.currentTimeMillis) - began))
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
          ...shown.note(process, output),
          ...EgressRefusals.field(yield* refused(info.computer_id, began)),
          ...notesOf([
            outcome.reason === "timeout" ? budget.note : undefined,
            outcome.reason === "timeout" && matcher ? patternNotSeen(process.id, now - began, info.tty) : undefined,
            yield* heldNote(process)
          ])
        }
      })

    const terminal = (session: string, ref: ProcessRef) =>
      Effect.flatMap(get(session, ref), (process) =>
        process.tty
          ? Effect.succeed(process)
          : Effect.fail(new InvalidInput({ message: `process '${process.id}' has no terminal (spawn it with tty=true)` })))

    return Processes.of({ spawn, exec, list, stdin, read, kill, wait, terminal, handle: get })
  })
)

