/**
 * A WASM computer as its provider holds it in the server's memory: the metadata the kernel gave
 * it, its filesystem (ComputerFs.ts), and the connections open to it. This is the provider's own
 * world — what a container engine is to Docker — not a lifecycle: the kernel decides when
 * computers are made, connected, saved away and removed.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { type ComputerMetadata, fromLabels, selector, toLabels } from "../../../domain/ComputerMetadata.js"
import { cloneTree, ComputerFs } from "./ComputerFs.js"
import type { SnapshotHeader } from "./Snapshot.js"
import type { SnapshotStore } from "./SnapshotStore.js"
import type { VDir } from "./Vfs.js"

/** An open connection, as its computer knows it. */
export interface Attached {
  /** The computer went away under the connection (removed): its `lost` completes, its processes end. */
  readonly lose: (reason: string) => void
}

export interface WasmComputer {
  readonly metadata: ComputerMetadata
  readonly fs: ComputerFs
  readonly attached: Set<Attached>
  /** The filesystem generation last saved (permanent computers). */
  savedGeneration: number
  removed: boolean
}

export const make = (metadata: ComputerMetadata, root: VDir, maxDiskBytes: number): WasmComputer => ({
  metadata,
  fs: new ComputerFs(root, maxDiskBytes),
  attached: new Set(),
  savedGeneration: -1,
  removed: false
})

/** A snapshot's header for this metadata: its labels are the one encoding of ComputerMetadata. */
export const headerOf = (metadata: ComputerMetadata): SnapshotHeader => ({
  id: metadata.id,
  createdAt: metadata.created,
  labels: toLabels("dashed", metadata)
})

/** The metadata a snapshot's header records; a snapshot of an earlier version (no labels) is a permanent computer. */
export const metadataOf = (header: SnapshotHeader, image: string): Option.Option<ComputerMetadata> =>
  fromLabels("dashed", header.labels ?? selector("dashed", { id: header.id, temporary: false }), {
    image,
    created: header.createdAt
  }).pipe(Option.filter((metadata) => metadata.id === header.id && !metadata.temporary))

/**
 * Saves a permanent computer's filesystem when it changed since the last save (or always, with
 * `force`); a temporary or removed one is never written.
 */
export const save = (store: SnapshotStore, computer: WasmComputer, force = false) =>
  computer.metadata.temporary ? Effect.void : store.save(computer.metadata.id, () => {
    const generation = computer.fs.generation
    if (computer.removed || (!force && generation === computer.savedGeneration)) return undefined
    computer.savedGeneration = generation
    return { header: headerOf(computer.metadata), root: cloneTree(computer.fs.vfs.root) }
  }).pipe(
    // A failed save is tried again next time.
    Effect.tapError(() => Effect.sync(() => void (computer.savedGeneration = -1)))
  )
