/**
 * A computer's one state: where it is in its life, with the provider's `Instance` once it has one
 * and, while it runs, the `Connection` its processes run through (a new generation at every
 * connect). `ComputerActor` is its only writer; everything else reads it.
 *
 *   Creating ─▶ Running ─▶ Restarting / Resetting / Recovering ─▶ Running
 *       │          │
 *       ▼          ├─▶ Lost (the provider reported it gone, or a step failed; recovered on next use)
 *     Failed       └─▶ Deleting ─▶ Deleted          Closing ─▶ Closed (released / shutdown)
 */
import * as Data from "effect/Data"
import type * as Scope from "effect/Scope"
import type { Connection, Instance } from "../services/Backend.js"
import type { ComputerState } from "./ComputerActorApi.js"

/** A connection to the computer and the child Scope it lives in (closed when the generation ends). */
export interface Live {
  readonly value: Connection
  readonly scope: Scope.CloseableScope
  /** Counts the connections of this computer: a loss is only the current generation's. */
  readonly generation: number
}

type Had = { readonly instance: Instance | undefined }

export type ComputerLife = Data.TaggedEnum<{
  Creating: Had
  Running: { readonly instance: Instance; readonly connection: Live }
  Restarting: Had
  Resetting: Had
  Recovering: Had
  /** `why` says what happened, for the calls it refuses until it is recovered. */
  Lost: Had & { readonly why: string | undefined }
  Deleting: Had
  Deleted: Had
  Closing: Had
  Closed: Had
  /** It could not be created or attached. */
  Failed: Had
}>

export const ComputerLife = Data.taggedEnum<ComputerLife>()

const STATES: { readonly [K in ComputerLife["_tag"]]: ComputerState } = {
  Creating: "creating",
  Running: "running",
  Restarting: "restarting",
  Resetting: "resetting",
  Recovering: "recovering",
  Lost: "lost",
  Deleting: "deleting",
  Deleted: "deleted",
  Closing: "closing",
  Closed: "closed",
  Failed: "failed"
}

/** The state's name, as `computer_list` and `ComputerUnavailable` say it. */
export const stateOf = (life: ComputerLife): ComputerState => STATES[life._tag]

/** Why a lost computer is lost, when that is known. */
export const whyOf = (life: ComputerLife): string | undefined => (life._tag === "Lost" ? life.why : undefined)

/** Steps are refused once the computer is on its way out. */
export const ending = (life: ComputerLife): boolean =>
  life._tag === "Deleted" || life._tag === "Closing" || life._tag === "Closed"
