/** The computer actor's surface: its states, options and the handle the registry keeps. */
import type * as Effect from "effect/Effect"
import type { Owner } from "../domain/ComputerMetadata.js"
import type { ComputerUnavailable, ProviderError, Unsupported } from "../domain/Errors.js"
import type { Instance } from "../services/Backend.js"
import type * as ComputerAudit from "./ComputerAudit.js"
import type { ComputerHandle, ComputerInfo } from "../services/Computers.js"

export type ComputerState =
  | "creating"
  | "running"
  | "restarting"
  | "resetting"
  | "recovering"
  | "lost"
  | "deleting"
  | "deleted"
  | "closing"
  | "closed"
  | "failed"

/** Who this server is, as recorded on the computers it creates. */
export interface ServerIdentity {
  readonly instanceId: string
  readonly owner: Owner
}

export interface ComputerActorOptions {
  readonly id: string
  readonly temporary: boolean
  readonly shared: boolean
  /** The session that asked for it first. */
  readonly session: string
  readonly incarnation: number
  readonly killGraceMs: number
  readonly server: ServerIdentity
  /** How long before the provider's end of life the computer's info carries a warning. */
  readonly warnBeforeEndMs?: number | undefined
  /** Records the lifecycle steps in the audit log. */
  readonly audit?: ComputerAudit.LifecycleRecorder | undefined
}

/**
 * Where the computer comes from: a new one (for a warm pool: marked pooled; `from` a checkpoint's
 * stored copy: a fork), or one the provider already has.
 */
export type Origin =
  | { readonly _tag: "Create"; readonly pooled?: boolean | undefined; readonly from?: string | undefined }
  | { readonly _tag: "Attach"; readonly instance: Instance }
  /** A factory reset of a computer not attached here: the instance is removed, never started, and made afresh. */
  | { readonly _tag: "Replace"; readonly instance: Instance }

export interface ComputerActor extends ComputerHandle {
  /** Completes when the computer is running (or fails when it could not be created or attached). */
  readonly ready: Effect.Effect<void, ProviderError>
  readonly state: Effect.Effect<ComputerState>
  readonly info: Effect.Effect<ComputerInfo>
  /** The session now holds this computer. */
  readonly hold: (session: string) => Effect.Effect<void>
  /** The session lets go; answers whether anyone still holds it. */
  readonly release: (session: string) => Effect.Effect<boolean>
  readonly share: Effect.Effect<void>
  readonly liveProcesses: Effect.Effect<number>
  /**
   * Hands a warm pool's computer out under its real id, to its first session: the provider renames
   * it (its labels keep the pool's mark: the reaper treats it as any temporary computer).
   */
  readonly adopt: (request: { readonly id: string; readonly session: string; readonly shared: boolean }) => Effect.Effect<void, ProviderError | Unsupported>
  /** Makes a lost computer run again (start it if the provider still has it, else create it). */
  readonly recover: Effect.Effect<void, ProviderError>
  /** Ends every process, then restarts keeping the writable state. */
  readonly restart: Effect.Effect<void, ProviderError | Unsupported | ComputerUnavailable>
  /** Ends every process, then recreates the computer from its base image. */
  readonly factoryReset: Effect.Effect<void, ProviderError | Unsupported | ComputerUnavailable>
  /**
   * Runs `f` on the running computer's instance with its lifecycle steps held off meanwhile (no
   * restart, reset or delete in the middle of a checkpoint).
   */
  readonly whileRunning: <A, E>(f: (instance: Instance) => Effect.Effect<A, E>) => Effect.Effect<A, E | ComputerUnavailable>
  /** Ends every process and removes the computer for good. */
  readonly destroy: Effect.Effect<void, ProviderError>
}
