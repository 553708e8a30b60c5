import type { Effect } from "effect"
import { Context, Schema } from "effect"
import type { ComputerActor } from "../actors/ComputerActor.js"
import type { BackendError, ComputerNotFound, InvalidInput, Unsupported } from "../domain/Errors.js"

/** What `computer_list` shows of one computer. */
export const ComputerInfo = Schema.Struct({
  computer_id: Schema.String,
  sandbox_id: Schema.String,
  backend: Schema.String,
  state: Schema.String,
  temporary: Schema.Boolean,
  image: Schema.String,
  created_at: Schema.String,
  processes: Schema.Number.annotations({ description: "Live processes" })
})
export type ComputerInfo = typeof ComputerInfo.Type

/** Which computer a call targets: the session's default when no id is given. */
export interface ComputerRequest {
  readonly computer_id?: string | undefined
  readonly temporary?: boolean | undefined
  /** A temporary computer other sessions may use too (permanent computers always may). */
  readonly shared?: boolean | undefined
}

/** The named computers of a server, and the sessions that hold them. */
export class Computers extends Context.Tag("kilntainers/services/Computers")<Computers, {
  /** The computer a session's call targets, created (or re-attached) on first use. */
  readonly resolve: (session: string, request: ComputerRequest) => Effect.Effect<ComputerActor, InvalidInput | BackendError>
  /** computer_create: create or attach by id; without an id, always a new computer. */
  readonly create: (session: string, request: ComputerRequest) => Effect.Effect<ComputerActor, InvalidInput | BackendError>
  /** An existing computer (attached, or known to the provider and attached now). */
  readonly get: (session: string, id: string) => Effect.Effect<ComputerActor, ComputerNotFound | InvalidInput | BackendError>
  readonly restart: (session: string, id: string) => Effect.Effect<ComputerActor, ComputerNotFound | InvalidInput | BackendError | Unsupported>
  readonly factoryReset: (session: string, id: string) => Effect.Effect<ComputerActor, ComputerNotFound | InvalidInput | BackendError | Unsupported>
  readonly delete: (session: string, id: string) => Effect.Effect<void, ComputerNotFound | InvalidInput | BackendError>
  /**
   * The computers a session may see: the ones it holds, shared ones, and permanent ones (also those
   * only the provider still keeps). Other sessions' private temporary computers are not listed.
   */
  readonly list: (session: string) => Effect.Effect<ReadonlyArray<ComputerInfo>, BackendError>
  /** May this session use (read, signal, change) this computer? */
  readonly canAccess: (session: string, computerId: string) => Effect.Effect<boolean>
  /** A session ended: its temporary computers that nobody else holds are removed. */
  readonly release: (session: string) => Effect.Effect<void>
}>() {}
