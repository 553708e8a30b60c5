/**
 * The computer id of a warm pool's container once it is handed out. A container's labels cannot
 * change after creation and a rename is serialised by the engine (ten hand-outs at once waited on
 * each other's renames: 70–150 ms each), so a handed-out container keeps its pool name and labels
 * and its real id is recorded in the state directory instead: one empty file
 * `<stateDir>/pool-ids/<container id>.<computer id>`, made with O_EXCL (there whole or not at all).
 * Keyed by the container's id, which no other container on any engine has, so Docker and Podman
 * sharing a state directory never read each other's records. `find` reads the directory once per
 * listing; `remove` deletes the record; a record whose container is gone is pruned by a later
 * listing.
 *
 * The calls are synchronous: creating an empty file or reading a directory of a few names takes
 * microseconds on a local disk, while a hop through libuv's four-thread pool waited behind the
 * other hand-outs' hops (8–20 ms each under load, ten at once).
 */
import * as Effect from "effect/Effect"
import { mkdirSync, readdirSync, statSync, unlinkSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { computerIdPattern } from "../../../domain/ComputerIds.js"
import { type ProviderError, providerError } from "../../../domain/Errors.js"

export interface PoolIds {
  /** Records that the container `containerId` is now the computer `id`. */
  readonly record: (containerId: string, id: string) => Effect.Effect<void, ProviderError>
  /** Every record: container id → computer id. */
  readonly read: Effect.Effect<ReadonlyMap<string, string>, ProviderError>
  /** Deletes the record of a container, if any. */
  readonly forget: (containerId: string, id: string) => Effect.Effect<void>
  /**
   * Deletes the records of containers that are not in `live`, a listing of every container of ours
   * that started at `listedAt` (ms since the epoch): only records made before it (their container
   * existed then, so it is gone now).
   */
  readonly prune: (records: ReadonlyMap<string, string>, live: ReadonlySet<string>, listedAt: number) => Effect.Effect<void>
}

const containerIdPattern = /^[0-9a-f]{12,128}$/

/** A record's file name as (container id, computer id), or undefined for anything else. */
export const parseName = (name: string): readonly [string, string] | undefined => {
  const dot = name.indexOf(".")
  if (dot < 0) return undefined
  const containerId = name.slice(0, dot)
  const id = name.slice(dot + 1)
  return containerIdPattern.test(containerId) && computerIdPattern.test(id) ? [containerId, id] : undefined
}

const code = (error: unknown) => (error as NodeJS.ErrnoException).code

export const make = (stateDir: string, backend: string): PoolIds => {
  const dir = join(stateDir, "pool-ids")
  const file = (containerId: string, id: string) => join(dir, `${containerId}.${id}`)
  const failed = (operation: string) => (error: unknown) => providerError(backend, operation, "Failed", String(error), error)
  let made = false

  const record = (containerId: string, id: string) =>
    Effect.try({
      try: () => {
        if (!made) mkdirSync(dir, { recursive: true, mode: 0o700 })
        made = true
        writeFileSync(file(containerId, id), "", { flag: "wx", mode: 0o600 })
      },
      catch: failed(`record the computer id ${id}`)
    })

  const read = Effect.try({
    try: () => {
      const records = new Map<string, string>()
      let names: Array<string> = []
      try {
        names = readdirSync(dir)
      } catch (error) {
        if (code(error) !== "ENOENT") throw error
      }
      for (const name of names) {
        const parsed = parseName(name)
        if (parsed !== undefined) records.set(parsed[0], parsed[1])
      }
      return records as ReadonlyMap<string, string>
    },
    catch: failed("read the warm pool's computer ids")
  })

  const unlink = (path: string) => {
    try {
      unlinkSync(path)
    } catch {
      // Gone already.
    }
  }

  const forget = (containerId: string, id: string) => Effect.sync(() => unlink(file(containerId, id)))

  const prune = (records: ReadonlyMap<string, string>, live: ReadonlySet<string>, listedAt: number) =>
    Effect.sync(() => {
      for (const [containerId, id] of records) {
        if (live.has(containerId)) continue
        const path = file(containerId, id)
        let mtime: number | undefined
        try {
          mtime = statSync(path, { throwIfNoEntry: false })?.mtimeMs
        } catch {
          // Unreadable: left alone.
        }
        if (mtime !== undefined && mtime < listedAt - 1000) unlink(path)
      }
    })

  return { record, read, forget, prune }
}
