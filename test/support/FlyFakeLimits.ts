/**
 * The Fly fake's rate limit: Fly's documented token buckets (1 request/s, burst 3 per action and
 * machine; Get Machine 5/s, burst 10), one bucket per key, refilled continuously.
 */
export interface RateLimit {
  readonly perSecond: number
  readonly burst: number
}

export const FLY_LIMIT: RateLimit = { perSecond: 1, burst: 3 }
export const GET_LIMIT: RateLimit = { perSecond: 5, burst: 10 }

export class Buckets {
  private readonly buckets = new Map<string, { tokens: number; last: number }>()

  /** Takes a token of the key's bucket (none when there is no limit), or answers the seconds until one is there. */
  take(key: string, limit: RateLimit | undefined): number | undefined {
    if (limit === undefined) return undefined
    const now = Date.now()
    const bucket = this.buckets.get(key) ?? { tokens: limit.burst, last: now }
    bucket.tokens = Math.min(limit.burst, bucket.tokens + ((now - bucket.last) / 1000) * limit.perSecond)
    bucket.last = now
    this.buckets.set(key, bucket)
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1
      return undefined
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / limit.perSecond))
  }
}
