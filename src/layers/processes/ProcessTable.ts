/**
 * Which processes exist and who may reach them: every process by its id on its computer (`p1`,
 * `p2`, … never reused there; where the computer holds its processes the id is its own handle, so
 * two computers may each have a `p1`), under the computer incarnation it belongs to. The finished
 * ones stay listed until `maxFinished` newer ones finished after them; a computer that leaves this
 * server (deleted, released, shut down) takes its processes out of every listing. A session reaches
 * only the processes of computers it may use: another session's private computer's do not exist
 * for it.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { InvalidInput, ProcessNotFound } from "../../domain/Errors.js"
import type { ComputerHandle } from "../../services/Computers.js"
import type { ProcessRef } from "../../services/ProcessInputs.js"
import type { ProcessHandle } from "../../services/Processes.js"

export interface ProcessTable {
  /** A new id, for a computer that does not give its processes handles of its own. */
  readonly nextId: Effect.Effect<string>
  /** Lists a process just started on (or followed from) `computer`. */
  readonly add: (process: ProcessHandle, computer: ComputerHandle) => Effect.Effect<void>
  /** The process ended: it stays listed among the last finished. */
  readonly finished: (process: ProcessHandle) => Effect.Effect<void>
  /**
   * The process `ref` names, if this session may reach it (and it runs on `ref.computer_id` when that
   * is given; without it, an id on several of the session's computers is refused as ambiguous).
   */
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
    const scope = yield* Effect.scope
    /** Oldest first; the key is `<incarnation>/<id>`. */
    const entries = new Map<string, Entry>()
    /** The keys under each id (an id is on few computers), and each listed process's key. */
    const byId = new Map<string, Set<string>>()
    const keyOf = new WeakMap<ProcessHandle, string>()
    const finishedOnes: Array<ProcessHandle> = []
    /** Incarnations whose end is watched. */
    const watched = new Set<number>()
    let counter = 0

    const remove = (key: string) => {
      const entry = entries.get(key)
      if (entry === undefined) return
      entries.delete(key)
      const keys = byId.get(entry.process.id)
      keys?.delete(key)
      if (keys?.size === 0) byId.delete(entry.process.id)
    }

    const forget = (computer: ComputerHandle) =>
      Effect.sync(() => {
        watched.delete(computer.incarnation)
        for (const [key, entry] of entries) if (entry.computer.incarnation === computer.incarnation) remove(key)
      })

    const watch = (computer: ComputerHandle) =>
      watched.has(computer.incarnation)
        ? Effect.void
        : Effect.sync(() => watched.add(computer.incarnation)).pipe(
          Effect.zipRight(Effect.forkIn(Effect.zipRight(computer.closed, forget(computer)), scope))
        )

    const reachable = (session: string, id: string) =>
      [...(byId.get(id) ?? [])].map((key) => entries.get(key)!).filter((entry) => entry.computer.visibleTo(session))

    /** Drops the entry of exactly this process (a later one under its key stays). */
    const drop = (process: ProcessHandle) => {
      const key = keyOf.get(process)
      if (key !== undefined && entries.get(key)?.process === process) remove(key)
    }

    return {
      nextId: Effect.sync(() => `p${++counter}`),
      add: (process, computer) =>
        Effect.suspend(() => {
          const key = `${computer.incarnation}/${process.id}`
          // A handle the computer gives again (its agent started afresh) names the newer process.
          remove(key)
          entries.set(key, { process, computer })
          keyOf.set(process, key)
          const keys = byId.get(process.id) ?? new Set<string>()
          byId.set(process.id, keys.add(key))
          return watch(computer)
        }),
      finished: (process) =>
        Effect.sync(() => {
          finishedOnes.push(process)
          while (finishedOnes.length > maxFinished) drop(finishedOnes.shift()!)
        }),
      get: (session, ref) =>
        Effect.suspend((): Effect.Effect<ProcessHandle, ProcessNotFound | InvalidInput> => {
          const found = reachable(session, ref.id)
          if (found.length === 0) return Effect.fail(new ProcessNotFound({ id: ref.id }))
          if (ref.computer_id !== undefined) {
            const there = found.find((entry) => entry.computer.id === ref.computer_id)
            if (there !== undefined) return Effect.succeed(there.process)
            return Effect.fail(
              new InvalidInput({ message: `process '${ref.id}' runs on computer '${found[0]!.computer.id}', not '${ref.computer_id}'` })
            )
          }
          if (found.length > 1) {
            const on = found.map((entry) => `'${entry.computer.id}'`).join(", ")
            return Effect.fail(new InvalidInput({ message: `there is a process '${ref.id}' on computers ${on}: say which with computer_id` }))
          }
          return Effect.succeed(found[0]!.process)
        }),
      visible: (session, computerId) =>
        Effect.sync(() =>
          [...entries.values()]
            .filter((entry) => entry.computer.visibleTo(session) && (computerId === undefined || entry.computer.id === computerId))
            .map((entry) => entry.process)
        )
    }
  })
