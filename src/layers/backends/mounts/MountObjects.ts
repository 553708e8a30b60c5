/**
 * The user's mount sources and deny targets as objects, not names: each path of the policy (made
 * canonical at startup by `cli/MountChecks.ts`, where only the operator's own symlinks are
 * followed) is opened once, when a backend starts, component by component with `O_PATH|O_NOFOLLOW`,
 * and the descriptor is held until the backend ends. Everything later — binding a mount, hiding a
 * denied path — works from these descriptors (`MountTemplates.ts`, `EngineMounts.ts`), so that
 * nothing a computer writes in a shared directory (a symlink, a rename) changes what they refer to.
 *
 * The sources that are not inside another source are the *roots*: every mount is a subtree of a
 * root, and every deny target inside a mount belongs to the root that contains it.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { closeSync, constants, fstatSync, openSync, readlinkSync } from "node:fs"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import * as Mounts from "../../../domain/Mounts.js"
import * as DenyRecords from "./DenyRecords.js"

/** `O_PATH` (Linux): a descriptor that names an object without opening it for reading. */
export const O_PATH = 0o10000000

/** A host object held since the backend started. */
export interface HeldObject {
  /** The canonical path it had when it was opened (the operator's name for it). */
  readonly path: string
  readonly fd: number
  readonly dev: bigint
  readonly ino: bigint
  readonly directory: boolean
}

/** A --mount (or SANDBOX_ALLOW_WRITE) with its source held; `root` indexes `MountObjects.roots`. */
export interface HeldMount {
  readonly mount: Mounts.Mount
  readonly object: HeldObject
  readonly root: number
}

/** A --deny-read/--deny-write target inside a mount, held; `root` indexes `MountObjects.roots`. */
export interface HeldDeny {
  readonly write: boolean
  readonly object: HeldObject
  readonly root: number
}

export interface MountObjects {
  readonly roots: ReadonlyArray<HeldObject>
  readonly mounts: ReadonlyArray<HeldMount>
  /** Deny-write targets first, then deny-read ones, deepest first (a mask must not hide a later target). */
  readonly denies: ReadonlyArray<HeldDeny>
}

/** How the operator names a mount in messages. */
export const mountLabel = (mount: Mounts.Mount) => `--mount ${mount.source}:${mount.target}${mount.readOnly ? ":ro" : ""}`
export const denyLabel = (deny: { readonly write: boolean; readonly object: HeldObject }) =>
  `${deny.write ? "--deny-write" : "--deny-read"} ${deny.object.path}`

/**
 * Opens `path` without following any symlink in it: each component is looked up in the directory
 * held for the previous one (through its /proc/self/fd link, as openat would). A symlink anywhere is
 * refused, naming where it is.
 */
export const openNoFollow = (
  path: string
): { readonly object: HeldObject } | { readonly problem: string; readonly missing: boolean } => {
  let fd = openSync("/", O_PATH)
  let at = ""
  try {
    for (const part of Mounts.clean(path).split("/").filter((name) => name !== "")) {
      if (part === "..") return { problem: `${path} has '..' in it`, missing: false }
      at = `${at}/${part}`
      let next: number
      try {
        next = openSync(`/proc/self/fd/${fd}/${part}`, O_PATH | constants.O_NOFOLLOW)
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code
        return { problem: code === "ENOENT" ? `${at} does not exist` : `${at} cannot be opened (${code})`, missing: code === "ENOENT" }
      }
      closeSync(fd)
      fd = next
      if (fstatSync(fd).isSymbolicLink()) return { problem: `${at} is a symbolic link`, missing: false }
    }
    const stat = fstatSync(fd, { bigint: true })
    const object = { path: Mounts.clean(path), fd, dev: stat.dev, ino: stat.ino, directory: stat.isDirectory() }
    fd = -1
    return { object }
  } finally {
    if (fd >= 0) closeSync(fd)
  }
}

/** Where the held object is now (it follows renames), or undefined when it was removed or has no path. */
export const currentPath = (object: HeldObject): string | undefined => {
  try {
    if (fstatSync(object.fd).nlink === 0) return undefined
    const path = readlinkSync(`/proc/self/fd/${object.fd}`)
    return path.startsWith("/") ? path : undefined
  } catch {
    return undefined
  }
}

/** Whether the held object still has a name on its filesystem. */
export const present = (object: HeldObject): boolean => {
  try {
    return fstatSync(object.fd).nlink > 0
  } catch {
    return false
  }
}

