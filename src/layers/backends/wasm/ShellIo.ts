/**
 * The standard streams of a command in the toolset shell, and what the shell needs from its
 * surroundings (`ShellHost`): the computer's filesystem as the shell worker sees it, the tools,
 * and the quota.
 *
 * A stream is a pipe or the process's own stream (`Feed` in, a `Sink` out), a file of the
 * computer (a redirection: a tool opens it itself, a builtin writes through a `FileWriter`), or
 * nothing (`/dev/null`).
 */
import type { Feed, Sink } from "./Feed.js"
import type { WorkerPool } from "./Runner.js"
import type { Change, VDir, VNode } from "./Vfs.js"
import { ENOSPC_TEXT } from "./Quota.js"

export type Input = { readonly kind: "feed"; readonly feed: Feed } | { readonly kind: "from"; readonly path: string } | { readonly kind: "empty" }
export type Output = { readonly kind: "sink"; readonly write: Sink } | { readonly kind: "file"; readonly writer: FileWriter } | { readonly kind: "null" }

export interface Io {
  readonly stdin: Input
  readonly stdout: Output
  readonly stderr: Output
}

/** The computer's filesystem as the shell sees it (FsReplica.ts): reads are current, writes go to the server. */
export interface ShellFs {
  lookup(cwd: string, path: string, nofollow?: boolean): VNode | undefined
  resolve(cwd: string, path: string): { node: VNode; path: string } | undefined
  isDir(cwd: string, path: string): boolean
  /** The tree a tool sees (Vfs.view). */
  view(): VDir
  /** Applies changes (and settles the quota reserved for them); fails with why when one cannot be made. */
  commit(changes: ReadonlyArray<Change>, reserved: number): void
  /** Takes quota for bytes about to be written; false: no space. */
  reserve(bytes: number): boolean
  /** The directory that would hold `path` (undefined: it does not exist). */
  parentOf(cwd: string, path: string): { readonly dir: VDir; readonly name: string; readonly parts: ReadonlyArray<string> } | undefined
  readonly quota: BigInt64Array
  readonly reserved: BigInt64Array
}

export interface ShellHost {
  readonly fs: ShellFs
  readonly hostname: string
  /** Command name → module. */
  readonly commands: ReadonlyMap<string, WebAssembly.Module>
  readonly pool: WorkerPool
  /** Open FileWriters (flushed before a tool runs). */
  readonly writers: Set<FileWriter>
  /** Longest pipeline the shell runs (every stage may be a thread). */
  readonly maxPipeline: number
  /** Background jobs (`cmd &`) still running. */
  readonly jobs: { running: number }
  /** Waits while too much of the shell's own output is in flight (its window is full). */
  readonly throttle: () => Promise<void>
}

/**
 * What builtins write to a redirected file: kept here (its quota taken as it comes) and written to
 * the computer in one change when the redirection closes, or before a tool runs (it may read the
 * file). Creating or truncating the file waits for that change too, so no other process sees it
 * empty in between.
 */
export class FileWriter {
  private parts: Array<Uint8Array> = []
  private size = 0
  private taken: number

  /** `opening`: the file is to be created (its inode's quota taken) or truncated first. */
  constructor(
    private readonly fs: ShellFs,
    readonly path: string,
    private readonly writers: Set<FileWriter>,
    private opening: { readonly reserved: number } | undefined
  ) {
    this.taken = opening?.reserved ?? 0
    writers.add(this)
  }

  /** Appends, or returns the error text when the quota is full (nothing of `data` is kept). */
  append(data: Uint8Array): string | undefined {
    if (data.byteLength === 0) return undefined
    if (!this.fs.reserve(data.byteLength)) return ENOSPC_TEXT
    this.taken += data.byteLength
    this.parts.push(new Uint8Array(data))
    this.size += data.byteLength
    return undefined
  }

  flush() {
    if (this.size === 0 && this.opening === undefined) return
    const node = this.opening === undefined ? this.fs.lookup("/", this.path) : undefined
    const before = node?.kind === "file" ? node.data : new Uint8Array(0)
    const data = new Uint8Array(new SharedArrayBuffer(before.byteLength + this.size))
    data.set(before, 0)
    let at = before.byteLength
    for (const part of this.parts) {
      data.set(part, at)
      at += part.byteLength
    }
    const reserved = this.taken
    this.parts = []
    this.size = 0
    this.taken = 0
    this.opening = undefined
    this.fs.commit([{ op: "write", path: this.path, data }], reserved)
  }

  close() {
    this.flush()
    this.writers.delete(this)
  }
}

const encoder = new TextEncoder()

/** Writes what a builtin prints; false when it could not (a full disk), after saying so on stderr. */
export const write = (io: Io, fd: 1 | 2, data: Uint8Array | string): boolean => {
  const bytes = typeof data === "string" ? encoder.encode(data) : data
  const out = fd === 1 ? io.stdout : io.stderr
  if (out.kind === "sink") out.write(bytes)
  else if (out.kind === "file") {
    const failed = out.writer.append(bytes)
    if (failed !== undefined) {
      if (fd === 1) write(io, 2, `sh: write error: ${failed}\n`)
      return false
    }
  }
  return true
}

