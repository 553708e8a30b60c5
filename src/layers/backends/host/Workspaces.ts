/**
 * The host backend's computers as the provider has them: one directory each under
 * `<stateDir>/computers/<id>` (0700), holding the record (ComputerRecord.ts) and the workspace
 * `home`. Finding, creating, renaming and removing computers are file operations here; running
 * them is HostBackend's `connect`.
 *
 * A computer is "running" while its agent's socket is there (its agent runs, or died without
 * cleaning up: connecting tells), else "stopped". Any number of servers open one computer at once:
 * they all attach to its one agent (AgentLauncher.ts), which holds its processes.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import { existsSync, renameSync } from "node:fs"
import { chmod, lstat, mkdir, readdir, rm } from "node:fs/promises"
import { join } from "node:path"
import type { ComputerMetadata } from "../../../domain/ComputerMetadata.js"
import { computerIdPattern } from "../../../domain/ComputerIds.js"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import type { Instance, InstanceState, Query } from "../../../services/Backend.js"
import { newKey as newAgentKey } from "../agent/AgentHandshake.js"
import * as ComputerRecord from "./ComputerRecord.js"
import * as GuestUser from "./GuestUser.js"

const NAME = "host"

/** A record that has its keys (every record this version writes). */
type Keyed = ComputerRecord.ComputerRecord & { readonly key: string; readonly agentKey: string }

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

  const stateOf = (record: ComputerRecord.ComputerRecord): InstanceState =>
    existsSync(join(dirOf(record.metadata.id), "agent.sock")) ? "running" : "stopped"

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

  /**
   * Completes a record of an older version (a key, an agent key; when the server is root, the
   * computer's own uid) and its workspace.
   */
  const ready = (dir: string, record: ComputerRecord.ComputerRecord) =>
    Effect.gen(function*() {
      const key = record.key ?? (yield* newKey)
      const agentKey = record.agentKey ?? newAgentKey()
      const ids = (yield* options.hostIds(record.ids, yield* takenIds(record.metadata.id))) ?? record.ids
      const next: Keyed = { ...record, key, agentKey, ids }
      if (key !== record.key || agentKey !== record.agentKey || ids?.uid !== record.ids?.uid || ids?.gid !== record.ids?.gid) {
        yield* ComputerRecord.write(dir, next)
      }
      return { dir, home: yield* prepareHome(dir, ids), record: next } satisfies Workspace
    })

  const create = (metadata: ComputerMetadata) =>
    Effect.gen(function*() {
      const dir = dirOf(metadata.id)
      yield* fs(`create the computer directory ${dir}`, () => mkdir(dir, { recursive: true }))
      const ids = yield* options.hostIds(undefined, yield* takenIds(metadata.id))
      const record: Keyed = { metadata, key: yield* newKey, agentKey: newAgentKey(), ids, holder: undefined }
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
      const next: Keyed = { ...record, key: record.key ?? (yield* newKey), agentKey: record.agentKey ?? newAgentKey(), metadata }
      yield* ComputerRecord.writeNow(target, next)
      return instanceOf(next, "running")
    })

  /** The computer's directory, workspace and record, made ready (a record of an older version completed). */
  const open = (instance: Instance): Effect.Effect<Workspace, ProviderError> =>
    Effect.flatMap(locate(instance), ({ dir, record }) => ready(dir, record))

  /** The workspace of a computer that is still ours (checkpoints read and write it). */
  const homeOf = (instance: Instance) => Effect.map(locate(instance), ({ dir }) => join(dir, "home"))
  /** The computer's key (its cgroups' name: Freezer.ts). */
  const keyOf = (instance: Instance) => Effect.map(locate(instance), ({ record }) => record.key)

  return { find, create, start, remove, adopt, open, dirOf, homeOf, keyOf }
}
