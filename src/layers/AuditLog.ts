/**
 * The audit log (`--audit-log PATH`): one JSON object per line, appended by a single writer fiber,
 * the file rotated when the next batch would take it past `maxBytes` (PATH → PATH.1 → … →
 * PATH.<keep>, the oldest dropped). The file is created 0600: it holds commands and paths.
 *
 * - Never through a link: its directory is opened once, at startup, and every file is opened,
 *   renamed and removed relative to that descriptor, the file itself with `O_NOFOLLOW` and only if
 *   it is a regular file, so a symlink or a FIFO put in its place is refused (its lines are counted
 *   as dropped), never followed. The startup checks keep it outside every mount anyway.
 * - Never in the way: `record` puts the line in a bounded dropping queue and returns. A disk that
 *   is slow or full costs lines, never a stalled process or proxy; lost lines are counted and the
 *   count is written as an `audit.dropped` entry as soon as the writer can.
 * - Redacted: every string of an event has the server's secrets (the `--egress-header` values, the
 *   providers' tokens) replaced by `<redacted>` before it is kept or written, then is cut to a
 *   bounded length, so one line stays small whatever a command looked like.
 * - The last `recentCapacity` entries stay in memory for the dashboard (`recent`), with or without
 *   a file.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Queue from "effect/Queue"
import * as Redacted from "effect/Redacted"
import type * as Scope from "effect/Scope"
import { closeSync, constants, openSync } from "node:fs"
import { type FileHandle, open, rename, unlink } from "node:fs/promises"
import { basename, dirname } from "node:path"
import { AuditLog, type AuditEntry, type AuditEvent, type AuditLogShape } from "../services/AuditLog.js"
import { Settings } from "../services/Settings.js"
import { EgressError } from "./egress/EgressError.js"

export interface AuditLogOptions {
  /** The file; undefined keeps only the in-memory entries. */
  readonly path: string | undefined
  /** Rotate before the file grows past this many bytes. */
  readonly maxBytes: number
  /** Rotated files kept (PATH.1 … PATH.keep); 0 starts the file afresh. */
  readonly keep: number
  /** Values redacted from every entry. */
  readonly secrets: ReadonlyArray<Redacted.Redacted<string>>
  readonly recentCapacity?: number | undefined
  readonly queueCapacity?: number | undefined
}

const MAX_STRING = 4096
const MAX_ITEMS = 256
const REDACTED = "<redacted>"

/** Replaces the secrets in every string of `value`, then bounds strings and arrays. */
const sanitizer = (secrets: ReadonlyArray<string>) => {
  const clean = (text: string) => {
    let out = text
    for (const secret of secrets) if (out.includes(secret)) out = out.split(secret).join(REDACTED)
    return out.length <= MAX_STRING ? out : `${out.slice(0, MAX_STRING)}…[${out.length - MAX_STRING} characters omitted]`
  }
  const walk = (value: unknown): unknown => {
    if (typeof value === "string") return clean(value)
    if (Array.isArray(value)) {
      const items = value.slice(0, MAX_ITEMS).map(walk)
      if (value.length > MAX_ITEMS) items.push(`…[${value.length - MAX_ITEMS} items omitted]`)
      return items
    }
    if (typeof value === "object" && value !== null) {
      const out: Record<string, unknown> = {}
      for (const [key, item] of Object.entries(value)) if (item !== undefined) out[key] = walk(item)
      return out
    }
    return value
  }
  return walk
}

const errorText = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** `O_PATH` (Linux): the directory held without being opened for reading. */
const O_PATH = 0o10000000
/** Appends, creates, never follows a final symlink, never waits on a FIFO. */
const APPEND = constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK

/**
 * The file side: appends, tracks the size, rotates. `dir` is the directory's descriptor: names are
 * looked up in it through its /proc/self/fd link, as openat and renameat would.
 */
const fileWriter = (dir: number, path: string, maxBytes: number, keep: number) => {
  const name = basename(path)
  const at = (file: string) => `/proc/self/fd/${dir}/${file}`
  let handle: FileHandle | undefined
  let size = 0
  const ensureOpen = async () => {
    if (handle !== undefined) return handle
    const opened = await open(at(name), APPEND, 0o600)
    const stat = await opened.stat()
    if (!stat.isFile()) {
      await opened.close()
      throw new Error(`${path} is not a regular file`)
    }
    handle = opened
    size = stat.size
    return handle
  }
  const rotate = async () => {
    await handle?.close()
    handle = undefined
    if (keep === 0) await unlink(at(name)).catch(() => undefined)
    else {
      for (let index = keep - 1; index >= 1; index--) await rename(at(`${name}.${index}`), at(`${name}.${index + 1}`)).catch(() => undefined)
      await rename(at(name), at(`${name}.1`)).catch(() => undefined)
    }
  }
  return {
    /** Appends the lines, rotating between two lines whenever the next would pass the cap. */
    write: async (lines: ReadonlyArray<string>) => {
      let file = await ensureOpen()
      let chunk = ""
      let chunkBytes = 0
      for (const line of lines) {
        const bytes = Buffer.byteLength(line)
        if (size + chunkBytes + bytes > maxBytes && size + chunkBytes > 0) {
          if (chunkBytes > 0) await file.write(chunk)
          size += chunkBytes
          chunk = ""
          chunkBytes = 0
          await rotate()
          file = await ensureOpen()
        }
        chunk += line
        chunkBytes += bytes
      }
      if (chunkBytes > 0) await file.write(chunk)
      size += chunkBytes
    },
    close: async () => {
      await handle?.close()
      handle = undefined
    }
  }
}

