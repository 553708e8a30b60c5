/**
 * The virtual filesystem of one WASM computer: an in-memory tree, the only filesystem its
 * processes ever see (no host path is reachable: nothing here touches the host).
 *
 * Paths resolve inside the tree: `..` stops at `/`. Symbolic links are kept as nodes and followed
 * here; a process (worker) sees a link as a second name of its target (WASI in the shim has no
 * symlinks), so reading and writing through a link work, `readlink` does not.
 *
 * File contents live in SharedArrayBuffers and are never changed in place: a writer makes a new
 * buffer. So a tree is passed to a worker by cloning its directories only; the bytes are shared.
 * The same class is the computer's tree in the server (ComputerFs.ts) and its copy in a shell
 * worker (FsReplica.ts). Each process sends back what it changed (`Change`s), applied here path
 * by path: the last writer of a path wins.
 *
 * Usage (for the disk quota, Quota.ts) is the file contents plus `INODE_BYTES` per name.
 */
import { INODE_BYTES } from "./Quota.js"

export interface VFile {
  readonly kind: "file"
  data: Uint8Array
}
export interface VDir {
  readonly kind: "dir"
  readonly entries: Map<string, VNode>
}
export interface VLink {
  readonly kind: "link"
  readonly target: string
}
export type VNode = VFile | VDir | VLink

export type Change =
  | { readonly op: "rm"; readonly path: string }
  | { readonly op: "mkdir"; readonly path: string }
  | { readonly op: "write"; readonly path: string; readonly data: Uint8Array }
  | { readonly op: "link"; readonly path: string; readonly target: string }

export const dir = (): VDir => ({ kind: "dir", entries: new Map() })

const EMPTY = new Uint8Array(new SharedArrayBuffer(0))

/** The bytes in a SharedArrayBuffer (copied unless they already are). */
export const shared = (bytes: Uint8Array): Uint8Array => {
  if (bytes.buffer instanceof SharedArrayBuffer) return bytes
  if (bytes.byteLength === 0) return EMPTY
  const out = new Uint8Array(new SharedArrayBuffer(bytes.byteLength))
  out.set(bytes)
  return out
}

/** Splits an absolute or relative path against `cwd` into components, `..` clamped at `/`. */
export const resolvePath = (cwd: string, path: string): Array<string> => {
  const parts: Array<string> = []
  const all = path.startsWith("/") ? path : `${cwd}/${path}`
  for (const part of all.split("/")) {
    if (part === "" || part === ".") continue
    if (part === "..") parts.pop()
    else parts.push(part)
  }
  return parts
}

export const joinPath = (parts: ReadonlyArray<string>) => "/" + parts.join("/")

/** What a node costs against the quota: its contents and one inode per name below it. */
export const usageOf = (node: VNode): number => {
  if (node.kind === "file") return INODE_BYTES + node.data.byteLength
  if (node.kind === "link") return INODE_BYTES
  let total = INODE_BYTES
  for (const child of node.entries.values()) total += usageOf(child)
  return total
}

const MAX_LINKS = 32

/** Why a write failed, as the shell prints it. */
export type FsError = "No such file or directory" | "Is a directory" | "Not a directory"

export class Vfs {
  constructor(public root: VDir) {}

  /** The node at `path` following links (the last one too unless `nofollow`). */
  lookup(cwd: string, path: string, nofollow = false): VNode | undefined {
    return this.walk(resolvePath(cwd, path), nofollow, 0)?.node
  }

  /** The node at `path` and its real path (links resolved). */
  resolve(cwd: string, path: string): { node: VNode; path: string } | undefined {
    const found = this.walk(resolvePath(cwd, path), false, 0)
    return found === undefined ? undefined : { node: found.node, path: joinPath(found.parts) }
  }

  private walk(parts: ReadonlyArray<string>, nofollow: boolean, depth: number): { node: VNode; parts: Array<string> } | undefined {
    if (depth > MAX_LINKS) return undefined
    let node: VNode = this.root
    const seen: Array<string> = []
    for (let i = 0; i < parts.length; i++) {
      if (node.kind !== "dir") return undefined
      const next: VNode | undefined = node.entries.get(parts[i]!)
      if (next === undefined) return undefined
      if (next.kind === "link" && (i < parts.length - 1 || !nofollow)) {
        const target = resolvePath(joinPath(seen), next.target)
        return this.walk([...target, ...parts.slice(i + 1)], nofollow, depth + 1)
      }
      seen.push(parts[i]!)
      node = next
    }
    return { node, parts: seen }
  }

  /** The directory holding `path` and the entry's name (the parent's links followed). */
  parentOf(cwd: string, path: string): { dir: VDir; name: string; parts: Array<string> } | undefined {
    const parts = resolvePath(cwd, path)
    const name = parts.pop()
    if (name === undefined) return undefined
    const parent = this.walk(parts, false, 0)
    if (parent === undefined || parent.node.kind !== "dir") return undefined
    return { dir: parent.node, name, parts: [...parent.parts, name] }
  }

