/**
 * Deny rules across server restarts (issue 19, item 2). The objects a `--deny-read`/`--deny-write`
 * rule held are recorded in the state directory by identity (device and inode). At the next start
 * the rule covers the object now at its path *and* each recorded one, found again below its mount
 * wherever a computer moved it — so renaming a denied file's parent before the server restarts does
 * not undo the rule. The search is a walk of the mount that follows no symlink (it compares
 * identities only; what it finds is opened again without following anything and checked), bounded.
 */
import { lstatSync, readdirSync, readFileSync, renameSync, writeFileSync } from "node:fs"
import { join } from "node:path"

const FILE = "deny-objects.json"
/** Entries a search looks at before it gives up (a mount of millions of files is not walked whole). */
export const MAX_ENTRIES = 200_000
/** Identities kept per rule (the object at its path each start, and the ones moved away). */
const MAX_PER_RULE = 8

export interface Identity {
  readonly dev: string
  readonly ino: string
}

/** Rules by `key`, each with the identities of the objects it held. */
export type Records = Readonly<Record<string, ReadonlyArray<Identity>>>

export const key = (write: boolean, path: string) => `${write ? "deny-write" : "deny-read"} ${path}`
export const identity = (object: { readonly dev: bigint; readonly ino: bigint }): Identity => ({ dev: String(object.dev), ino: String(object.ino) })
export const same = (a: Identity, b: Identity) => a.dev === b.dev && a.ino === b.ino

const isIdentity = (value: unknown): value is Identity =>
  typeof value === "object" && value !== null && typeof (value as Identity).dev === "string" && typeof (value as Identity).ino === "string"

/** The records of the last start; none when there are none or they cannot be read. */
export const read = (stateDir: string): Records => {
  try {
    const parsed = JSON.parse(readFileSync(join(stateDir, FILE), "utf8")) as unknown
    if (typeof parsed !== "object" || parsed === null) return {}
    const records: Record<string, ReadonlyArray<Identity>> = {}
    for (const [rule, ids] of Object.entries(parsed)) {
      if (Array.isArray(ids)) records[rule] = ids.filter(isIdentity).slice(0, MAX_PER_RULE)
    }
    return records
  } catch {
    return {}
  }
}

/** Writes the records (0600, replaced whole); an Error when it cannot. */
export const write = (stateDir: string, records: Records): Error | undefined => {
  const path = join(stateDir, FILE)
  const temporary = `${path}.${process.pid}`
  try {
    const trimmed = Object.fromEntries(Object.entries(records).map(([rule, ids]) => [rule, ids.slice(0, MAX_PER_RULE)]))
    writeFileSync(temporary, `${JSON.stringify(trimmed)}\n`, { mode: 0o600, flag: "w" })
    renameSync(temporary, path)
    return undefined
  } catch (error) {
    return error as Error
  }
}

/**
 * Where below `rootPath` (reached through the held descriptor `rootFd`) the objects `wanted` are
 * now: the path of each one found, in the order found. Directories are entered only when the
 * directory entry says it is one (never a symlink), on the root's device only.
 */
export const find = (rootFd: number, rootPath: string, rootDev: bigint, wanted: ReadonlyArray<Identity>): Array<string> => {
  const found: Array<string> = []
  const left = [...wanted]
  // Breadth first: the directories still to read, from `next` on.
  const queue: Array<string> = [""]
  let next = 0
  let seen = 0
  while (next < queue.length && left.length > 0 && seen < MAX_ENTRIES) {
    const relative = queue[next++]!
    let entries
    try {
      entries = readdirSync(`/proc/self/fd/${rootFd}/${relative}`, { withFileTypes: true })
    } catch {
      continue
    }
    for (const entry of entries) {
      if (++seen > MAX_ENTRIES) break
      const child = relative === "" ? entry.name : `${relative}/${entry.name}`
      let stat
      try {
        stat = lstatSync(`/proc/self/fd/${rootFd}/${child}`, { bigint: true })
      } catch {
        continue
      }
      if (stat.dev !== rootDev) continue
      const at = left.findIndex((id) => same(id, identity(stat)))
      if (at >= 0) {
        left.splice(at, 1)
        found.push(join(rootPath, child))
      }
      if (entry.isDirectory() && stat.isDirectory()) queue.push(child)
    }
  }
  return found
}

/** The records to keep for a rule: the identities it holds now first, then the older ones, bounded. */
export const merge = (holding: ReadonlyArray<Identity>, before: ReadonlyArray<Identity>): Array<Identity> =>
  [...holding, ...before.filter((id) => !holding.some((one) => same(one, id)))].slice(0, MAX_PER_RULE)
