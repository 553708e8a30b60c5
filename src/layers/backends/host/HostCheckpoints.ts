/**
 * Checkpoints on the host backend: a computer's workspace copied to
 * `<stateDir>/checkpoints/<id>/home` (0700, never mounted in a sandbox), and a fork's workspace
 * copied back from it with `cp -a --reflink=auto` (a reflink where the filesystem has them, a
 * plain copy elsewhere), then given to the fork's own host uid.
 *
 * The computer's processes are frozen during the copy where the host has a cgroup freezer
 * (Freezer.ts); elsewhere the copy is live. Either way the server reads a tree the guest controls, so it never follows a path the guest could swap: each directory is opened with
 * O_NOFOLLOW and its entries are reached through that descriptor (`/proc/self/fd/N/name`), each
 * file is opened with O_NOFOLLOW and copied from its descriptor. A symlink is copied as a link;
 * sockets, FIFOs and devices are left out. The copy stops when it would not fit on the disk.
 *
 * Each checkpoint directory holds a record of the server that took it (`owner.json`, written
 * before the copy starts), so that a later server removes what a crashed one left (`sweep`): the
 * directories of a server whose process is gone, and those without a record (a capture cut short
 * before its record) once they are an hour old — at most MAX_SWEEP per pass.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { execFile } from "node:child_process"
import { constants } from "node:fs"
import { chmod, copyFile, type FileHandle, lstat, mkdir, open, readdir, readFile, readlink, rm, statfs, symlink, writeFile } from "node:fs/promises"
import { join } from "node:path"
import * as Clock from "effect/Clock"
import * as Schema from "effect/Schema"
import { type ComputerMetadata, Owner } from "../../../domain/ComputerMetadata.js"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import type { Checkpointing, Instance } from "../../../services/Backend.js"
import * as ComputerRecord from "./ComputerRecord.js"
import * as GuestUser from "./GuestUser.js"

const NAME = "host"
/** Deeper trees are refused: one open descriptor per level. */
const MAX_DEPTH = 256
const DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW
const FILE = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK

/** Directories one sweep removes at most (the rest wait for the next pass). */
export const MAX_SWEEP = 100
/** The record of the server that took a checkpoint. */
export const OWNER_FILE = "owner.json"
/** A directory without a record is a capture cut short once it is this old. */
const UNRECORDED_AFTER_MS = 60 * 60 * 1000
const decodeOwner = Schema.decodeUnknownOption(Schema.parseJson(Owner))

const failed = (operation: string, error: unknown) => providerError(NAME, operation, "Failed", error instanceof Error ? error.message : String(error), error)

/** Copies the tree open at `source` into the new directory `target`, within `budget` bytes. */
const copyTree = async (source: FileHandle, target: string, budget: { left: number }, depth: number): Promise<void> => {
  if (depth > MAX_DEPTH) throw new Error(`the workspace is deeper than ${MAX_DEPTH} directories`)
  const at = `/proc/self/fd/${source.fd}`
  for (const name of await readdir(at)) {
    const path = `${at}/${name}`
    const stat = await lstat(path).catch(() => undefined)
    const into = join(target, name)
    if (stat?.isDirectory()) {
      // Gone or swapped for something else since it was listed: left out.
      const dir = await open(path, DIRECTORY).catch(() => undefined)
      if (dir === undefined) continue
      try {
        await mkdir(into, { mode: 0o700 })
        await copyTree(dir, into, budget, depth + 1)
        await chmod(into, (await dir.stat()).mode & 0o777)
      } finally {
        await dir.close()
      }
    } else if (stat?.isFile()) {
      const file = await open(path, FILE).catch(() => undefined)
      if (file === undefined) continue
      try {
        const opened = await file.stat()
        if (!opened.isFile()) continue
        budget.left -= opened.size
        if (budget.left < 0) throw new Error("the checkpoint would not fit on the disk of the state directory")
        await copyFile(`/proc/self/fd/${file.fd}`, into, constants.COPYFILE_FICLONE)
        // Permission bits only: a copy made by the server never carries setuid or setgid.
        await chmod(into, opened.mode & 0o777)
      } finally {
        await file.close()
      }
    } else if (stat?.isSymbolicLink()) {
      const link = await readlink(path).catch(() => undefined)
      if (link !== undefined) await symlink(link, into)
    }
  }
}

export interface HostCheckpointsOptions {
  readonly checkpointsDir: string
  /** A computer's workspace (`<dir>/home`), when the instance is still ours. */
  readonly homeOf: (instance: Instance) => Effect.Effect<string, ProviderError>
  /** Freezes the computer's processes for the life of the Scope; false when it cannot (Freezer.ts). */
  readonly freeze?: ((instance: Instance) => Effect.Effect<boolean, ProviderError, Scope.Scope>) | undefined
  readonly create: (metadata: ComputerMetadata) => Effect.Effect<Instance, ProviderError>
  readonly remove: (instance: Instance) => Effect.Effect<void, ProviderError>
  readonly computersDir: string
}

