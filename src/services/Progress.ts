import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import type { ProgressReporter } from "./Processes.js"

/**
 * The progress reporter of the MCP call being served, if the client asked for progress. Work
 * forked on behalf of the call (creating a computer, pulling an image) inherits it.
 */
export const CurrentProgress: FiberRef.FiberRef<ProgressReporter | undefined> = FiberRef.unsafeMake<ProgressReporter | undefined>(undefined)

/**
 * How long the MCP call being served may wait on work it does not control (the computer image's
 * first build) when its client gets no progress: `--max-call-ms`, under common clients' request
 * timeouts. Undefined when the client listens for progress, and outside calls.
 */
export const CurrentCallBudget: FiberRef.FiberRef<number | undefined> = FiberRef.unsafeMake<number | undefined>(undefined)

/** Reports a progress message to the current call's client, when it listens. */
export const report = (message: string, progress = 0, total?: number): Effect.Effect<void> =>
  Effect.flatMap(FiberRef.get(CurrentProgress), (reporter) =>
    reporter === undefined ? Effect.void : reporter(total === undefined ? { progress, message } : { progress, total, message }))

/**
 * Told which process the MCP call being served concerns, once it is known: the one a spawn or
 * sandbox_exec started, the one a wait waits on. A call that may become a task (the Tasks
 * extension) names its process in the task from this.
 */
export const CurrentCallSubject: FiberRef.FiberRef<SubjectListener | undefined> = FiberRef.unsafeMake<SubjectListener | undefined>(undefined)

/** Where the call's output begins in the process's streams (a wait's: where it began waiting). */
export interface SubjectCursors {
  readonly stdout: number
  readonly stderr: number
}

export type SubjectListener = (computerId: string, processId: string, cursors?: SubjectCursors) => void

/** Tells the current call's subject, when someone listens. */
export const noteSubject = (computerId: string, processId: string, cursors?: SubjectCursors): Effect.Effect<void> =>
  Effect.map(FiberRef.get(CurrentCallSubject), (note) => note?.(computerId, processId, cursors))
