import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import type { ProgressReporter } from "./Processes.js"

/**
 * The progress reporter of the MCP call being served, if the client asked for progress. Work
 * forked on behalf of the call (creating a computer, pulling an image) inherits it.
 */
export const CurrentProgress: FiberRef.FiberRef<ProgressReporter | undefined> = FiberRef.unsafeMake<ProgressReporter | undefined>(undefined)

/** Reports a progress message to the current call's client, when it listens. */
export const report = (message: string, progress = 0, total?: number): Effect.Effect<void> =>
  Effect.flatMap(FiberRef.get(CurrentProgress), (reporter) =>
    reporter === undefined ? Effect.void : reporter(total === undefined ? { progress, message } : { progress, total, message }))