/** The audit log of `options`; its writer lives as long as the Scope, which flushes what is queued. */
export const make = (options: AuditLogOptions): Effect.Effect<AuditLogShape, EgressError, Scope.Scope> =>
  Effect.gen(function*() {
    const secrets = options.secrets.map(Redacted.value).filter((secret) => secret.length > 0)
    const sanitize = sanitizer(secrets)
    const capacity = options.recentCapacity ?? 1000
    const ring: Array<AuditEntry | undefined> = new Array(capacity)
    let next = 0
    let dropped = 0
    const queue = yield* Queue.dropping<string>(options.queueCapacity ?? 4096)

    const record = (event: AuditEvent) =>
      Effect.gen(function*() {
        const millis = yield* Clock.currentTimeMillis
        const entry = { time: new Date(millis).toISOString(), ...(sanitize(event) as AuditEvent) } as AuditEntry
        ring[next % capacity] = entry
        next++
        if (options.path !== undefined && !(yield* Queue.offer(queue, `${JSON.stringify(entry)}\n`))) dropped++
      })

    const recent = (computers: ReadonlySet<string> | undefined, limit: number) =>
      Effect.sync(() => {
        const out: Array<AuditEntry> = []
        for (let index = next - 1; index >= Math.max(0, next - capacity) && out.length < limit; index--) {
          const entry = ring[index % capacity]!
          if (computers === undefined || computers.has(entry.computer)) out.push(entry)
        }
        return out.reverse()
      })

    const path = options.path
    if (path !== undefined) {
      const dir = yield* Effect.acquireRelease(
        Effect.try({
          try: () => openSync(dirname(path), O_PATH | constants.O_DIRECTORY),
          catch: (error) => new EgressError({ reason: `the audit log's directory ${dirname(path)} cannot be opened: ${errorText(error)}` })
        }),
        (fd) => Effect.sync(() => closeSync(fd))
      )
      const file = fileWriter(dir, path, options.maxBytes, options.keep)
      // Fails at startup, not at the first event, when the file cannot be opened.
      yield* Effect.tryPromise({
        try: () => file.write([]),
        catch: (error) => new EgressError({ reason: `the audit log ${path} cannot be written: ${errorText(error)}` })
      })
      let failing = false
      const write = (lines: ReadonlyArray<string>) =>
        Effect.gen(function*() {
          const text = [...lines]
          if (dropped > 0) {
            const millis = yield* Clock.currentTimeMillis
            text.push(`${JSON.stringify({ time: new Date(millis).toISOString(), type: "audit.dropped", count: dropped })}\n`)
            dropped = 0
          }
          yield* Effect.tryPromise(() => file.write(text)).pipe(
            Effect.tap(() => Effect.sync(() => (failing = false))),
            Effect.catchAll((error) =>
              Effect.gen(function*() {
                dropped += lines.length
                if (!failing) yield* Effect.logWarning(`audit log ${path}: cannot write (${errorText(error.error)}); entries are lost`)
                failing = true
              })
            )
          )
        })
      yield* Effect.addFinalizer(() =>
        Queue.takeAll(queue).pipe(
          Effect.flatMap((lines) => (lines.length > 0 || dropped > 0 ? write([...lines]) : Effect.void)),
          Effect.zipRight(Effect.promise(() => file.close().catch(() => undefined)))
        )
      )
      yield* Queue.takeBetween(queue, 1, 512).pipe(
        Effect.flatMap((lines) => Effect.uninterruptible(write([...lines]))),
        Effect.forever,
        Effect.forkScoped
      )
    }
    return { record, recent }
  })

/** The secrets of the server's settings, redacted from every entry. */
export const settingsSecrets = (settings: Settings["Type"]): ReadonlyArray<Redacted.Redacted<string>> =>
  [
    ...settings.egress.headers.map((rule) => rule.value),
    settings.fly.token,
    settings.e2b.apiKey,
    settings.modal.tokenId,
    settings.modal.tokenSecret
  ].filter((secret): secret is Redacted.Redacted<string> => secret !== undefined)

/** The audit log of the server's settings (`--audit-log`, `--audit-log-max-size`, `--audit-log-keep`). */
export const layer: Layer.Layer<AuditLog, EgressError, Settings> = Layer.scoped(
  AuditLog,
  Effect.gen(function*() {
    const settings = yield* Settings
    return yield* make({
      path: settings.auditLog.path,
      maxBytes: settings.auditLog.maxBytes,
      keep: settings.auditLog.keep,
      secrets: settingsSecrets(settings)
    })
  })
)
