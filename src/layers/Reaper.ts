/**
 * The reaper: temporary computers left behind by servers that died without cleaning up (a crash, a
 * SIGKILL) are removed — by the next server on the same host (owner process gone), or anywhere once
 * their lease expired. Permanent computers, and temporary ones of live servers, are never touched.
 * The decision is one pure function; the provider only answers `find` and `remove`.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type { ComputerMetadata } from "../domain/ComputerMetadata.js"
import { Backend } from "../services/Backend.js"
import type { ServerIdentity } from "../services/ServerIdentity.js"
import * as Spans from "../services/Spans.js"

/** Why a computer should be reaped, or undefined to leave it. */
export const reapReason = (
  metadata: ComputerMetadata,
  server: ServerIdentity["Type"],
  now: number
): string | undefined => {
  if (!metadata.temporary || metadata.instance === server.instanceId) return undefined
  if (metadata.expires !== undefined) {
    const expires = Date.parse(metadata.expires)
    if (!Number.isNaN(expires) && expires < now) return `its lease expired at ${metadata.expires}`
  }
  if (metadata.owner !== undefined && !server.alive(metadata.owner)) {
    return `its server (pid ${metadata.owner.pid} on ${metadata.owner.host}) is no longer running`
  }
  return undefined
}

/** One pass: removes what `reapReason` says; answers how many were removed. */
export const reapOnce = (server: ServerIdentity["Type"]) =>
  Effect.gen(function*() {
    const backend = yield* Backend
    const found = yield* backend.find({ temporary: true })
    const now = yield* Clock.currentTimeMillis
    let removed = 0
    for (const instance of found) {
      const reason = reapReason(instance.metadata, server, now)
      if (reason === undefined) continue
      yield* backend.remove(instance).pipe(
        Effect.tap(() => {
          removed++
          return Effect.logInfo(
            `${backend.name} backend: reaped temporary computer ${instance.metadata.id} (${instance.providerId}): ${reason}`
          )
        }),
        Effect.catchAll((error) => Effect.logWarning(`${backend.name} backend: cannot reap ${instance.providerId}: ${error.message}`))
      )
    }
    return removed
  })

/**
 * Reaps in the background: once at start (never on the path to the first answer), then every
 * `every` while the server runs.
 */
export const run = (server: ServerIdentity["Type"], every: Duration.DurationInput = Duration.minutes(5)) =>
  reapOnce(server).pipe(
    Effect.tap((removed) => Spans.annotate(() => ({ "kilntainers.reaper.removed": removed }))),
    Spans.span("reaper.pass", { root: true }),
    Effect.catchAll((error) => Effect.logWarning(`reaper: ${error.message}`)),
    Effect.repeat(Schedule.spaced(every))
  )
