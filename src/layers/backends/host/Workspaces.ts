/**
 * The host backend's computers as the provider has them: one directory each under
 * `<stateDir>/computers/<id>` (0700), holding the record (ComputerRecord.ts) and the workspace
 * `home`. Finding, creating, renaming and removing computers are file operations here; running
 * them is HostBackend's `connect`.
 *
 * A computer is "running" while a live server holds it (is connected to it), else "stopped". A
 * server claims a computer for the life of its connection; another live server's claim is a
 * Conflict, so two servers never run one workspace at once.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import type * as Scope from "effect/Scope"
import { renameSync } from "node:fs"
import { chmod, lstat, mkdir, readdir, rm } from "node:fs/promises"
import { join } from "node:path"
import type { ComputerMetadata } from "../../../domain/ComputerMetadata.js"
import { computerIdPattern } from "../../../domain/ComputerIds.js"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import type { Instance, InstanceState, Query } from "../../../services/Backend.js"
import { ownerAlive } from "../../server/ProcessOwner.js"
import * as ComputerRecord from "./ComputerRecord.js"
import * as GuestUser from "./GuestUser.js"

const NAME = "host"

/** A record that has its key (every record this version writes). */
type Keyed = ComputerRecord.ComputerRecord & { readonly key: string }

/** A computer's directory and what its record says. */
export interface Workspace {
  readonly dir: string
  readonly home: string
  readonly record: Keyed
}

export interface WorkspacesOptions {
  readonly computersDir: string
  /** This backend as a holder: its process and a token of its own (two backends in one process differ). */
  readonly self: ComputerRecord.Holder
  /** The host ids of a computer when the server is root: those recorded, or new ones avoiding `taken`. */
  readonly hostIds: (
    recorded: GuestUser.HostIds | undefined,
    taken: ReadonlySet<number>
  ) => Effect.Effect<GuestUser.HostIds | undefined, ProviderError>
}

/** A new computer key: 12 random base-36 digits. */
const newKey = Effect.map(
  Effect.all(Array.from({ length: 12 }, () => Random.nextIntBetween(0, 36))),
  (digits) => digits.map((d) => d.toString(36)).join("")
)

const failed = (operation: string, error: unknown) => providerError(NAME, operation, "Failed", String(error), error)

const fs = <A>(operation: string, run: () => Promise<A>) => Effect.tryPromise({ try: run, catch: (error) => failed(operation, error) })

