/**
 * Kilntainers' `sandbox_exec`: run to completion with a hard timeout (the whole tree killed, exit
 * 124, the partial output kept) and an output limit (`--output-limit`: past it the whole tree is
 * killed, exit 1, head and tail kept), the output within the inline budget with exact markers, and
 * the handle to read the rest or to wait for a command that outlives the call.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { signalNumber } from "../../domain/Signals.js"
import type { ExitInfo } from "../../services/Backend.js"
import type { ExecInput } from "../../services/ProcessInputs.js"
import type { ExecResult, OutputLimit, ProcessHandle, ProgressReporter } from "../../services/Processes.js"
import type { SettingsShape } from "../../services/Settings.js"
import { type Cursors, outputFields } from "./Output.js"
import { callBudget, withProgress } from "./Waiting.js"

export const exitCodeOf = (exit: ExitInfo): number =>
  exit.exitCode ?? (exit.signal !== null ? 128 + (signalNumber(exit.signal) ?? 9) : 1)

/** The checked parts of an exec call. */
export interface ExecPlan {
  readonly argv?: ReadonlyArray<string> | undefined
  readonly command?: string | undefined
  readonly cwd: string | undefined
  readonly timeoutSec: number
  readonly stdin: Uint8Array | undefined
}

/** An exec call as it runs: command or argv (the decoded input has exactly one), the directory, the timeout. */
export const plan = (settings: SettingsShape, input: ExecInput): ExecPlan => ({
  argv: input.args !== undefined && input.args.length > 0 ? input.args : undefined,
  command: input.command === "" ? undefined : input.command,
  cwd: input.working_directory === "" ? undefined : input.working_directory,
  timeoutSec: input.timeout ?? settings.timeout,
  stdin: input.stdin
})

/** `line` after `text`, on a line of its own (kilntainers' notes in stderr). */
export const appendLine = (text: string, line: string) => `${text}${text === "" || text.endsWith("\n") ? "" : "\n"}${line}`

/** Kilntainers' exit code for a command whose output passed the limit. */
export const outputLimitExitCode = 1

/**
 * `--output-limit` as its process enforces it (ProcessActor): past it, stdout and stderr together,
 * the command's whole tree is killed at the chunk that crossed it, and `ps` says why.
 */
export const outputLimit = (settings: SettingsShape): OutputLimit => ({
  bytes: settings.outputLimit,
  reason: `output limit exceeded (${settings.outputLimit} bytes, sandbox_exec)`
})

/** What a command's result says of where it ran, and who hears how far it showed the output (kill shows the rest). */
export interface ExecMeta {
  readonly computer_id: string
  readonly temporary: boolean
  readonly began: number
  readonly shown?: ((cursors: Cursors) => void) | undefined
}

/**
 * Feeds stdin, waits for the exit (bounded by the timeout, and by the call budget when the client
 * does not listen to progress), kills the whole tree at the timeout, and builds the result.
 */
export const run = (
  settings: SettingsShape,
  process: ProcessHandle,
  exec: ExecPlan,
  meta: ExecMeta,
  progress: ProgressReporter | undefined,
  /** Where the timeout of a command that outlives the call keeps running. */
  scope: Scope.Scope
): Effect.Effect<ExecResult> =>
  Effect.gen(function*() {
    if (exec.stdin) yield* process.write(exec.stdin).pipe(Effect.ignore)
    yield* process.closeStdin.pipe(Effect.ignore)
    const timeoutMs = exec.timeoutSec * 1000
    const budget = callBudget(settings, timeoutMs, progress)
    const exited = yield* withProgress(
      process.exited.pipe(Effect.timeoutOption(Duration.millis(budget.ms))),
      progress,
      (ms) => `command running for ${Math.round(ms / 1000)} s of ${exec.timeoutSec} s`
    )
    let timedOut = false
    let exitCode: number | null
    if (Option.isSome(exited)) {
      exitCode = exitCodeOf(exited.value)
    } else if (budget.ms >= timeoutMs) {
      timedOut = true
      yield* process.signal("SIGKILL", timeoutReason(exec.timeoutSec)).pipe(Effect.ignore)
      yield* process.exited.pipe(Effect.timeout(Duration.seconds(5)), Effect.ignore)
      exitCode = 124
    } else {
      // The call returns before the command's timeout; the command keeps it (killed then).
      exitCode = null
      const left = timeoutMs - budget.ms
      yield* process.exited.pipe(
        Effect.timeoutOption(Duration.millis(left)),
        Effect.flatMap((done) =>
          Option.isSome(done) ? Effect.void : process.signal("SIGKILL", timeoutReason(exec.timeoutSec))
        ),
        Effect.ignore,
        Effect.forkIn(scope)
      )
    }
    return yield* finish(settings, process, exec, meta, { exitCode, timedOut, budget })
  })