export const make = (options: HostCheckpointsOptions): Checkpointing => {
  const dirOf = (stored: string) => join(options.checkpointsDir, stored)

  const capture = (instance: Instance, id: string, owner: Owner) =>
    Effect.gen(function*() {
      const home = yield* options.homeOf(instance)
      const dir = dirOf(id)
      // Frozen while the copy runs (thawed when the scope closes, whatever its exit).
      const frozen = yield* Effect.scoped(Effect.gen(function*() {
        const held = options.freeze === undefined ? false : yield* options.freeze(instance)
        yield* copy(instance, home, dir, owner)
        return held
      }))
      return {
        stored: id,
        note: frozen
          ? "the workspace (/home/agent) copied while the computer's processes were frozen (a consistent copy); " +
            "running processes, /tmp and mounted directories are not captured"
          : "the workspace (/home/agent) copied live: no cgroup freezer here, so files written during the copy may be caught " +
            "half-written; running processes, /tmp and mounted directories are not captured"
      }
    })

  const copy = (instance: Instance, home: string, dir: string, owner: Owner) =>
    Effect.tryPromise({
        try: async () => {
          await mkdir(options.checkpointsDir, { recursive: true, mode: 0o700 })
          await mkdir(dir, { mode: 0o700 })
          await writeFile(join(dir, OWNER_FILE), JSON.stringify(owner), { mode: 0o600 })
          const space = await statfs(options.checkpointsDir)
          // Leaves 256 MiB of the disk free.
          const budget = { left: space.bavail * space.bsize - 256 * 1024 * 1024 }
          const source = await open(home, DIRECTORY)
          try {
            await mkdir(join(dir, "home"), { mode: 0o700 })
            await copyTree(source, join(dir, "home"), budget, 0)
          } finally {
            await source.close()
          }
        },
        catch: (error) => failed(`checkpoint computer '${instance.metadata.id}'`, error)
      }).pipe(Effect.tapError(() => Effect.promise(() => rm(dir, { recursive: true, force: true }))))

  const restore = (stored: string, metadata: ComputerMetadata) =>
    Effect.gen(function*() {
      const instance = yield* options.create(metadata)
      const dir = join(options.computersDir, metadata.id)
      yield* Effect.gen(function*() {
        yield* Effect.tryPromise({
          // The checkpoint is the server's own (the guest never sees it): a plain cp is safe here.
          try: () =>
            new Promise<void>((resolve, reject) =>
              execFile("cp", ["-a", "--reflink=auto", "--", `${join(dirOf(stored), "home")}/.`, join(dir, "home")], (error) =>
                error === null ? resolve() : reject(error))),
          catch: (error) => failed(`copy checkpoint ${stored} into computer '${metadata.id}'`, error)
        })
        const record = yield* ComputerRecord.read(dir)
        const ids = Option.getOrUndefined(record)?.ids
        if (ids !== undefined) yield* GuestUser.chownTree(join(dir, "home"), ids)
      }).pipe(Effect.tapError(() => options.remove(instance)))
      return instance
    })

  const remove = (stored: string) =>
    Effect.tryPromise({
      try: () => rm(dirOf(stored), { recursive: true, force: true, maxRetries: 3 }),
      catch: (error) => failed(`remove checkpoint ${stored}`, error)
    })

  /** What `sweep` should do with one directory: its age decides only without an owner record. */
  const leftover = async (name: string, alive: (owner: Owner) => boolean, now: number) => {
    const dir = dirOf(name)
    const stat = await lstat(dir).catch(() => undefined)
    if (stat === undefined || !stat.isDirectory()) return false
    const record = await readFile(join(dir, OWNER_FILE), "utf8").catch(() => undefined)
    if (record === undefined) return now - stat.mtimeMs > UNRECORDED_AFTER_MS
    const owner = decodeOwner(record)
    // An unreadable record is not ours to judge: left.
    return Option.isSome(owner) && !alive(owner.value)
  }

  const sweep = (alive: (owner: Owner) => boolean) =>
    Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      return yield* Effect.tryPromise({
        try: async () => {
          const names = await readdir(options.checkpointsDir).catch((error: NodeJS.ErrnoException) => {
            if (error.code === "ENOENT") return [] as Array<string>
            throw error
          })
          let removed = 0
          for (const name of names) {
            if (removed >= MAX_SWEEP) break
            if (!(await leftover(name, alive, now))) continue
            await rm(dirOf(name), { recursive: true, force: true, maxRetries: 3 })
            removed++
          }
          return removed
        },
        catch: (error) => failed("remove leftover checkpoints", error)
      })
    })

  return { capture, restore, remove, sweep }
}
