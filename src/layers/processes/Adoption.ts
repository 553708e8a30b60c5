/**
 * The processes a computer holds that this server did not start (another server's, running beside
 * it or gone; this one's before it restarted): followed when a call lists their computer or names
 * one this server does not know, then listed and reached under their handles like its own.
 * Nothing is followed on a backend whose computers do not hold their processes.
 */
import * as Effect from "effect/Effect"
import type { InvalidInput, ProcessNotFound } from "../../domain/Errors.js"
import type { Computers, ComputerHandle } from "../../services/Computers.js"
import type { ProcessRef } from "../../services/ProcessInputs.js"
import type { ProcessHandle } from "../../services/Processes.js"
import type { ProcessAudit } from "./ProcessAudit.js"
import type { ProcessTable } from "./ProcessTable.js"

export interface Adoption {
  /** Follows what the session's computer (or, without an id, every computer open here) holds. */
  readonly catchUp: (session: string, computerId: string | undefined) => Effect.Effect<void>
  /** The process `ref` names: from the table, else after catching up with its computer(s). */
  readonly get: (session: string, ref: ProcessRef) => Effect.Effect<ProcessHandle, ProcessNotFound | InvalidInput>
}

export const make = (options: {
  readonly enabled: boolean
  readonly computers: Computers["Type"]
  readonly table: ProcessTable
  readonly audit: ProcessAudit
  readonly mailboxCapacity: number
}): Adoption => {
  const { audit, computers, table } = options

  const follow = (session: string, computer: ComputerHandle) =>
    computer.follow({
      mailboxCapacity: options.mailboxCapacity,
      onExit: (ended) => Effect.zipRight(table.finished(ended), audit.ended(ended, session))
    }).pipe(
      Effect.flatMap((adopted) => Effect.forEach(adopted, (process) => table.add(process, computer), { discard: true })),
      // A computer that is not running now has nothing to follow; its own calls say why.
      Effect.catchAll((error) => Effect.logDebug(`computer ${computer.id}: cannot follow its processes: ${error.message}`))
    )

  const catchUp = (session: string, computerId: string | undefined) =>
    !options.enabled ? Effect.void : Effect.gen(function*() {
      // A computer named is opened if need be (a fresh server's `ps` shows what it holds); one that
      // cannot be has nothing to list here, as before.
      const targets = computerId === undefined
        ? yield* computers.attached(session)
        : yield* Effect.orElseSucceed(Effect.map(computers.get(session, computerId), (one) => [one]), () => [])
      yield* Effect.forEach(targets, (computer) => follow(session, computer), { concurrency: 4, discard: true })
    })

  return {
    catchUp,
    get: (session, ref) =>
      Effect.catchAll(table.get(session, ref), (error) =>
        // Not here, or not on the computer named: it may be one this server has not followed yet.
        options.enabled && (error._tag === "ProcessNotFound" || ref.computer_id !== undefined)
          ? Effect.zipRight(catchUp(session, ref.computer_id), table.get(session, ref))
          : Effect.fail(error))
  }
}