/** Why a command's process tree was killed at its timeout (what `ps` and a task's result read back). */
export const timeoutReason = (timeoutSec: number) => `timed out after ${timeoutSec} s (sandbox_exec)`

/**
 * The result of a command once its wait is over: its output within the budgets, its exit code (null
 * while it runs), and the notes that explain a cut, a limit or a timeout. A task answered by a
 * replica builds it here too, from the process the computer holds (HeldTasks).
 */
export const finish = (
  settings: SettingsShape,
  process: ProcessHandle,
  exec: Pick<ExecPlan, "timeoutSec">,
  meta: ExecMeta & { readonly end?: number },
  outcome: { exitCode: number | null; readonly timedOut: boolean; readonly budget: { readonly ms: number; readonly note?: string } }
): Effect.Effect<ExecResult> =>
  Effect.gen(function*() {
    const limit = settings.outputLimit
    const { budget, timedOut } = outcome
    let exitCode = outcome.exitCode
    // No result carries more of the command's bytes than the output limit, nor than the inline budget.
    const output = yield* outputFields(process, { stdoutCursor: 0, stderrCursor: 0, budget: Math.min(settings.inlineBytes, limit) })
    meta.shown?.(output.shown)
    const totals = yield* process.totals
    const end = meta.end ?? (yield* Clock.currentTimeMillis)
    const exceeded = exitCode !== null && totals.stdout + totals.stderr > limit
    if (exceeded) exitCode = outputLimitExitCode
    const cut = output.omitted !== undefined
    let stderr = output.stderr
    if (exceeded) {
      const ending = (yield* process.info).reason === outputLimit(settings).reason
        ? "the command was stopped and its process tree killed"
        : "the command ended before it could be stopped"
      stderr = appendLine(stderr, `[kilntainers: output limit exceeded (${limit} bytes): ${totals.stdout} bytes of stdout and ${totals.stderr} bytes of stderr; ${ending}. Head and tail are above; read the rest with stdout(pid ${process.id}, stdoutCursor/stderrCursor), or re-run with head, tail or grep.]`)
    } else if (cut) {
      stderr = appendLine(stderr, `[kilntainers: output was ${totals.stdout} bytes of stdout and ${totals.stderr} bytes of stderr; the middle was cut, head and tail kept. Read the rest with stdout(pid ${process.id}, stdoutCursor/stderrCursor), or re-run with head, tail or grep.]`)
    }
    if (timedOut && !exceeded) {
      stderr = appendLine(stderr, `[kilntainers: command timed out after ${exec.timeoutSec}s; its process tree was killed; the output above is what it wrote before that]`)
    }
    return {
      stdout: output.stdout,
      stderr,
      exit_code: exitCode,
      exec_duration_ms: end - meta.began,
      computer_id: meta.computer_id,
      temporary: meta.temporary,
      ...(timedOut && !exceeded ? { timed_out: true as const } : {}),
      ...(exceeded ? { output_limit_exceeded: true as const } : {}),
      ...(cut ? { truncated: true as const, stdout_bytes: totals.stdout, stderr_bytes: totals.stderr } : {}),
      ...(cut || exitCode === null ? { pid: process.id } : {}),
      ...(exitCode === null ? { running: true as const } : {}),
      ...(cut || exitCode === null ? { next: output.next } : {}),
      ...(budget.note === undefined || exitCode !== null ? {} : {
        note: `still running after ${budget.ms} ms (the call returns before the client's request timeout); it will be killed at its ${exec.timeoutSec} s timeout. Use wait(pid ${process.id}) for its exit and output.`
      })
    } satisfies ExecResult
  })
