import type { Effect } from "effect"
import { Context } from "effect"
import type { ProcessActor } from "../actors/ProcessActor.js"
import type { ProcessError } from "../domain/Errors.js"
import type { OutputView, ProcessInfo, ProcessStatus, ReadOptions, StreamSlice } from "../domain/Process.js"

/** Progress of a long call, for MCP progress notifications. */
export type ProgressReporter = (progress: { readonly progress: number; readonly total?: number; readonly message: string }) => Effect.Effect<void>

export interface SpawnInput {
  readonly command: string
  readonly cwd?: string | undefined
  readonly env?: Readonly<Record<string, string>> | undefined
  readonly tty?: boolean | undefined
  readonly cols?: number | undefined
  readonly rows?: number | undefined
  readonly background?: boolean | undefined
  readonly timeoutMs?: number | undefined
  readonly maxBytes?: number | undefined
  readonly computer_id?: string | undefined
  readonly temporary?: boolean | undefined
}

export interface SpawnResult extends OutputView {
  readonly id: string
  readonly computer_id: string
  readonly status: ProcessStatus
  readonly exitCode: number | null
  readonly signal: string | null
  readonly durationMs: number
}

export interface ExecInput {
  readonly command?: string | undefined
  readonly args?: ReadonlyArray<string> | undefined
  readonly stdin?: string | undefined
  readonly working_directory?: string | undefined
  readonly timeout?: number | undefined
  readonly env?: Readonly<Record<string, string>> | undefined
  readonly computer_id?: string | undefined
  readonly temporary?: boolean | undefined
}

export interface ExecResult {
  readonly computer_id: string
  readonly temporary: boolean
  readonly stdout: string
  readonly stderr: string
  readonly exit_code: number
  readonly exec_duration_ms: number
  readonly timed_out: boolean
  readonly truncated: boolean
  readonly stdout_bytes: number
  readonly stderr_bytes: number
}

export interface WaitInput {
  readonly id: string
  readonly pattern?: string | undefined
  readonly quietMs?: number | undefined
  readonly timeoutMs?: number | undefined
}

export interface WaitResult {
  readonly id: string
  readonly reason: "exited" | "matched" | "quiet" | "timeout"
  readonly status: ProcessStatus
  readonly exitCode: number | null
  readonly signal: string | null
  readonly match?: string
  readonly waitedMs: number
}

export interface KillResult {
  readonly id: string
  readonly signal: string
  readonly status: ProcessStatus
  readonly exitCode: number | null
  readonly exitSignal: string | null
}

export interface StdinResult {
  readonly id: string
  readonly bytes: number
  readonly eof: boolean
}

export interface ReadResult extends OutputView {
  readonly id: string
  readonly status: ProcessStatus
  readonly exitCode: number | null
  readonly signal: string | null
}

export type { StreamSlice }

/** Processes of every computer: start, list, talk to, read, signal and wait for them. */
export class Processes extends Context.Tag("kilntainers/services/Processes")<Processes, {
  readonly spawn: (session: string, input: SpawnInput, progress?: ProgressReporter) => Effect.Effect<SpawnResult, ProcessError>
  readonly exec: (session: string, input: ExecInput, progress?: ProgressReporter) => Effect.Effect<ExecResult, ProcessError>
  readonly list: (filter?: { readonly computer_id?: string | undefined; readonly status?: ProcessStatus | undefined }) => Effect.Effect<ReadonlyArray<ProcessInfo>>
  readonly get: (id: string) => Effect.Effect<ProcessActor, ProcessError>
  readonly stdin: (id: string, input: string, eof: boolean) => Effect.Effect<StdinResult, ProcessError>
  readonly read: (id: string, options: ReadOptions) => Effect.Effect<ReadResult, ProcessError>
  readonly kill: (id: string, signal?: string) => Effect.Effect<KillResult, ProcessError>
  readonly wait: (input: WaitInput, progress?: ProgressReporter) => Effect.Effect<WaitResult, ProcessError>
}>() {}
