/**
 * Checkpoints on the WASM backend: a computer's filesystem tree cloned in the server's memory. The
 * server's tree is the one every write reaches first (FsReplica.ts), and the clone is taken in one
 * synchronous step, so the copy is one consistent moment of the files, with nothing frozen. The
 * clone shares file contents with the computer (a write replaces a file's bytes, never changes
 * them in place), so a checkpoint costs memory only for what later changes.
 *
 * Checkpoints are never written to the snapshot store: they end with the server (CheckpointStore
 * removes them earlier), so a crash leaves nothing behind. A fork is a new computer whose tree is
 * a clone of the checkpoint's.
 */
import * as Effect from "effect/Effect"
import type { ComputerMetadata } from "../../../domain/ComputerMetadata.js"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import type { Checkpointing, Instance } from "../../../services/Backend.js"
import { cloneTree } from "./ComputerFs.js"
import type { VDir } from "./Vfs.js"

export interface WasmCheckpointsOptions {
  readonly backend: string
  /** The tree of a computer the provider holds (loaded from its snapshot when it is stopped). */
  readonly treeOf: (instance: Instance) => Effect.Effect<VDir, ProviderError>
  /** Creates a computer whose filesystem is `root`. */
  readonly create: (metadata: ComputerMetadata, root: VDir) => Effect.Effect<Instance, ProviderError>
}

export const NOTE = "the computer's files, cloned in one step from the server's copy (consistent, nothing frozen); " +
  "running programs are not captured, and the checkpoint is kept in the server's memory"

export const make = (options: WasmCheckpointsOptions): Checkpointing => {
  const trees = new Map<string, VDir>()

  const capture = (instance: Instance, id: string) =>
    Effect.map(options.treeOf(instance), (root) => {
      trees.set(id, cloneTree(root))
      return { stored: id, note: NOTE }
    })

  const restore = (stored: string, metadata: ComputerMetadata) =>
    Effect.suspend(() => {
      const root = trees.get(stored)
      return root === undefined
        ? Effect.fail(providerError(options.backend, `create computer ${metadata.id} from checkpoint ${stored}`, "NotFound", "the checkpoint is gone"))
        : options.create(metadata, cloneTree(root))
    })

  const remove = (stored: string) => Effect.sync(() => void trees.delete(stored))

  return { capture, restore, remove }
}
