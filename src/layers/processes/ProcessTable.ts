/**
 * Which processes exist and who may reach them: every process by handle (`p1`, `p2`, … never
 * reused), under the computer incarnation it belongs to. The finished ones stay listed until
 * `maxFinished` newer ones finished after them; a computer that leaves this server (deleted,
 * released, shut down) takes its processes out of every listing. A session reaches only the
 * processes of computers it may use: another session's private computer's do not exist for it.
 */
import * as Effect from "effect/Effect"
import * as FiberSet from "effect/FiberSet"
import type * as Scope from "effect/Scope"
import { InvalidInput, ProcessNotFound } from "../../domain/Errors.js"
import type { ComputerHandle } from "../../services/Computers.js"
import type { ProcessRef } from "../../services/ProcessInputs.js"
import type { ProcessHandle } from "../../services/Processes.js"

export interface ProcessTable {
  /** A new handle. */
  readonly nextId: Effect.Effect<string>
  /** Lists a process just started on `computer`. */
  readonly add: (process: ProcessHandle, computer: ComputerHandle) => Effect.Effect<void>
  /** The process ended: it stays listed among the last finished. */
  readonly finished: (process: ProcessHandle) => Effect.Effect<void>
  /** The process `ref` names, if this session may reach it (and it runs on `ref.computer_id` when that is given). */
  readonly get: (session: string, ref: ProcessRef) => Effect.Effect<ProcessHandle, ProcessNotFound | InvalidInput>
  /** The processes this session may reach, oldest first (on one computer when given). */
  readonly visible: (session: string, computerId: string | undefined) => Effect.Effect<ReadonlyArray<ProcessHandle>>
}

interface Entry {
  readonly process: ProcessHandle
  readonly computer: ComputerHandle
}

/** A table whose watches of computers end with the Scope. */
export const make = (maxFinished: number): Effect.Effect<ProcessTable, never, Scope.Scope> =>
  Effect.gen(function*() {
    // Watches run as fibers of the table, not of the call that first spawned on a computer: a fiber
    // forked from a call keeps that call's fiber, and its result (a spawn's inline output), for as
    // long as it runs (Effect's child fibers hold their parent), here as long as the computer lives.
    const watchers = yield* FiberSet.make<void>()
    const runWatch = yield* FiberSet.runtime(watchers)<never>()
    const entries = new Map<string, Entry>()
    const finishedIds: Array<string> = []
    /** Incarnations whose end is watched. */
    const watched = new Set<number>()
    let counter = 0

    const forget = (computer: ComputerHandle) =>
      Effect.sync(() => {
        watched.delete(computer.incarnation)
        for (const [id, entry] of entries) if (entry.computer.incarnation === computer.incarnation) entries.delete(id)
      })

    const watch = (computer: ComputerHandle) =>
      watched.has(computer.incarnation)
        ? Effect.void
        : Effect.sync(() => {
          watched.add(computer.incarnation)
          runWatch(Effect.zipRight(computer.closed, forget(computer)))
        })

    return {
      nextId: Effect.sync(() => `p${++counter}`),
      add: (process, computer) =>
        Effect.suspend(() => {
          entries.set(process.id, { process, computer })
          return watch(computer)
        }),
      finished: (process) =>
        Effect.sync(() => {
          finishedIds.push(process.id)
          while (finishedIds.length > maxFinished) entries.delete(finishedIds.shift()!)
        }),
      get: (session, ref) =>
        Effect.suspend((): Effect.Effect<ProcessHandle, ProcessNotFound | InvalidInput> => {
          const entry = entries.get(ref.id)
          if (entry === undefined || !entry.computer.visibleTo(session)) return Effect.fail(new ProcessNotFound({ id: ref.id }))
          if (ref.computer_id !== undefined && ref.computer_id !== entry.computer.id) {
            return Effect.fail(
              new InvalidInput({ message: `process '${ref.id}' runs on computer '${entry.computer.id}', not '${ref.computer_id}'` })
            )
          }
          return Effect.succeed(entry.process)
        }),
      visible: (session, computerId) =>
        Effect.sync(() =>
          [...entries.values()]
            .filter((entry) => entry.computer.visibleTo(session) && (computerId === undefined || entry.computer.id === computerId))
            .map((entry) => entry.process)
        )
    }
  })
