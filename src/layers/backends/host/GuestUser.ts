/**
 * Who a host computer's processes are.
 *
 * Inside the sandbox they are always `agent` (uid 1000, gid 1000, home /home/agent), in a user
 * namespace of their own, whoever runs the server. On the host that uid is:
 * - when the server is root: a **dedicated unprivileged uid/gid per computer**, drawn at random
 *   from [UID_BASE, UID_BASE + UID_COUNT) (0x70000000 + 16 Mi: a block systemd leaves unassigned,
 *   above the container ranges and below 2^31), recorded in computer.json so a permanent computer
 *   keeps it, and owning the computer's workspace. Host root-owned files, root's keyrings and
 *   the host's /proc/sys are then out of reach by construction, and RLIMIT/keyring accounting is
 *   per computer;
 * - when the server is not root: the server's own uid (bubblewrap cannot map another one).
 * uid and gid 0 inside are not mapped: files of the host's root show as `nobody` (65534).
 */
import * as Effect from "effect/Effect"
import * as Random from "effect/Random"
import { readFileSync } from "node:fs"
import { lchown, lstat, readdir } from "node:fs/promises"
import { join } from "node:path"
import { type ProviderError, providerError } from "../../../domain/Errors.js"

const NAME = "host"

/** The user every process of a host computer is, inside its sandbox. */
export const GUEST = { uid: 1000, gid: 1000, name: "agent", home: "/home/agent", shell: "/bin/bash" } as const

/** First host uid (and gid) given to computers when the server is root. */
export const UID_BASE = 0x7000_0000
/** How many host uids the computers' range holds. */
export const UID_COUNT = 1 << 24

/** The host uid and gid a computer's sandbox runs as. */
export interface HostIds {
  readonly uid: number
  readonly gid: number
}

/** True when this server runs as root, so each computer gets a dedicated unprivileged uid. */
export const serverIsRoot = (): boolean => process.getuid?.() === 0

/** `/etc/passwd` as the guest sees it. */
export const passwd = (): string =>
  [
    "root:x:0:0:root:/root:/usr/sbin/nologin",
    `${GUEST.name}:x:${GUEST.uid}:${GUEST.gid}:${GUEST.name}:${GUEST.home}:${GUEST.shell}`,
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"
  ].join("\n") + "\n"

/** `/etc/group` as the guest sees it. */
export const group = (): string => ["root:x:0:", `${GUEST.name}:x:${GUEST.gid}:`, "nogroup:x:65534:"].join("\n") + "\n"

interface Extent {
  readonly inside: number
  readonly count: number
}

const mapped = (file: string): ReadonlyArray<Extent> => {
  try {
    return readFileSync(file, "utf8").trim().split("\n").map((line) => {
      const [inside, , count] = line.trim().split(/\s+/).map(Number)
      return { inside: inside ?? 0, count: count ?? 0 }
    })
  } catch {
    return [{ inside: 0, count: 2 ** 32 - 1 }]
  }
}

const covers = (extents: ReadonlyArray<Extent>, from: number, count: number) =>
  extents.some((e) => e.inside <= from && from + count <= e.inside + e.count)

/**
 * The range to draw computers' uids from: [UID_BASE, +UID_COUNT) when this user namespace maps it
 * (always on a host), else the upper half of the largest mapped block above 65535 (a root server
 * inside a rootless container).
 */
export const uidRange = (): Effect.Effect<{ readonly first: number; readonly count: number }, ProviderError> =>
  Effect.suspend(() => {
    const uids = mapped("/proc/self/uid_map")
    const gids = mapped("/proc/self/gid_map")
    if (covers(uids, UID_BASE, UID_COUNT) && covers(gids, UID_BASE, UID_COUNT)) {
      return Effect.succeed({ first: UID_BASE, count: UID_COUNT })
    }
    const blocks = uids
      .map((e) => ({ first: Math.max(e.inside, 65536), end: e.inside + e.count }))
      .filter((b) => b.end - b.first >= 64 && covers(gids, b.first, b.end - b.first))
      .sort((a, b) => (b.end - b.first) - (a.end - a.first))
    const block = blocks[0]
    if (block === undefined) {
      return Effect.fail(providerError(
        NAME,
        "give computers their own uids",
        "Unavailable",
        "this server runs as root but its user namespace maps no block of unprivileged uids to give computers " +
          "(see /proc/self/uid_map); run it as an ordinary user, or map more uids into its container"
      ))
    }
    const half = Math.floor((block.end - block.first) / 2)
    return Effect.succeed({ first: block.end - half, count: half })
  })

/** Uids and gids the host's own /etc/passwd and /etc/group give out: never handed to a computer. */
const hostAccounts = (): ReadonlySet<number> => {
  const ids = new Set<number>()
  for (const file of ["/etc/passwd", "/etc/group"]) {
    try {
      for (const line of readFileSync(file, "utf8").split("\n")) {
        const id = Number(line.split(":")[2])
        if (Number.isInteger(id)) ids.add(id)
      }
    } catch {
      // no such file here
    }
  }
  return ids
}

/** Draws a host uid (= gid) for a new computer, avoiding `taken` (other computers) and host accounts. */
export const allocate = (range: { readonly first: number; readonly count: number }, taken: ReadonlySet<number>) =>
  Effect.gen(function*() {
    const accounts = hostAccounts()
    for (let attempt = 0; attempt < 64; attempt++) {
      const id = range.first + (yield* Random.nextIntBetween(1, range.count))
      if (!taken.has(id) && !accounts.has(id)) return { uid: id, gid: id } satisfies HostIds
    }
    return yield* providerError(NAME, "give the computer a uid", "Quota", `no free uid in ${range.first}..${range.first + range.count - 1}`)
  })

/** Gives the tree at `path` to `ids` (symlinks themselves, never their targets). Stops at other mounts. */
export const chownTree = (path: string, ids: HostIds) =>
  Effect.tryPromise({
    try: async () => {
      const root = await lstat(path)
      const walk = async (at: string): Promise<void> => {
        const stat = await lstat(at)
        if (stat.dev !== root.dev) return
        if (stat.uid !== ids.uid || stat.gid !== ids.gid) await lchown(at, ids.uid, ids.gid)
        if (!stat.isDirectory()) return
        for (const entry of await readdir(at)) await walk(join(at, entry))
      }
      await walk(path)
    },
    catch: (error) => providerError(NAME, `give ${path} to uid ${ids.uid}`, "Failed", String(error), error)
  })
