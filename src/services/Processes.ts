import * as Effect from "effect/Effect"
import type * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import * as Context from "effect/Context"
import type { MailboxFull, ProcessError, ProcessExited, ProviderError, StdinClosed, Unsupported } from "../domain/Errors.js"
import type { OutputView, ProcessInfo, ProcessStatus, ReadOptions } from "../domain/Process.js"
import type { ExitInfo } from "./Backend.js"
import { decodeInput, ExecInput, type ProcessRef, KillInput, ListFilter, ReadInput, SpawnInput, StdinInput, WaitInput } from "./ProcessInputs.js"

/** Live output as subscribers see it. */
export type LiveOutput =
  | { readonly _tag: "Stdout"; readonly data: Uint8Array }
  | { readonly _tag: "Stderr"; readonly data: Uint8Array }
  | { readonly _tag: "Exit"; readonly exit: ExitInfo }

export type ProcessCommandError = ProcessExited | StdinClosed | ProviderError | Unsupported | MailboxFull

/** A bound on a process's output: past `bytes` of stdout and stderr together it is killed, for `reason`. */
export interface OutputLimit {
  readonly bytes: number
  readonly reason: string
}

/** One process as the services use it (implemented by the kernel's ProcessActor). */
export interface ProcessHandle {
  readonly id: string
  readonly computerId: string
  readonly tty: boolean
  readonly info: Effect.Effect<ProcessInfo>
  readonly status: Effect.Effect<ProcessStatus>
  /** Waits for the process to exit. */
  readonly exited: Effect.Effect<ExitInfo>
  /** Completes when the process has exited and every holder of its output has closed it. */
  readonly closed: Effect.Effect<void>
  readonly write: (data: Uint8Array) => Effect.Effect<void, ProcessCommandError>
  readonly closeStdin: Effect.Effect<void, ProcessCommandError>
  readonly signal: (signal: string, reason?: string) => Effect.Effect<void, ProcessCommandError>
  readonly resize: (cols: number, rows: number) => Effect.Effect<void, ProcessCommandError>
  readonly read: (options: ReadOptions) => Effect.Effect<OutputView>
  /** Live output from now on; the subscription ends with the Scope. */
  readonly subscribe: Effect.Effect<Queue.Dequeue<LiveOutput>, never, Scope.Scope>
  /** Clock millis of the latest output (or of the start). */
  readonly lastActivity: Effect.Effect<number>
  /** Bytes each stream has produced so far. */
  readonly totals: Effect.Effect<{ readonly stdout: number; readonly stderr: number }>
  /** Records why the process is ending (computer closed, server shutdown) before it is stopped. */
  readonly noteReason: (reason: string) => Effect.Effect<void>
  /**
   * Explains, after the fact, an end that had no better reason (it was killed, or its output just
   * stopped): the computer turned out lost moments later.
   */
  readonly explainEnd: (reason: string) => Effect.Effect<void>
}

/** Progress of a long call, for MCP progress notifications. */
export type ProgressReporter = (progress: { readonly progress: number; readonly total?: number; readonly message: string }) => Effect.Effect<void>

/** The rendered terminal of a TTY process, beyond its text (which a result carries as `stdout`). */
export interface ScreenFields {
  readonly cursor: { readonly x: number; readonly y: number }
  readonly cols: number
  readonly rows: number
  readonly alternateScreen?: true | undefined
  readonly scrollback?: string | undefined
}

/**
 * Output as an agent gets it: strings (bytes left out shown by an exact `[… N bytes omitted …]`
 * marker), and the rest only where it is useful.
 */
export interface OutputFields {
  /** stdout since the cursor (or the last lines); a TTY's rendered screen. */
  readonly stdout: string
  readonly stderr: string
  /** Cursors for the next read (stdoutCursor / stderrCursor): present while it runs or when output was cut. */
  readonly next?: { readonly stdout: number; readonly stderr: number } | undefined
  /** Bytes left out of this result, per stream: present only when something was cut. */
  readonly omitted?: { readonly stdout?: number | undefined; readonly stderr?: number | undefined } | undefined
  readonly screen?: ScreenFields | undefined
}

/** How a process stands: process-mcp's status, and how it ended. */
export interface ProcessState {
  readonly pid: string
  readonly status: ProcessStatus
  readonly exitCode?: number | undefined
  readonly signal?: string | undefined
  readonly reason?: string | undefined
}

/** An egress request of the process's computer that the allowlist refused during the call. */
export interface EgressRefusal {
  readonly host: string
  readonly port: number
  /** Why, and what would allow it (`--allow-host …`). */
  readonly reason: string
}

/** The refusals a call met, when there were any (the proxy knows computers, not processes). */
export interface Refusals {
  readonly egress_refused?: ReadonlyArray<EgressRefusal> | undefined
}

export interface SpawnResult extends ProcessState, OutputFields, Refusals {
  /** The computer, when the call did not name it and this session has not been told yet (its default). */
  readonly computer_id?: string | undefined
  /** What the ready pattern matched. */
  readonly match?: string | undefined
  /** Something the agent should know about this call (a capped wait, a computer ending soon). */
  readonly note?: string | undefined
}

