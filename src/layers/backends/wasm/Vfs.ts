/**
 * The virtual filesystem of one WASM computer: an in-memory tree, the only filesystem its
 * processes ever see (no host path is reachable: nothing here touches the host).
 *
 * Paths resolve inside the tree: `..` stops at `/`. Symbolic links are kept as nodes and followed
 * here; a process (worker) sees a link as a second name of its target (WASI in the shim has no
 * symlinks), so reading and writing through a link work, `readlink` does not.
 *
 * Each process gets a copy of the tree (structured clone) and sends back what it changed
 * (`Change`s), applied here path by path: concurrent processes do not see each other's writes
 * until they end, and the last writer of a path wins.
 */

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

export const dir = (): VDir => ({ kind: "dir", entries: new Map() })

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

const MAX_LINKS = 32

export class Vfs {
  constructor(public root: VDir) {}

  /** The node at `path` following links (the last one too unless `nofollow`). */
  lookup(cwd: string, path: string, nofollow = false): VNode | undefined {
    return this.walk(resolvePath(cwd, path), nofollow, 0)?.node
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
        const found = this.walk([...target, ...parts.slice(i + 1)], nofollow, depth + 1)
        return found
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

  /** Writes (or appends to) a file through links; fails (returns a reason) when it cannot. */
  writeFile(cwd: string, path: string, data: Uint8Array, append = false): string | undefined {
    const at = this.parentOf(cwd, path)
    if (at === undefined) return "No such file or directory"
    const existing = at.dir.entries.get(at.name)
    if (existing?.kind === "link") {
      const target = this.lookup(joinPath(at.parts.slice(0, -1)), existing.target)
      if (target?.kind === "dir") return "Is a directory"
      if (target?.kind === "file") {
        target.data = append ? concat(target.data, data) : data
        return undefined
      }
      return this.writeFile(joinPath(at.parts.slice(0, -1)), existing.target, data, append)
    }
    if (existing?.kind === "dir") return "Is a directory"
    if (existing?.kind === "file") existing.data = append ? concat(existing.data, data) : data
    else at.dir.entries.set(at.name, { kind: "file", data })
    return undefined
  }

  mkdirp(cwd: string, path: string): boolean {
    let node: VDir = this.root
    const seen: Array<string> = []
    for (const part of resolvePath(cwd, path)) {
      const next = node.entries.get(part)
      if (next === undefined) {
        const created = dir()
        node.entries.set(part, created)
        node = created
      } else if (next.kind === "dir") node = next
      else if (next.kind === "link") {
        const target = this.lookup(joinPath(seen), next.target)
        if (target?.kind !== "dir") return false
        node = target
      } else return false
      seen.push(part)
    }
    return true
  }

  symlink(cwd: string, target: string, path: string): string | undefined {
    const at = this.parentOf(cwd, path)
    if (at === undefined) return "No such file or directory"
    if (at.dir.entries.get(at.name)?.kind === "dir") return "Is a directory"
    at.dir.entries.set(at.name, { kind: "link", target })
    return undefined
  }

  remove(cwd: string, path: string) {
    const at = this.parentOf(cwd, path)
    at?.dir.entries.delete(at.name)
  }

  /** Applies what a process changed (paths are absolute, as the process saw them). */
  apply(changes: ReadonlyArray<Change>) {
    for (const change of changes) {
      if (change.op === "rm") {
        // Removing a name: the link itself, never its target.
        const at = this.parentOf("/", change.path)
        at?.dir.entries.delete(at.name)
      } else if (change.op === "mkdir") this.mkdirp("/", change.path)
      else {
        const at = this.parentOf("/", change.path)
        if (at === undefined) {
          this.mkdirp("/", change.path.slice(0, change.path.lastIndexOf("/")) || "/")
        }
        this.writeFile("/", change.path, change.data)
      }
    }
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

  /** A deep copy (for factory images). */
  static clone(node: VDir): VDir {
    return structuredClone(node)
  }

  /** Total bytes of file contents (for reporting). */
  size(): number {
    let total = 0
    const visit = (node: VNode) => {
      if (node.kind === "file") total += node.data.byteLength
      else if (node.kind === "dir") node.entries.forEach(visit)
    }
    visit(this.root)
    return total
  }
}

export const concat = (a: Uint8Array, b: Uint8Array): Uint8Array => {
  if (a.byteLength === 0) return b
  const out = new Uint8Array(a.byteLength + b.byteLength)
  out.set(a, 0)
  out.set(b, a.byteLength)
  return out
}

// --- snapshots (permanent computers) ----------------------------------------------------------------

type Serialized =
  | { readonly d: Record<string, Serialized> }
  | { readonly f: string }
  | { readonly l: string }

export const serialize = (node: VNode): Serialized => {
  if (node.kind === "file") return { f: Buffer.from(node.data.buffer, node.data.byteOffset, node.data.byteLength).toString("base64") }
  if (node.kind === "link") return { l: node.target }
  const d: Record<string, Serialized> = {}
  for (const [name, child] of node.entries) d[name] = serialize(child)
  return { d }
}

export const deserialize = (value: unknown): VNode => {
  if (typeof value !== "object" || value === null) throw new Error("invalid snapshot")
  if ("f" in value && typeof value.f === "string") return { kind: "file", data: new Uint8Array(Buffer.from(value.f, "base64")) }
  if ("l" in value && typeof value.l === "string") return { kind: "link", target: value.l }
  if ("d" in value && typeof value.d === "object" && value.d !== null) {
    const out = dir()
    for (const [name, child] of Object.entries(value.d)) out.entries.set(name, deserialize(child))
    return out
  }
  throw new Error("invalid snapshot")
}
