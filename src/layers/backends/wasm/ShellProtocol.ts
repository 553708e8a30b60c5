/**
 * What the server (ShellProcess.ts) and a shell worker (ShellWorker.ts) say to each other.
 *
 * At start (`workerData`): the toolset's modules and the tool worker's program. Then a
 * `ShellJob`: one process. A worker whose process ended with nothing left running goes back to
 * the pool for another job; one that was killed, or left background jobs, is terminated. The worker posts
 * `ShellMessage`s; `sync` and `commit` are calls: the worker blocks until the server has answered
 * on `rpc.port` and set `rpc.cell` (ComputerFs.ts holds the tree and the change log).
 */
import type { MessagePort } from "node:worker_threads"
import type { Credit } from "./Feed.js"
import type { Change, VDir } from "./Vfs.js"
import type { WorkerScript } from "./WorkerScript.js"

export interface ShellWorkerData {
  /** Command name → its module. */
  readonly commands: ReadonlyMap<string, WebAssembly.Module>
  readonly toolScript: WorkerScript
  /** Longest pipeline, and most tool workers of one process at once. */
  readonly maxPipeline: number
}

export interface ShellJob {
  readonly argv: ReadonlyArray<string>
  readonly env: Readonly<Record<string, string>>
  readonly cwd: string
  readonly hostname: string
  /** The computer's tree (links kept) at `gen`. */
  readonly tree: VDir
  readonly gen: number
  /** The computer's current generation: the worker syncs when it differs from its own. */
  readonly genCell: Int32Array
  readonly quota: BigInt64Array
  /** This process's reservations (Quota.ts). */
  readonly reserved: BigInt64Array
  /** The process's stdin: a one-chunk ring fed by the server (ToolProtocol.ts layout). */
  readonly stdin: SharedArrayBuffer
  /** The shell's own output window (index 0): bytes posted and not yet taken by the server. */
  readonly window: Int32Array
  readonly rpc: { readonly port: MessagePort; readonly cell: Int32Array }
}

export type ShellMessage =
  | { readonly t: "ready" }
  | { readonly t: "out"; readonly fd: 1 | 2; readonly data: Uint8Array; readonly credit: Credit }
  | { readonly t: "sync"; readonly since: number }
  | { readonly t: "commit"; readonly since: number; readonly changes: ReadonlyArray<Change>; readonly reserved: number }
  /** `idle`: nothing of the process runs any more, the worker can take another job. */
  | { readonly t: "exit"; readonly code: number; readonly idle: boolean; readonly error?: string }

/** The answer to `sync` and `commit`: the changes after `since`, or the whole tree when they are gone. */
export type SyncReply =
  | { readonly gen: number; readonly batches: ReadonlyArray<ReadonlyArray<Change>> }
  | { readonly gen: number; readonly tree: VDir }