export const make = (options: WorkspacesOptions) => {
  const dirOf = (id: string) => join(options.computersDir, id)

  const names = Effect.promise(() =>
    readdir(options.computersDir, { withFileTypes: true }).then(
      (entries) => entries.filter((entry) => entry.isDirectory() && computerIdPattern.test(entry.name)).map((entry) => entry.name),
      () => [] as Array<string>
    )
  )

  /** The computers whose records are valid (a record names its own directory). */
  const all = (ids: Effect.Effect<ReadonlyArray<string>> = names) =>
    Effect.flatMap(ids, (found) =>
      Effect.forEach(found, (id) =>
        Effect.map(ComputerRecord.read(dirOf(id)), (record) =>
          Option.filter(record, (r) => r.metadata.id === id).pipe(Option.map((r) => ({ dir: dirOf(id), record: r }))))
      )).pipe(Effect.map((found) => found.flatMap(Option.toArray)))

  const heldElsewhere = (holder: ComputerRecord.Holder | undefined) =>
    holder !== undefined && holder.token !== options.self.token && ownerAlive(holder.pid, holder.start)

  const stateOf = (record: ComputerRecord.ComputerRecord): InstanceState =>
    record.holder !== undefined && (record.holder.token === options.self.token || ownerAlive(record.holder.pid, record.holder.start))
      ? "running"
      : "stopped"

  const instanceOf = (record: ComputerRecord.ComputerRecord, state: InstanceState = stateOf(record)): Instance => ({
    providerId: ComputerRecord.providerId(record),
    metadata: record.metadata,
    state
  })

  const find = (query: Query) =>
    all(query.id === undefined ? names : Effect.succeed(computerIdPattern.test(query.id) ? [query.id] : [])).pipe(
      Effect.map((found) =>
        found
          .filter(({ record }) => query.temporary === undefined || record.metadata.temporary === query.temporary)
          .map(({ record }) => instanceOf(record))
      )
    )

  /** The record of a found instance (a record of an older version is known by its id alone). */
  const matches = (record: ComputerRecord.ComputerRecord, instance: Instance) =>
    ComputerRecord.providerId(record) === instance.providerId || instance.providerId === `host-${record.metadata.id}`

  /** The computer's directory and record; `read` may be the synchronous reader (see `adopt`). */
  const locate = (instance: Instance, read: typeof ComputerRecord.read = ComputerRecord.read) =>
    Effect.gen(function*() {
      const dir = dirOf(instance.metadata.id)
      const record = yield* read(dir)
      if (Option.isNone(record) || !matches(record.value, instance)) {
        return yield* providerError(NAME, `find computer '${instance.metadata.id}'`, "NotFound", `${instance.providerId} is gone`)
      }
      return { dir, record: record.value }
    })

  /** Host uids of the other computers of this state directory. */
  const takenIds = (except: string) =>
    Effect.map(all(), (found) =>
      new Set(found.flatMap(({ record }) => (record.metadata.id === except || record.ids === undefined ? [] : [record.ids.uid]))))

  /** The workspace exists and belongs to the computer's own uid (root server): done once, or after a reset. */
  const prepareHome = (dir: string, ids: GuestUser.HostIds | undefined) =>
    Effect.gen(function*() {
      const home = join(dir, "home")
      // Only the server (and the computer's own uid, below) may look into a computer's directory.
      yield* fs(`create the workspace ${home}`, () => mkdir(home, { recursive: true }).then(() => chmod(dir, 0o700)))
      if (ids === undefined) return home
      const owned = yield* Effect.promise(() => lstat(home).then((stat) => stat.uid === ids.uid && stat.gid === ids.gid, () => false))
      if (!owned) yield* GuestUser.chownTree(home, ids)
      return home
    })

  /** Completes a record of an older version (a key; when the server is root, the computer's own uid) and its workspace. */
  const ready = (dir: string, record: ComputerRecord.ComputerRecord) =>
    Effect.gen(function*() {
      const key = record.key ?? (yield* newKey)
      const ids = (yield* options.hostIds(record.ids, yield* takenIds(record.metadata.id))) ?? record.ids
      const next: Keyed = { ...record, key, ids }
      if (key !== record.key || ids?.uid !== record.ids?.uid || ids?.gid !== record.ids?.gid) yield* ComputerRecord.write(dir, next)
      return { dir, home: yield* prepareHome(dir, ids), record: next } satisfies Workspace
    })

  const create = (metadata: ComputerMetadata) =>
    Effect.gen(function*() {
      const dir = dirOf(metadata.id)
      yield* fs(`create the computer directory ${dir}`, () => mkdir(dir, { recursive: true }))
      const ids = yield* options.hostIds(undefined, yield* takenIds(metadata.id))
      const record: Keyed = { metadata, key: yield* newKey, ids, holder: undefined }
      // The record is the claim on the id: a directory without one (left by a crash) is taken over.
      if (!(yield* ComputerRecord.writeNew(dir, record))) {
        return yield* providerError(NAME, `create computer '${metadata.id}'`, "Conflict", "a computer with this id exists")
      }
      yield* prepareHome(dir, ids)
      return instanceOf(record, "running")
    })

  /** Makes a found computer ready to run (the sandbox starts when it is connected). */
  const start = (instance: Instance) =>
    Effect.flatMap(locate(instance), ({ dir, record }) => ready(dir, record)).pipe(
      Effect.map(({ record }) => instanceOf(record, "running"))
    )

  /** Removes the computer's directory, unless the id now names another computer. */
  const remove = (instance: Instance) =>
    Effect.gen(function*() {
      const dir = dirOf(instance.metadata.id)
      const record = yield* ComputerRecord.read(dir)
      if (Option.isNone(record) || !matches(record.value, instance)) return
      yield* fs(`remove ${dir}`, () => rm(dir, { recursive: true, force: true, maxRetries: 3 }))
    })

  /**
   * Renames a (pool's) computer: its directory and its record, with synchronous file calls (see
   * ComputerRecord.readNow). The running sandbox is not disturbed (its mounts hold the directory).
   */
  const adopt = (instance: Instance, metadata: ComputerMetadata) =>
    Effect.gen(function*() {
      const { dir, record } = yield* locate(instance, ComputerRecord.readNow)
      const target = dirOf(metadata.id)
      yield* Effect.try({
        try: () => renameSync(dir, target),
        catch: (error) =>
          ["EEXIST", "ENOTEMPTY"].includes((error as NodeJS.ErrnoException).code ?? "")
            ? providerError(NAME, `rename computer '${record.metadata.id}'`, "Conflict", `a computer '${metadata.id}' exists`, error)
            : failed(`rename computer '${record.metadata.id}'`, error)
      })
      const next: Keyed = { ...record, key: record.key ?? (yield* newKey), metadata }
      yield* ComputerRecord.writeNow(target, next)
      return instanceOf(next, "running")
    })

  /** Lets go of a computer this backend holds, wherever it is now (a pool's computer was renamed meanwhile). */
  const letGo = (key: string) =>
    Effect.gen(function*() {
      const held = (yield* all()).find(({ record }) => record.key === key && record.holder?.token === options.self.token)
      if (held !== undefined) yield* ComputerRecord.write(held.dir, { ...held.record, key, holder: undefined })
    }).pipe(Effect.catchAll((error) => Effect.logWarning(`host backend: cannot release computer ${key}: ${error.message}`)))

  /**
   * Holds the computer for the Scope: refused (Conflict) while another live server holds it. The
   * workspace is made ready (a record of an older version completed).
   */
  const claim = (instance: Instance): Effect.Effect<Workspace, ProviderError, Scope.Scope> =>
    Effect.acquireRelease(
      Effect.gen(function*() {
        const { dir, record } = yield* locate(instance)
        const holder = record.holder
        if (heldElsewhere(holder)) {
          return yield* providerError(
            NAME,
            `connect to computer '${record.metadata.id}'`,
            "Conflict",
            `it is in use by another kilntainers server (pid ${holder!.pid})`
          )
        }
        const workspace = yield* ready(dir, record)
        const held: Keyed = { ...workspace.record, holder: options.self }
        yield* ComputerRecord.write(dir, held)
        return { ...workspace, record: held }
      }),
      ({ record }) => letGo(record.key)
    )

  /** The workspace of a computer that is still ours. */
  const homeOf = (instance: Instance) => Effect.map(locate(instance), ({ dir }) => join(dir, "home"))
  /** The computer's key (its cgroups' name: Freezer.ts). */
  const keyOf = (instance: Instance) => Effect.map(locate(instance), ({ record }) => record.key)

  return { find, create, start, remove, adopt, claim, homeOf, keyOf }
}
