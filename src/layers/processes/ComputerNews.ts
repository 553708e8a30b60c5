/**
 * Which default computer each session was last told of: spawn names a session's computer once, the
 * first time (and when it changes), not in every result. Bounded: the oldest sessions are forgotten
 * past `limit` (they are told again, which is harmless).
 */
import * as Effect from "effect/Effect"

export type ComputerNews = (
  session: string,
  /** The computer_id the call named itself: nothing to tell. */
  named: string | undefined,
  computerId: string
) => Effect.Effect<{ readonly computer_id?: string }>

export const make = (limit = 10_000): ComputerNews => {
  const told = new Map<string, string>()
  return (session, named, computerId) =>
    Effect.sync(() => {
      if (named !== undefined || told.get(session) === computerId) return {}
      // Re-inserted, so that the map's order is the order of the latest news.
      told.delete(session)
      told.set(session, computerId)
      if (told.size > limit) told.delete(told.keys().next().value!)
      return { computer_id: computerId }
    })
}