const depth = (path: string) => path.split("/").length

/**
 * Opens the policy's host mounts and deny targets for as long as the Scope lasts. A mount source
 * that cannot be opened without following a symlink fails the backend; a deny target that cannot
 * (missing, or a symlink where a computer could have made one) protects nothing and is said on
 * stderr. With a state directory a deny rule also holds the objects it held at the server's last
 * start, wherever below their mount they are now (DenyRecords.ts), and records what it holds.
 */
export const hold = (
  policy: Mounts.FilesystemPolicy,
  backend: string,
  stateDir?: string
): Effect.Effect<MountObjects, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const held: Array<HeldObject> = []
    yield* Effect.addFinalizer(() => Effect.sync(() => held.forEach((object) => closeSync(object.fd))))
    const open = (path: string) => {
      const result = openNoFollow(path)
      if ("object" in result) held.push(result.object)
      return result
    }
    const hostMounts = policy.mounts.filter((mount) => !mount.volume)
    const rootPaths = [...new Set(hostMounts.map((mount) => mount.source))].filter((source) =>
      !hostMounts.some((other) => other.source !== source && Mounts.within(source, other.source))
    )
    const roots: Array<HeldObject> = []
    for (const path of rootPaths) {
      const opened = open(path)
      if ("problem" in opened) {
        const mount = hostMounts.find((m) => m.source === path)!
        return yield* providerError(backend, "open the mounts", "Invalid", `${mountLabel(mount)}: ${opened.problem}`)
      }
      roots.push(opened.object)
    }
    const rootOf = (path: string) => rootPaths.findIndex((root) => Mounts.within(path, root))
    const mounts: Array<HeldMount> = []
    for (const mount of hostMounts) {
      const root = rootOf(mount.source)
      const opened = mount.source === rootPaths[root] ? { object: roots[root]! } : open(mount.source)
      if ("problem" in opened) return yield* providerError(backend, "open the mounts", "Invalid", `${mountLabel(mount)}: ${opened.problem}`)
      mounts.push({ mount, object: opened.object, root })
    }
    const denies: Array<HeldDeny> = []
    const before = stateDir === undefined ? {} : DenyRecords.read(stateDir)
    const records: Record<string, ReadonlyArray<DenyRecords.Identity>> = {}
    const targets = [
      ...policy.denyWrite.map((path) => ({ path, write: true })),
      ...policy.denyRead.map((path) => ({ path, write: false }))
    ]
    for (const { path, write } of targets) {
      const root = rootOf(path)
      if (root < 0) continue
      const label = `${write ? "--deny-write" : "--deny-read"} ${path}`
      const holding: Array<HeldObject> = []
      const opened = open(path)
      if ("object" in opened) holding.push(opened.object)
      // A missing target was already said at startup (cli/MountChecks.ts).
      else if (!opened.missing) yield* Effect.logWarning(`${label}: ${opened.problem}; nothing at that path is hidden`)
      const recorded = before[DenyRecords.key(write, path)] ?? []
      const moved = recorded.filter((id) => !holding.some((object) => DenyRecords.same(DenyRecords.identity(object), id)))
      const rootObject = roots[root]!
      for (const found of moved.length === 0 ? [] : DenyRecords.find(rootObject.fd, rootObject.path, rootObject.dev, moved)) {
        const again = open(found)
        if (!("object" in again)) continue
        if (!moved.some((id) => DenyRecords.same(DenyRecords.identity(again.object), id))) continue
        holding.push(again.object)
        yield* Effect.logInfo(`${label}: what it hid at the last start is now at ${found}: still hidden there`)
      }
      for (const object of holding) denies.push({ write, object, root })
      records[DenyRecords.key(write, path)] = DenyRecords.merge(holding.map(DenyRecords.identity), recorded)
    }
    // Deny-write first, then deny-read deepest first: a mask must not hide a later target.
    denies.sort((a, b) => a.write !== b.write ? (a.write ? -1 : 1) : a.write ? 0 : depth(b.object.path) - depth(a.object.path))
    if (stateDir !== undefined && targets.length > 0) {
      const failed = DenyRecords.write(stateDir, records)
      if (failed !== undefined) yield* Effect.logWarning(`cannot record the deny rules' objects in ${stateDir}: ${failed.message}; a restart finds them by path only`)
    }
    return { roots, mounts, denies }
  })
