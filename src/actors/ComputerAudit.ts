/**
 * A computer's lifecycle steps as the audit log records them (`type: "computer"`): each step gets
 * its span (Spans.lifecycle) and, once it ends, one entry saying what happened and, when it
 * failed, why. Kept out of ComputerActor so that the actor only names its steps.
 */
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import type { ComputerEvent } from "../services/AuditLog.js"
import * as Spans from "../services/Spans.js"

/** Where a computer's lifecycle entries go (the audit log's `record`). */
export type LifecycleRecorder = (event: ComputerEvent) => Effect.Effect<void>

const EVENTS: Partial<Record<Spans.LifecycleStep, ComputerEvent["event"]>> = {
  create: "created",
  attach: "attached",
  recover: "recovered",
  adopt: "adopted",
  restart: "restarted",
  reset: "reset",
  delete: "deleted",
  lost: "lost",
  release: "released"
}

/** What an entry says of the computer at the time it is written (its id changes on adoption). */
export interface ComputerFacts {
  readonly computer: string
  readonly backend: string
  /** The session that asked for it, for the steps a session asks for (create, attach). */
  readonly session: string
}

const failureText = (cause: Cause.Cause<unknown>) => {
  const error = Cause.squash(cause)
  const message = typeof error === "object" && error !== null && "message" in error ? String(error.message) : String(error)
  return `failed: ${message.split("\n")[0]}`
}

const detailOf = (step: Spans.LifecycleStep, attributes: Spans.Attributes): string | undefined => {
  if (step === "lost") return String(attributes[Spans.Attr.reason] ?? "")
  if (step === "release") return String(attributes["kilntainers.computer.release"] ?? "") || undefined
  if (step === "adopt") return `from the warm pool (${String(attributes[Spans.Attr.computerId] ?? "")})`
  return undefined
}

/**
 * `Spans.lifecycle`, plus the step's audit entry when `record` is given. Interrupted steps (the
 * server shutting down), lease renewals and the release of a deleted computer are not recorded.
 */
export const lifecycle = (record: LifecycleRecorder | undefined, facts: () => ComputerFacts) =>
  (step: Spans.LifecycleStep, attributes: () => Spans.Attributes, options: { readonly root?: boolean } = {}) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
    const traced = Spans.lifecycle(step, attributes, options)(effect)
    const event = EVENTS[step]
    if (record === undefined || event === undefined) return traced
    // The facts as the step starts (the span reads them then too): an adoption renames the computer.
    return Effect.suspend(() => {
      const before = attributes()
      return traced.pipe(Effect.onExit((exit) => {
        // A deleted computer's scope closing releases nothing: "deleted" said it all.
        if (Exit.isInterrupted(exit) || (step === "release" && before["kilntainers.computer.release"] === "none")) return Effect.void
        const now = facts()
        const detail = Exit.isFailure(exit) ? failureText(exit.cause) : detailOf(step, before)
        return record({
          type: "computer",
          event,
          computer: now.computer,
          backend: now.backend,
          ...(step === "create" || step === "attach" ? (now.session === "" ? {} : { session: now.session }) : {}),
          ...(detail === undefined || detail === "" ? {} : { detail })
        })
      }))
    })
  }
