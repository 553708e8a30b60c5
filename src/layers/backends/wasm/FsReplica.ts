/**
 * The computer's filesystem as a shell worker sees it: a copy of the server's tree (ComputerFs.ts)
 * kept current by pulling the server's changes whenever the computer's generation moved (a read
 * costs one atomic load when nothing changed). Writes are never made here first: they go to the
 * server (`commit`, a blocking call) and come back with the changes of others in the server's
 * order, so every copy agrees with the server.
 */
import { receiveMessageOnPort, type MessagePort } from "node:worker_threads"
import { reserve } from "./Quota.js"
import type { ShellMessage, SyncReply } from "./ShellProtocol.js"
import type { ShellFs } from "./ShellIo.js"
import { type Change, type VDir, type VNode, Vfs } from "./Vfs.js"

export class FsReplica implements ShellFs {
  private readonly vfs: Vfs
  private gen: number

  constructor(
    tree: VDir,
    gen: number,
    private readonly genCell: Int32Array,
    private readonly rpc: { readonly port: MessagePort; readonly cell: Int32Array },
    private readonly post: (message: ShellMessage) => void,
    readonly quota: BigInt64Array,
    readonly reserved: BigInt64Array
  ) {
    this.vfs = new Vfs(tree)
    this.gen = gen
  }

  /** Brings the copy up to the server's generation. */
  sync() {
    if (Atomics.load(this.genCell, 0) !== this.gen) this.call({ t: "sync", since: this.gen })
  }

  commit(changes: ReadonlyArray<Change>, reserved: number) {
    this.call({ t: "commit", since: this.gen, changes, reserved })
  }

  reserve(bytes: number) {
    return reserve(this.quota, this.reserved, bytes)
  }

  lookup(cwd: string, path: string, nofollow = false): VNode | undefined {
    this.sync()
    return this.vfs.lookup(cwd, path, nofollow)
  }

  resolve(cwd: string, path: string) {
    this.sync()
    return this.vfs.resolve(cwd, path)
  }

  isDir(cwd: string, path: string) {
    this.sync()
    return this.vfs.isDir(cwd, path)
  }

  parentOf(cwd: string, path: string) {
    this.sync()
    return this.vfs.parentOf(cwd, path)
  }

  view(): VDir {
    this.sync()
    return this.vfs.view()
  }

  private call(message: ShellMessage) {
    Atomics.store(this.rpc.cell, 0, 0)
    this.post(message)
    let reply: { readonly message: SyncReply } | undefined
    for (;;) {
      Atomics.wait(this.rpc.cell, 0, 0)
      reply = receiveMessageOnPort(this.rpc.port) as { readonly message: SyncReply } | undefined
      if (reply !== undefined) break
      Atomics.store(this.rpc.cell, 0, 0)
    }
    const answer = reply.message
    if ("tree" in answer) this.vfs.root = answer.tree
    else for (const batch of answer.batches) this.vfs.apply(batch)
    this.gen = answer.gen
  }
}