  isDir(cwd: string, path: string) {
    return this.lookup(cwd, path)?.kind === "dir"
  }

  readFile(cwd: string, path: string): Uint8Array | undefined {
    const node = this.lookup(cwd, path)
    return node?.kind === "file" ? node.data : undefined
  }

  /** Replaces a file's contents through links: the change in usage, or why it cannot. */
  writeFile(cwd: string, path: string, data: Uint8Array, depth = 0): number | FsError {
    const at = this.parentOf(cwd, path)
    if (at === undefined) return "No such file or directory"
    const existing = at.dir.entries.get(at.name)
    if (existing?.kind === "link") {
      if (depth > MAX_LINKS) return "No such file or directory"
      return this.writeFile(joinPath(at.parts.slice(0, -1)), existing.target, data, depth + 1)
    }
    if (existing?.kind === "dir") return "Is a directory"
    const bytes = shared(data)
    if (existing?.kind === "file") {
      const delta = bytes.byteLength - existing.data.byteLength
      existing.data = bytes
      return delta
    }
    at.dir.entries.set(at.name, { kind: "file", data: bytes })
    return INODE_BYTES + bytes.byteLength
  }

  /** Creates the directories of `path`: the change in usage, or undefined when a file is in the way. */
  mkdirp(cwd: string, path: string): number | undefined {
    let node: VDir = this.root
    const seen: Array<string> = []
    let created = 0
    for (const part of resolvePath(cwd, path)) {
      const next = node.entries.get(part)
      if (next === undefined) {
        const made = dir()
        node.entries.set(part, made)
        node = made
        created++
      } else if (next.kind === "dir") node = next
      else if (next.kind === "link") {
        const target = this.lookup(joinPath(seen), next.target)
        if (target?.kind !== "dir") return created === 0 ? undefined : created * INODE_BYTES
        node = target
      } else return created === 0 ? undefined : created * INODE_BYTES
      seen.push(part)
    }
    return created * INODE_BYTES
  }

  /** Makes `path` a symbolic link: the change in usage, or why it cannot. */
  symlink(cwd: string, target: string, path: string): number | FsError {
    const at = this.parentOf(cwd, path)
    if (at === undefined) return "No such file or directory"
    const existing = at.dir.entries.get(at.name)
    if (existing?.kind === "dir") return "Is a directory"
    at.dir.entries.set(at.name, { kind: "link", target })
    return INODE_BYTES - (existing === undefined ? 0 : usageOf(existing))
  }

  /** Removes a name (a link itself, never its target): the change in usage. */
  remove(cwd: string, path: string): number {
    const at = this.parentOf(cwd, path)
    const node = at?.dir.entries.get(at.name)
    if (at === undefined || node === undefined) return 0
    at.dir.entries.delete(at.name)
    return -usageOf(node)
  }

  /** Applies what a process changed (paths are absolute, as the process saw them): the change in usage. */
  apply(changes: ReadonlyArray<Change>): number {
    let delta = 0
    const count = (result: number | string | undefined) => {
      if (typeof result === "number") delta += result
    }
    for (const change of changes) {
      switch (change.op) {
        case "rm":
          delta += this.remove("/", change.path)
          break
        case "mkdir":
          count(this.mkdirp("/", change.path))
          break
        case "link":
          count(this.symlink("/", change.target, change.path))
          break
        case "write": {
          if (this.parentOf("/", change.path) === undefined) {
            count(this.mkdirp("/", change.path.slice(0, change.path.lastIndexOf("/")) || "/"))
          }
          count(this.writeFile("/", change.path, change.data))
        }
      }
    }
    return delta
  }

  /**
   * The tree a process sees: links replaced by their targets (the same object, so both names are
   * one file), except links to a directory that contains them (a cycle) and dangling ones.
   */
  view(): VDir {
    const copy = (node: VDir, parts: Array<string>, ancestors: Set<VNode>): VDir => {
      const out = dir()
      ancestors.add(node)
      for (const [name, child] of node.entries) {
        let target: VNode | undefined = child
        if (child.kind === "link") target = this.lookup(joinPath(parts), name)
        if (target === undefined || target.kind === "link") continue
        if (target.kind === "dir") {
          if (ancestors.has(target)) continue
          out.entries.set(name, copy(target, [...parts, name], ancestors))
        } else out.entries.set(name, target)
      }
      ancestors.delete(node)
      return out
    }
    return copy(this.root, [], new Set())
  }

  /** The quota usage of the whole tree (the root itself is free). */
  usage(): number {
    return usageOf(this.root) - INODE_BYTES
  }
}