/** Kilntainers' sandbox_exec result, plus what only matters when it applies. */
export interface ExecResult extends Refusals {
  readonly stdout: string
  readonly stderr: string
  /** null while it still runs (the call returned before its timeout: see `pid`). */
  readonly exit_code: number | null
  readonly exec_duration_ms: number
  readonly computer_id: string
  readonly temporary: boolean
  readonly timed_out?: true | undefined
  /** Its stdout and stderr together passed `--output-limit`: it was stopped (exit code 1). */
  readonly output_limit_exceeded?: true | undefined
  readonly truncated?: true | undefined
  readonly stdout_bytes?: number | undefined
  readonly stderr_bytes?: number | undefined
  /** The process handle: to read the rest of cut output (stdout with cursors), or to wait for a command still running. */
  readonly pid?: string | undefined
  readonly running?: true | undefined
  readonly next?: { readonly stdout: number; readonly stderr: number } | undefined
  readonly note?: string | undefined
}

export interface WaitResult extends ProcessState, OutputFields, Refusals {
  /** Why the wait ended. */
  readonly outcome: "exited" | "matched" | "quiet" | "timeout"
  readonly match?: string | undefined
  readonly waitedMs: number
  readonly note?: string | undefined
}

export interface KillResult extends ProcessState {
  /** The signal sent. */
  readonly sent: string
  readonly descendantsKilled?: number | undefined
  readonly message: string
  /** Output (pipes) no earlier result showed, within a small budget: a server's final log lines. */
  readonly stdout?: string | undefined
  readonly stderr?: string | undefined
  readonly omitted?: OutputFields["omitted"]
  readonly next?: OutputFields["next"]
}

export interface StdinResult extends ProcessState, OutputFields {
  /** Bytes written. */
  readonly bytes: number
  readonly eof?: true | undefined
}

export interface ReadResult extends ProcessState, OutputFields, Refusals {
  /** A person holds this terminal (services/Terminals). */
  readonly note?: string | undefined
}

export interface ListResult {
  readonly processes: ReadonlyArray<ProcessInfo>
  /** Finished processes not shown (ask with status or limit to see them). */
  readonly hidden?: number | undefined
}

/**
 * Processes of every computer: start, list, talk to, read, signal and wait for them. Every method
 * takes the calling session and enforces what it may see: another session's private computer and
 * its processes do not exist for it. Inputs arrive decoded (`ProcessInputs.ts`: the boundary decodes
 * them once); the service checks only what depends on the moment (the process, the backend).
 */
export class Processes extends Context.Tag("kilntainers/services/Processes")<Processes, {
  readonly spawn: (session: string, input: SpawnInput, progress?: ProgressReporter) => Effect.Effect<SpawnResult, ProcessError>
  readonly exec: (session: string, input: ExecInput, progress?: ProgressReporter) => Effect.Effect<ExecResult, ProcessError>
  readonly list: (session: string, filter?: ListFilter) => Effect.Effect<ListResult, ProcessError>
  readonly stdin: (session: string, input: StdinInput) => Effect.Effect<StdinResult, ProcessError>
  readonly read: (session: string, input: ReadInput) => Effect.Effect<ReadResult, ProcessError>
  readonly kill: (session: string, input: KillInput) => Effect.Effect<KillResult, ProcessError>
  readonly wait: (session: string, input: WaitInput, progress?: ProgressReporter) => Effect.Effect<WaitResult, ProcessError>
  /** The TTY process `ref` names, for a person's view of it (services/Terminals); InvalidInput when it has no terminal. */
  readonly terminal: (session: string, ref: ProcessRef) => Effect.Effect<ProcessHandle, ProcessError>
  /** The process `ref` names, followed from its computer if another server started it: what a task answered by a replica reads. */
  readonly handle: (session: string, ref: ProcessRef) => Effect.Effect<ProcessHandle, ProcessError>
}>() {}

/**
 * The Processes service for a caller that holds plain values (a library, a test): each input is
 * decoded with its Schema on the way in, the boundary's one decode, and a problem is an
 * InvalidInput in the tools' words. MCP decodes a tool's arguments itself and calls the service.
 */
export const decoding = (processes: Processes["Type"]) => {
  const spawn = decodeInput("spawn", SpawnInput)
  const exec = decodeInput("sandbox_exec", ExecInput)
  const list = decodeInput("ps", ListFilter)
  const stdin = decodeInput("stdin", StdinInput)
  const read = decodeInput("stdout", ReadInput)
  const kill = decodeInput("kill", KillInput)
  const wait = decodeInput("wait", WaitInput)
  return {
    spawn: (session: string, input: typeof SpawnInput.Encoded, progress?: ProgressReporter) =>
      Effect.flatMap(spawn(input), (decoded) => processes.spawn(session, decoded, progress)),
    exec: (session: string, input: typeof ExecInput.Encoded, progress?: ProgressReporter) =>
      Effect.flatMap(exec(input), (decoded) => processes.exec(session, decoded, progress)),
    list: (session: string, filter: typeof ListFilter.Encoded = {}) => Effect.flatMap(list(filter), (decoded) => processes.list(session, decoded)),
    stdin: (session: string, input: typeof StdinInput.Encoded) => Effect.flatMap(stdin(input), (decoded) => processes.stdin(session, decoded)),
    read: (session: string, input: typeof ReadInput.Encoded) => Effect.flatMap(read(input), (decoded) => processes.read(session, decoded)),
    kill: (session: string, input: typeof KillInput.Encoded) => Effect.flatMap(kill(input), (decoded) => processes.kill(session, decoded)),
    wait: (session: string, input: typeof WaitInput.Encoded, progress?: ProgressReporter) =>
      Effect.flatMap(wait(input), (decoded) => processes.wait(session, decoded, progress))
  }
}
