/**
 * The images of the Modal fake (ModalFake.ts) that filesystem snapshots make: a snapshot is a copy
 * of the sandbox's writable files (its /home/agent and /tmp, the only parts of the fake's sandbox
 * that are not the host's read-only /usr and /etc), kept under the fake's root by image id. A
 * sandbox created with such an image id starts with a copy of them; the image is unchanged by
 * what its sandboxes do. Like Modal, a snapshot request is idempotent on its snapshot id (the SDK
 * retries it under the same one), and an unknown image id is refused.
 */
import { cpSync, existsSync, mkdirSync, rmSync } from "node:fs"
import { join } from "node:path"

const WRITABLE = ["home", "tmp"]

export class ModalFakeImages {
  private readonly bySnapshot = new Map<string, string>()
  private readonly images = new Set<string>()

  constructor(private readonly root: string, private readonly newId: () => string) {}

  /** Copies a sandbox's files into a new image (or answers the image this snapshot id already made). */
  snapshot(sandboxDir: string, snapshotId: string): string {
    const done = this.bySnapshot.get(snapshotId)
    if (done !== undefined) return done
    const imageId = this.newId()
    for (const part of WRITABLE) {
      cpSync(join(sandboxDir, part), join(this.root, imageId, part), { recursive: true, verbatimSymlinks: true, preserveTimestamps: true })
    }
    this.images.add(imageId)
    this.bySnapshot.set(snapshotId, imageId)
    return imageId
  }

  has(imageId: string): boolean {
    return this.images.has(imageId)
  }

  /** Ids of the snapshot images that exist. */
  list(): Array<string> {
    return [...this.images]
  }

  /** Gives a new sandbox's directory the image's files. */
  seed(imageId: string, sandboxDir: string) {
    mkdirSync(sandboxDir, { recursive: true })
    for (const part of WRITABLE) {
      if (existsSync(join(this.root, imageId, part))) {
        cpSync(join(this.root, imageId, part), join(sandboxDir, part), { recursive: true, verbatimSymlinks: true, preserveTimestamps: true })
      }
    }
  }

  /** False when there is no such image. */
  delete(imageId: string): boolean {
    if (!this.images.delete(imageId)) return false
    rmSync(join(this.root, imageId), { recursive: true, force: true })
    return true
  }
}
