/**
 * `<computer>/computer.json`: what the host backend keeps of a computer between servers.
 *
 * - `labels`: the kernel's ComputerMetadata, in the one flat encoding every provider uses
 *   (`ComputerMetadata.toLabels`, style "dashed": `kilntainers-computer-id`, …);
 * - `key`: the computer's opaque identity: its `sandbox_id` is `host-<key>`, a new one for a
 *   computer created again under the same id, and its cgroups are named after it;
 * - `uid`/`gid`: the host ids its sandbox runs as when the server is root (see GuestUser);
 * - `agentKey`: the key its agent proves itself with and every attaching server proves (64 hex
 *   digits; this file is readable by the server's uid only, in a 0700 directory);
 * - `holder`: the last server that connected to it (informative: any number of servers attach to
 *   one computer's agent now; a dead holder's entry means nothing).
 *
 * Records of older versions (`id`, `temporary`, `createdAt`, `image`, `owner` at the top) are read
 * too: their owner, the server that last opened the computer, counts as creator and holder.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import * as Schema from "effect/Schema"
import { readFileSync, renameSync, writeFileSync } from "node:fs"
import { link, readFile, rename, unlink, writeFile } from "node:fs/promises"
import { hostname } from "node:os"
import { join } from "node:path"
import { type ComputerMetadata, fromLabels, toLabels } from "../../../domain/ComputerMetadata.js"
import { providerError } from "../../../domain/Errors.js"
import type { HostIds } from "./GuestUser.js"

const NAME = "host"
const FILE = "computer.json"

/** A server connected to a computer: its process (pid and start time) and that backend's own token. */
export const Holder = Schema.Struct({ pid: Schema.Int, start: Schema.String, token: Schema.String })
export type Holder = typeof Holder.Type

const Stored = Schema.Struct({
  labels: Schema.Record({ key: Schema.String, value: Schema.String }),
  key: Schema.String,
  uid: Schema.optional(Schema.Int),
  gid: Schema.optional(Schema.Int),
  agentKey: Schema.optional(Schema.String),
  holder: Schema.optional(Holder)
})

const Legacy = Schema.Struct({
  id: Schema.String,
  temporary: Schema.Boolean,
  createdAt: Schema.String,
  image: Schema.String,
  key: Schema.optional(Schema.String),
  uid: Schema.optional(Schema.Number),
  gid: Schema.optional(Schema.Number),
  owner: Schema.optional(Schema.Struct({ pid: Schema.Number, startTime: Schema.String }))
})

const decodeStored = Schema.decodeUnknownOption(Schema.parseJson(Stored))
const decodeLegacy = Schema.decodeUnknownOption(Schema.parseJson(Legacy))

/** A computer as its record says. `key` is missing only in records of versions before keys. */
export interface ComputerRecord {
  readonly metadata: ComputerMetadata
  readonly key: string | undefined
  readonly ids: HostIds | undefined
  readonly agentKey?: string | undefined
  readonly holder: Holder | undefined
}

/** The `sandbox_id` of a host computer: opaque, never a host path. */
export const providerId = (record: ComputerRecord) => `host-${record.key ?? record.metadata.id}`

const ids = (uid: number | undefined, gid: number | undefined): HostIds | undefined =>
  uid === undefined || gid === undefined ? undefined : { uid, gid }

const fromLegacy = (legacy: typeof Legacy.Type): Option.Option<ComputerRecord> => {
  const owner = legacy.owner
  return Option.map(
    fromLabels("dashed", toLabels("dashed", {
      id: legacy.id,
      temporary: legacy.temporary,
      image: legacy.image,
      created: legacy.createdAt,
      instance: "",
      ...(owner === undefined ? {} : { owner: { host: hostname(), pid: owner.pid, start: owner.startTime } })
    })),
    (metadata) => ({
      metadata,
      key: legacy.key,
      ids: ids(legacy.uid, legacy.gid),
      holder: owner === undefined ? undefined : { pid: owner.pid, start: owner.startTime, token: "" }
    })
  )
}

/** Reads a record's text: the current form, or an older version's. */
export const parse = (text: string): Option.Option<ComputerRecord> =>
  Option.match(decodeStored(text), {
    onSome: (stored) =>
      Option.map(fromLabels("dashed", stored.labels), (metadata) => ({
        metadata,
        key: stored.key,
        ids: ids(stored.uid, stored.gid),
        agentKey: stored.agentKey,
        holder: stored.holder
      })),
    onNone: () => Option.flatMap(decodeLegacy(text), fromLegacy)
  })

/** The record in `computerDir`, if there is a valid one. */
export const read = (computerDir: string) =>
  Effect.promise(() => readFile(join(computerDir, FILE), "utf8").catch(() => undefined)).pipe(
    Effect.map((text) => (text === undefined ? Option.none<ComputerRecord>() : parse(text)))
  )

/** The record's text (a record always has a key once written by this version). */
export const format = (record: ComputerRecord & { readonly key: string }) =>
  JSON.stringify({
    labels: toLabels("dashed", record.metadata),
    key: record.key,
    ...(record.ids === undefined ? {} : { uid: record.ids.uid, gid: record.ids.gid }),
    ...(record.agentKey === undefined ? {} : { agentKey: record.agentKey }),
    ...(record.holder === undefined ? {} : { holder: record.holder })
  }) + "\n"

const temporaryFile = (computerDir: string) =>
  Effect.map(Random.nextIntBetween(0, 0x7fffffff), (n) => join(computerDir, `.${FILE}.${process.pid}.${n.toString(36)}`))

const cannotWrite = (computerDir: string) => (error: unknown) =>
  providerError(NAME, `record the computer in ${computerDir}`, "Failed", String(error), error)

/** Replaces the record atomically. */
export const write = (computerDir: string, record: ComputerRecord & { readonly key: string }) =>
  Effect.flatMap(temporaryFile(computerDir), (tmp) =>
    Effect.tryPromise({
      try: async () => {
        await writeFile(tmp, format(record), { mode: 0o600 })
        await rename(tmp, join(computerDir, FILE))
      },
      catch: cannotWrite(computerDir)
    }))

/**
 * `read` and `write` without a hop through libuv's thread pool, for a warm pool's hand-out: ten at
 * once waited 7–14 ms each behind each other's hops, for file calls that take microseconds on the
 * local disk of a state directory.
 */
export const readNow = (computerDir: string): Effect.Effect<Option.Option<ComputerRecord>> =>
  Effect.sync(() => {
    try {
      return parse(readFileSync(join(computerDir, FILE), "utf8"))
    } catch {
      return Option.none()
    }
  })

export const writeNow = (computerDir: string, record: ComputerRecord & { readonly key: string }) =>
  Effect.flatMap(temporaryFile(computerDir), (tmp) =>
    Effect.try({
      try: () => {
        writeFileSync(tmp, format(record), { mode: 0o600 })
        renameSync(tmp, join(computerDir, FILE))
      },
      catch: cannotWrite(computerDir)
    }))

/**
 * Writes the record only if there is none yet (a hard link is made or fails atomically): answers
 * false when the computer directory already holds a record.
 */
export const writeNew = (computerDir: string, record: ComputerRecord & { readonly key: string }) =>
  Effect.flatMap(temporaryFile(computerDir), (tmp) =>
    Effect.tryPromise({
      try: async () => {
        await writeFile(tmp, format(record), { mode: 0o600 })
        try {
          await link(tmp, join(computerDir, FILE))
          return true
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === "EEXIST") return false
          throw error
        } finally {
          await unlink(tmp)
        }
      },
      catch: cannotWrite(computerDir)
    }))
