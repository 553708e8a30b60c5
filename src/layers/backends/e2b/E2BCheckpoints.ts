/**
 * Checkpoints on E2B: E2B's own snapshots, through the SDK. A capture is `Sandbox.createSnapshot`
 * (E2B pauses the sandbox briefly, takes its state and resumes it, keeping its id and lifetime);
 * the snapshot's id is a template a new sandbox is created from (`Sandbox.create(snapshotId)`), so
 * a fork is the provider's ordinary create with that template; removal is `Sandbox.deleteSnapshot`.
 *
 * A snapshot is stored by E2B apart from the sandbox: it outlives the computer it was taken from,
 * and is deleted with the checkpoint (or by the CheckpointStore when the server ends). It is not
 * named: an E2B snapshot name is shared by the whole team, and a second snapshot under a taken
 * name becomes a new build of the first — two servers would overwrite each other's checkpoints.
 */
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import { Sandbox } from "e2b"
import type { ComputerMetadata } from "../../../domain/ComputerMetadata.js"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Checkpointing, Instance } from "../../../services/Backend.js"
import { fromSdk, isTransient } from "./E2BError.js"
import type { Connection } from "./E2BProvider.js"

export interface E2BCheckpointsOptions {
  readonly connection: Connection
  readonly scrub: (text: string) => string
  /** The provider's create, with the template a sandbox boots from. */
  readonly create: (metadata: ComputerMetadata, template: string) => Effect.Effect<Instance, ProviderError>
}

/** What the result says about the copy (E2B's snapshot is of the whole VM, not only the files). */
export const NOTE = "an E2B snapshot: the sandbox was paused briefly while E2B captured it, files and memory; " +
  "a fork boots from it, and processes that ran at the checkpoint may run on in the fork unlisted (the server lists only those it starts)"

export const make = (options: E2BCheckpointsOptions): Checkpointing => {
  const { connection } = options

  const call = <A>(operation: string, f: (signal: AbortSignal) => Promise<A>): Effect.Effect<A, ProviderError> =>
    Effect.tryPromise({
      try: f,
      catch: (error) => fromSdk({ operation, plane: "api", requestTimeoutMs: connection.requestTimeoutMs, scrub: options.scrub }, error)
    })

  // Not retried: a snapshot whose answer was lost would be a second, unseen copy.
  const capture = (instance: Instance, _id: string) =>
    call("snapshot the sandbox", (signal) => Sandbox.createSnapshot(instance.providerId, { ...connection, signal })).pipe(
      Effect.map((snapshot) => ({ stored: snapshot.snapshotId, note: NOTE }))
    )

  // Idempotent: the SDK answers false for a snapshot that is already gone.
  const remove = (stored: string) =>
    call("delete the snapshot", (signal) => Sandbox.deleteSnapshot(stored, { ...connection, signal })).pipe(
      Effect.retry({ schedule: Schedule.exponential("200 millis"), times: 2, while: isTransient }),
      Effect.asVoid
    )

  return { capture, restore: (stored, metadata) => options.create(metadata, stored), remove }
}
