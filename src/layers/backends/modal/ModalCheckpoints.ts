/**
 * Checkpoints on Modal: a filesystem snapshot of the sandbox, which Modal stores as an image. A
 * capture is `sandbox.snapshotFilesystem()` (the sandbox runs on, keeping its id and lifetime); a
 * fork is the provider's ordinary create with that image in place of the registry image; removal
 * is `images.delete`. Only files are captured: running processes are not (Modal's memory snapshots
 * are a different, experimental feature that ends the sandbox).
 *
 * The image is stored by Modal apart from the sandbox: it outlives the computer it was taken from
 * and is deleted with the checkpoint (or by the CheckpointStore when the server ends). Modal images
 * carry no labels, so a crashed server's images cannot be told apart and swept; they expire by
 * themselves after the lifetime Modal gives a snapshot (30 days by default).
 */
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type { ComputerMetadata } from "../../../domain/ComputerMetadata.js"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Checkpointing, Instance } from "../../../services/Backend.js"
import type { ModalGatewayService } from "./ModalGateway.js"
import type { ModalProvider } from "./ModalProvider.js"

export interface ModalCheckpointsOptions {
  readonly gateway: ModalGatewayService
  readonly provider: Pick<ModalProvider, "call" | "withSandbox"> & {
    /** The provider's create, from a snapshot's image. */
    readonly create: (metadata: ComputerMetadata, imageId: string) => Effect.Effect<Instance, ProviderError>
  }
}

/** What the result says about the copy. */
export const NOTE = "a Modal filesystem snapshot (an image): the sandbox's files, taken while it ran on; " +
  "running processes are not captured, a fork starts with none"

const transient = (error: ProviderError) => error.reason === "Unavailable" || error.reason === "Timeout"

export const make = (options: ModalCheckpointsOptions): Checkpointing => {
  const { gateway, provider } = options

  // Not retried here: the SDK already retries the router call under one snapshot id (idempotent).
  const capture = (instance: Instance, _id: string) =>
    provider.withSandbox(instance.providerId, (sandbox) =>
      provider.call(`snapshot the sandbox ${instance.providerId}`, sandbox.snapshotFilesystem)).pipe(
        Effect.map((imageId) => ({ stored: imageId, note: NOTE }))
      )

  // Idempotent: an image that is already gone is removed.
  const remove = (stored: string) =>
    provider.call(`delete the image ${stored}`, gateway.deleteImage(stored)).pipe(
      Effect.retry({ schedule: Schedule.exponential("200 millis"), times: 2, while: transient }),
      Effect.catchIf((error) => error.reason === "NotFound", () => Effect.void)
    )

  return { capture, restore: (stored, metadata) => provider.create(metadata, stored), remove }
}
