/**
 * The filesystem of one WASM computer, as the server holds it: the tree (Vfs.ts), its quota
 * (Quota.ts) and its generations. Processes run elsewhere (shell and tool workers) on copies;
 * what they change comes back here in batches, applied in arrival order. Each batch is a new
 * generation, published in shared memory (`genCell`), and kept in a short log so a shell worker's
 * copy (FsReplica.ts) catches up with the batches it missed, or gets the whole tree when they
 * are gone from the log.
 *
 * The quota's `used` is the tree's usage (`committed`) plus what running processes have
 * reserved and not yet settled. A batch settles what its writer reserved; a process that ends
 * gives back the rest; with no process running, `used` is exactly `committed` again.
 */
import { makeQuota, makeReservedCell } from "./Quota.js"
import type { SyncReply } from "./ShellProtocol.js"
import { type Change, dir, type VDir, type VNode, Vfs } from "./Vfs.js"

/**
 * Changes kept for copies to catch up, and the bytes of file contents they may hold on to. A copy
 * further behind gets the whole tree, whose cost grows with the tree's names: with this many
 * changes kept, that happens at most once per as many changes as the tree can have names
 * (`--wasm-max-disk` / INODE_BYTES), so a guest cannot make the server copy trees faster than it
 * changes them itself.
 */
const LOG_CHANGES = 64 * 1024
const LOG_BYTES = 64 * 1024 * 1024

interface Batch {
  readonly gen: number
  readonly changes: ReadonlyArray<Change>
  readonly bytes: number
}

const contentBytes = (changes: ReadonlyArray<Change>) =>
  changes.reduce((total, change) => total + (change.op === "write" ? change.data.byteLength : 0), 0)

/** A copy of the tree's structure (file contents shared), so it can be read while the tree changes. */
export const cloneTree = (node: VDir): VDir => {
  const out = dir()
  for (const [name, child] of node.entries) {
    const copy: VNode = child.kind === "dir" ? cloneTree(child) : child.kind === "file" ? { kind: "file", data: child.data } : child
    out.entries.set(name, copy)
  }
  return out
}

export class ComputerFs {
  readonly vfs: Vfs
  readonly quota: BigInt64Array
  readonly genCell = new Int32Array(new SharedArrayBuffer(4))
  private committed: number
  private gen = 0
  private log: Array<Batch> = []
  private logBytes = 0
  private logChanges = 0
  private readonly live = new Set<BigInt64Array>()

  constructor(root: VDir, readonly limit: number) {
    this.vfs = new Vfs(root)
    this.committed = this.vfs.usage()
    this.quota = makeQuota(limit, this.committed)
  }

  get generation() {
    return this.gen
  }

  /** Bytes the tree uses (contents plus inodes). */
  get usage() {
    return this.committed
  }

  /** A process starts: its cell for reservations. */
  begin(): BigInt64Array {
    const cell = makeReservedCell()
    this.live.add(cell)
    return cell
  }

  /** A process ended (all its threads stopped): what it reserved and did not settle goes back. */
  end(cell: BigInt64Array) {
    if (!this.live.delete(cell)) return
    Atomics.sub(this.quota, 0, Atomics.exchange(cell, 0, 0n))
    if (this.live.size === 0) Atomics.store(this.quota, 0, BigInt(this.committed))
  }

  /** Applies a batch of a process, settling `reserved` bytes of its reservations. */
  apply(changes: ReadonlyArray<Change>, reserved: number, cell: BigInt64Array | undefined) {
    const delta = changes.length === 0 ? 0 : this.vfs.apply(changes)
    this.committed += delta
    Atomics.add(this.quota, 0, BigInt(delta - reserved))
    if (cell !== undefined && reserved !== 0) Atomics.sub(cell, 0, BigInt(reserved))
    if (changes.length === 0) return
    const batch = { gen: ++this.gen, changes, bytes: contentBytes(changes) }
    this.log.push(batch)
    this.logBytes += batch.bytes
    this.logChanges += changes.length
    while (this.log.length > 1 && (this.logChanges > LOG_CHANGES || this.logBytes > LOG_BYTES)) {
      const dropped = this.log.shift()!
      this.logBytes -= dropped.bytes
      this.logChanges -= dropped.changes.length
    }
    Atomics.store(this.genCell, 0, this.gen)
  }

  /** What a copy at generation `since` is missing. */
  since(since: number): SyncReply {
    if (since === this.gen) return { gen: this.gen, batches: [] }
    const first = this.log[0]
    if (first === undefined || first.gen > since + 1 || since > this.gen) return { gen: this.gen, tree: this.vfs.root }
    // Batches have consecutive generations: the missing ones are the log's tail.
    return { gen: this.gen, batches: this.log.slice(since + 1 - first.gen).map((batch) => batch.changes) }
  }

  /** Replaces the whole tree (factory reset). */
  reset(root: VDir) {
    this.vfs.root = root
    this.committed = this.vfs.usage()
    let reserved = 0n
    for (const cell of this.live) reserved += Atomics.load(cell, 0)
    Atomics.store(this.quota, 0, BigInt(this.committed) + reserved)
    this.gen++
    this.log = []
    this.logBytes = 0
    this.logChanges = 0
    Atomics.store(this.genCell, 0, this.gen)
  }
}
