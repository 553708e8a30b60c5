/**
 * Sessions of the 2026-07-28 protocol, which has none of its own. A session is a principal (the
 * token that authenticated the request) plus, optionally, a key the client chooses and sends in
 * every request's `_meta` under `kilntainers/session`: `alice` for alice's requests without a key,
 * `alice/build-7` with one. A session holds what a 2025 session held — its default computer, the
 * temporary computers it created — on an idle lease: when none of its requests has been seen for
 * the idle timeout and none is in progress, it ends and its temporary computers go with it. Another
 * principal can never name it; another key of the same principal is another session.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"

/** The `_meta` key of the client-chosen session key. */
export const sessionKeyMeta = "kilntainers/session"

/** What a key may be: it shows in logs and spans. */
const keyPattern = /^[A-Za-z0-9._~-]{1,128}$/

interface Lease {
  readonly session: string
  readonly principal: string
  /** When idleness started (the last request's end, or the reaper's first look after one). */
  idleSince: number
  /** A request was seen since the reaper last looked. */
  seen: boolean
  inProgress: number
}

/** A request's session, and what to call when the request is done. */
export type Claim = { readonly session: string; readonly done: () => void } | { readonly refused: string }

export interface SessionLeasesOptions {
  readonly idleTimeout: Duration.Duration
  /** Most sessions of one principal at once. */
  readonly maxPerPrincipal: number
  /** Ends a session: its temporary computers are released. */
  readonly release: (session: string) => Effect.Effect<void>
}

/**
 * The leases of one server. `claim` is synchronous (it runs in the SDK's request handler); idleness
 * is measured by a reaper on `Clock` that notices requests through their `seen` mark.
 */
export const make = (options: SessionLeasesOptions) =>
  Effect.gen(function*() {
    const leases = new Map<string, Lease>()
    const perPrincipal = new Map<string, number>()
    const idleMs = Duration.toMillis(options.idleTimeout)
    const start = yield* Clock.currentTimeMillis

    const claim = (principal: string, key: unknown): Claim => {
      if (key !== undefined && (typeof key !== "string" || !keyPattern.test(key))) {
        return {
          refused: `InvalidInput: _meta["${sessionKeyMeta}"] must be 1-128 letters, digits, '.', '_', '~' or '-' ` +
            `(the key of this client's session), got ${JSON.stringify(key)?.slice(0, 40)}`
        }
      }
      const session = key === undefined ? principal : `${principal}/${key}`
      let lease = leases.get(session)
      if (lease === undefined) {
        const held = perPrincipal.get(principal) ?? 0
        if (held >= options.maxPerPrincipal) {
          return {
            refused: `TooManySessions: ${principal} holds ${held} sessions, its cap; reuse a session key, or let one ` +
              `idle out (its temporary computers then go)`
          }
        }
        perPrincipal.set(principal, held + 1)
        lease = { session, principal, idleSince: start, seen: true, inProgress: 0 }
        leases.set(session, lease)
      }
      const claimed = lease
      claimed.seen = true
      claimed.inProgress++
      let finished = false
      return {
        session,
        done: () => {
          if (finished) return
          finished = true
          claimed.inProgress--
          claimed.seen = true
        }
      }
    }

    const end = (lease: Lease) => {
      leases.delete(lease.session)
      const left = (perPrincipal.get(lease.principal) ?? 1) - 1
      if (left > 0) perPrincipal.set(lease.principal, left)
      else perPrincipal.delete(lease.principal)
    }

    const reap = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      for (const lease of [...leases.values()]) {
        if (lease.seen) {
          lease.seen = false
          lease.idleSince = now
          continue
        }
        if (lease.inProgress === 0 && now - lease.idleSince >= idleMs) {
          end(lease)
          yield* Effect.logInfo(`ending session ${lease.session}: idle for ${Math.round((now - lease.idleSince) / 1000)} s`)
          yield* options.release(lease.session)
        }
      }
    })
    yield* reap.pipe(
      Effect.repeat(Schedule.spaced(Duration.millis(Math.max(100, Math.min(5_000, idleMs / 4))))),
      Effect.forkScoped
    )
    // The server stops: every session ends, and its temporary computers go.
    yield* Effect.addFinalizer(() =>
      Effect.forEach([...leases.values()], (lease) => Effect.zipRight(Effect.sync(() => end(lease)), options.release(lease.session)), {
        discard: true
      })
    )

    return { claim, size: Effect.sync(() => leases.size) } as const
  })

export type SessionLeases = Effect.Effect.Success<ReturnType<typeof make>>
