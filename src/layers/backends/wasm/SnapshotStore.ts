/**
 * Where permanent WASM computers are kept between servers: `<stateDir>/wasm-computers/<id>.json`
 * (the format is Snapshot.ts). Saves are chained, so a later one never lands before an earlier
 * one, and a removal waits for the saves before it.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { mkdir, readdir, readFile, rm, stat } from "node:fs/promises"
import { join, resolve } from "node:path"
import { computerIdPattern } from "../../../domain/ComputerIds.js"
import { providerError } from "../../../domain/Errors.js"
import { parseSnapshot, readHeader, type SnapshotHeader, writeSnapshot } from "./Snapshot.js"
import type { VDir } from "./Vfs.js"

const errorCode = (error: unknown) => (error as { code?: unknown } | undefined)?.code

export const make = (backend: string, stateDir: string) => {
  const dir = resolve(stateDir, "wasm-computers")
  // Ids become file names: only the domain's slugs, never a path.
  const pathOf = (id: string) => (computerIdPattern.test(id) ? Option.some(join(dir, `${id}.json`)) : Option.none())
  let saving: Promise<unknown> = Promise.resolve()

  const failed = (operation: string) => (error: unknown) =>
    providerError(backend, operation, "Unavailable", String(error), error)

  /** Runs a file operation after the ones before it. */
  const chain = (operation: string, act: (path: string) => Promise<void>, id: string) =>
    Effect.suspend(() => {
      const path = Option.getOrUndefined(pathOf(id))
      const next = saving.then(() => (path === undefined ? undefined : act(path)))
      saving = next.catch(() => undefined)
      return Effect.tryPromise({ try: () => next, catch: failed(operation) })
    })

  /** The header of one computer's snapshot: none when there is no snapshot, or it is damaged. */
  const header = (id: string) =>
    Option.match(pathOf(id), {
      onNone: () => Effect.succeed(Option.none<SnapshotHeader>()),
      onSome: (path) =>
        Effect.tryPromise({
          try: () => readHeader(path).catch((error: unknown) => errorCode(error) === "ENOENT" ? Option.none<SnapshotHeader>() : Promise.reject(error)),
          catch: failed(`read the snapshot of computer ${id}`)
        }).pipe(Effect.map(Option.filter((found: SnapshotHeader) => found.id === id)))
    })

  /** Whether a snapshot of this id exists (damaged or not): its id is taken. */
  const exists = (id: string) =>
    Option.match(pathOf(id), {
      onNone: () => Effect.succeed(false),
      onSome: (path) =>
        Effect.tryPromise({
          try: () => stat(path).then(() => true, (error: unknown) => errorCode(error) === "ENOENT" ? false : Promise.reject(error)),
          catch: failed(`look for the snapshot of computer ${id}`)
        })
    })

  /** The ids that have snapshots. */
  const ids = Effect.tryPromise({
    try: () => readdir(dir).catch((error: unknown) => errorCode(error) === "ENOENT" ? [] : Promise.reject(error)),
    catch: failed("list the saved computers")
  }).pipe(Effect.map((files) => files.filter((file) => file.endsWith(".json")).map((file) => file.slice(0, -5)).filter((id) => computerIdPattern.test(id))))

  /** A computer's header and tree; fails NotFound when there is no snapshot, Failed when it is damaged. */
  const load = (id: string) =>
    Effect.gen(function*() {
      const path = Option.getOrUndefined(pathOf(id))
      const text = path === undefined ? undefined : yield* Effect.tryPromise({
        try: () => readFile(path, "utf8").catch((error: unknown) => errorCode(error) === "ENOENT" ? undefined : Promise.reject(error)),
        catch: failed(`read the snapshot of computer ${id}`)
      })
      if (text === undefined) return yield* providerError(backend, `open computer ${id}`, "NotFound", "it has no snapshot (it was deleted)")
      return yield* Option.match(parseSnapshot(text), {
        onNone: () => Effect.fail(providerError(backend, `open computer ${id}`, "Failed", `its snapshot (${id}.json in ${dir}) is damaged`)),
        onSome: Effect.succeed
      })
    })

  /**
   * Saves a tree when `take` still gives one once the earlier saves are done (it answers at that
   * moment, so a save never writes a state older than one already written).
   */
  const save = (id: string, take: () => { readonly header: SnapshotHeader; readonly root: VDir } | undefined) =>
    chain(`save computer ${id}`, async (path) => {
      const taken = take()
      if (taken === undefined) return
      await mkdir(dir, { recursive: true })
      await writeSnapshot(path, taken.header, taken.root)
    }, id)

  /** Removes a computer's snapshot, after the saves under way. */
  const remove = (id: string) => chain(`remove the snapshot of computer ${id}`, (path) => rm(path, { force: true }), id)

  return { header, exists, ids, load, save, remove } as const
}

export type SnapshotStore = ReturnType<typeof make>
