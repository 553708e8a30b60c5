/**
 * Who holds which terminal: one hold per process handle (handles are never reused), each with a
 * lease that its holder's calls renew. A lapsed hold is gone on the next look; the table is
 * bounded (`maxHolds`), so nothing a client sends can grow it without end.
 */
import { randomBytes } from "node:crypto"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { AccessDenied } from "../../domain/Errors.js"
import { type Hold, TerminalHolds } from "../../services/Terminals.js"

/** A holder not heard from for this long (its page polls every fraction of a second) holds no more. */
export const leaseMs = 30_000
/** Terminals held at once, server-wide. */
export const maxHolds = 256

const what = (pid: string) => `terminal of process '${pid}'`

export const make = Effect.sync(() => {
  const holds = new Map<string, { hold: Hold; renewedAt: number }>()

  const live = (pid: string, now: number) => {
    const entry = holds.get(pid)
    if (entry !== undefined && now - entry.renewedAt > leaseMs) holds.delete(pid)
    return holds.get(pid)
  }

  return TerminalHolds.of({
    current: (pid) => Effect.map(Clock.currentTimeMillis, (now) => live(pid, now)?.hold),
    take: (pid, by) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const held = live(pid, now)
        if (held !== undefined) {
          return Effect.fail(new AccessDenied({ what: what(pid), why: `a person already holds it (from the ${held.hold.by}); they must hand it back first` }))
        }
        if (holds.size >= maxHolds) {
          for (const key of [...holds.keys()]) live(key, now)
          if (holds.size >= maxHolds) return Effect.fail(new AccessDenied({ what: what(pid), why: `${maxHolds} terminals are held already` }))
        }
        const hold: Hold = { token: randomBytes(18).toString("base64url"), by, since: now }
        holds.set(pid, { hold, renewedAt: now })
        return Effect.succeed(hold)
      }),
    renew: (pid, token) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const entry = live(pid, now)
        if (entry === undefined || entry.hold.token !== token) {
          return Effect.fail(new AccessDenied({ what: what(pid), why: "you do not hold it (take it over first; a hold lapses after 30 s unheard)" }))
        }
        entry.renewedAt = now
        return Effect.succeed(entry.hold)
      }),
    release: (pid, token) =>
      Effect.sync(() => {
        if (holds.get(pid)?.hold.token === token) holds.delete(pid)
      })
  })
})

export const layer = Layer.effect(TerminalHolds, make)
