/**
 * The Fly Machines API's rate limit, kept on our side so that we never depend on being told:
 * one token bucket per action and machine (or app), refilled continuously at `perSecond` up to
 * `burst` tokens (Fly documents 1 request/s with a burst of 3 per action and machine, and 5/s with
 * a burst of 10 for Get Machine). Every request takes a token first, retries included, so a
 * refusal (429) with or without `Retry-After` is the exception, not the regulator.
 *
 * `reserve` lets background work (output polling) leave tokens for interactive work: a poll
 * taking with reserve 1 waits until two tokens are there and takes one. After a 429 no token is
 * given until the time the API asked for (or one refill period when it said nothing), then one.
 *
 * Time is read from `Clock`, so the behaviour is tested with `TestClock`.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Ref from "effect/Ref"

export interface Limit {
  /** Tokens added per second. */
  readonly perSecond: number
  /** Most tokens a bucket holds. */
  readonly burst: number
}

/** Which bucket: the action (exec, get, start, …) and what it is counted per (a machine id, or the app). */
export interface BudgetKey {
  readonly action: string
  readonly scope: string
}

interface Bucket {
  readonly tokens: number
  /** When `tokens` was computed (Clock millis). */
  readonly at: number
  /** No token before this time (after a refusal). */
  readonly blockedUntil: number
}

export interface RequestBudget {
  /** Waits for a token of this bucket and takes it. `reserve`: tokens that must stay after taking. */
  readonly take: (key: BudgetKey, options?: { readonly reserve?: number }) => Effect.Effect<void>
  /** Tokens available now (fractional). */
  readonly available: (key: BudgetKey) => Effect.Effect<number>
  /** The API refused a request of this bucket: no token until `afterMs` from now (at least one refill period). */
  readonly refused: (key: BudgetKey, afterMs: number | undefined) => Effect.Effect<void>
  /** The limit of an action. */
  readonly limitOf: (action: string) => Limit
}

/** Fly's documented limits: 1/s burst 3 for every action, Get Machine 5/s burst 10. */
export const FLY_LIMITS = {
  perAction: { perSecond: 1, burst: 3 } satisfies Limit,
  get: { perSecond: 5, burst: 10 } satisfies Limit
} as const

const keyOf = (key: BudgetKey) => `${key.action} ${key.scope}`

/**
 * Our buckets refill a little slower than Fly's: a token is taken when a request leaves and Fly
 * counts it when it arrives, so latency that varies between requests would otherwise make us
 * believe in a token Fly does not have yet.
 */
export const SAFETY = 0.95

export const make = (limits: { readonly perAction: Limit; readonly get?: Limit | undefined }): Effect.Effect<RequestBudget> =>
  Effect.gen(function*() {
    const buckets = yield* Ref.make(new Map<string, Bucket>())
    const limitOf = (action: string): Limit => (action === "get" && limits.get !== undefined ? limits.get : limits.perAction)

    const refill = (limit: Limit, bucket: Bucket | undefined, now: number): Bucket => {
      if (bucket === undefined) return { tokens: limit.burst, at: now, blockedUntil: 0 }
      if (now <= bucket.blockedUntil) return bucket
      const from = Math.max(bucket.at, bucket.blockedUntil)
      const tokens = Math.min(limit.burst, bucket.tokens + (Math.max(0, now - from) / 1000) * limit.perSecond * SAFETY)
      return { tokens, at: now, blockedUntil: bucket.blockedUntil }
    }

    /** Takes a token when there is one; else says how long to wait before asking again. */
    const attempt = (key: BudgetKey, reserve: number) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Ref.modify(buckets, (map): [number, Map<string, Bucket>] => {
          const limit = limitOf(key.action)
          const name = keyOf(key)
          const bucket = refill(limit, map.get(name), now)
          // Never ask for more than the bucket can hold: a reserve larger than the burst would wait forever.
          const needed = Math.min(limit.burst, 1 + Math.max(0, reserve))
          const next = new Map(map)
          if (now >= bucket.blockedUntil && bucket.tokens >= needed) {
            next.set(name, { ...bucket, tokens: bucket.tokens - 1 })
            return [0, next]
          }
          next.set(name, bucket)
          const blocked = Math.max(0, bucket.blockedUntil - now)
          const refillMs = ((needed - bucket.tokens) / limit.perSecond) * 1000
          return [Math.max(1, Math.ceil(Math.max(blocked, refillMs))), next]
        }))

    const take = (key: BudgetKey, options?: { readonly reserve?: number }) =>
      Effect.gen(function*() {
        for (;;) {
          const waitMs = yield* attempt(key, options?.reserve ?? 0)
          if (waitMs === 0) return
          yield* Effect.sleep(Duration.millis(waitMs))
        }
      })

    const available = (key: BudgetKey) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Effect.map(Ref.get(buckets), (map) => refill(limitOf(key.action), map.get(keyOf(key)), now).tokens))

    const refused = (key: BudgetKey, afterMs: number | undefined) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Ref.update(buckets, (map) => {
          const limit = limitOf(key.action)
          const wait = Math.max(afterMs ?? 0, 1000 / limit.perSecond)
          const next = new Map(map)
          // The API said when it takes the next request (or one refill period when it said nothing).
          next.set(keyOf(key), { tokens: 1, at: now + wait, blockedUntil: now + wait })
          return next
        }))

    return { take, available, refused, limitOf }
  })
