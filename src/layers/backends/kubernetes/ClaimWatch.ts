/**
 * What the cluster says of our SandboxClaims, followed with one list-and-watch for all of them (an
 * informer, the way controllers follow objects): one stream however many computers, instead of a
 * poll per computer. The last state of each claim is kept; waiters are told when the claim they
 * wait for changes, and connections when theirs goes.
 *
 * The watch starts from the list's resourceVersion and goes on from the last event's when it ends
 * (servers end watches every few minutes); a 410 Gone (that version is no longer kept) lists
 * again. A failure is retried after a pause that doubles up to RETRY_MAX_MS; the waiters do not
 * fail meanwhile, only their own timeouts end them.
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { ProviderError } from "../../../domain/Errors.js"
import type { KubeApi } from "./KubeApi.js"
import { claimsPath, type KubeObject } from "./SandboxObjects.js"

const RETRY_MIN_MS = 200
const RETRY_MAX_MS = 5_000
/** A watch is asked to end after this long (the server may end it sooner): then it starts again. */
const WATCH_SECONDS = 300

export interface ClaimWatch {
  /** The claim as last seen; none when it does not exist (or has not been seen yet). */
  readonly current: (name: string) => Option.Option<KubeObject>
  /**
   * Waits until `done` says something of the claim (a value), or the claim is deleted (none);
   * answers at once when the last state already says it. `absent`: a claim that is not there
   * now is gone (waiting for a delete), rather than not seen yet (waiting for a create).
   */
  readonly until: <A>(name: string, done: (claim: KubeObject) => A | undefined, absent?: "gone" | "wait") => Effect.Effect<Option.Option<A>>
  /** Has the watch read the cluster's list once (waiters can trust `current`)? */
  readonly synced: Effect.Effect<void>
}

interface Waiter {
  readonly check: (claim: KubeObject | undefined) => boolean
}

export const make = (api: KubeApi, namespace: string, selector: string): Effect.Effect<ClaimWatch, never, Scope.Scope> =>
  Effect.gen(function*() {
    const claims = new Map<string, KubeObject>()
    const waiters = new Map<string, Set<Waiter>>()
    const synced = yield* Deferred.make<void>()
    let version = ""

    const notify = (name: string) => {
      const waiting = waiters.get(name)
      if (waiting === undefined) return
      const claim = claims.get(name)
      for (const waiter of [...waiting]) if (waiter.check(claim)) waiting.delete(waiter)
      if (waiting.size === 0) waiters.delete(name)
    }

    const list = Effect.gen(function*() {
      const answer = yield* api.call<{ metadata: { resourceVersion: string }; items: Array<KubeObject> }>({
        method: "GET",
        path: claimsPath(namespace),
        query: { labelSelector: selector },
        operation: "list the SandboxClaims"
      })
      const seen = new Set<string>()
      for (const item of answer.items) {
        seen.add(item["metadata"]["name"])
        claims.set(item["metadata"]["name"], item)
      }
      for (const name of [...claims.keys()]) if (!seen.has(name)) claims.delete(name)
      version = answer.metadata.resourceVersion
      for (const name of new Set([...seen, ...waiters.keys()])) notify(name)
      yield* Deferred.succeed(synced, undefined)
    })

    const onEvent = (line: string) => {
      let event: { type?: string; object?: KubeObject }
      try {
        event = JSON.parse(line)
      } catch {
        return
      }
      const object = event.object
      if (object === undefined) return
      if (event.type === "ERROR") {
        // A Status in the stream: 410 means list again.
        if (object["code"] === 410) version = ""
        return
      }
      if (typeof object["metadata"]?.["resourceVersion"] === "string") version = object["metadata"]["resourceVersion"]
      if (event.type === "BOOKMARK") return
      const name = object["metadata"]["name"]
      if (event.type === "DELETED") claims.delete(name)
      else claims.set(name, object)
      notify(name)
    }

    const watch: Effect.Effect<void, ProviderError> = Effect.suspend(() =>
      api.stream({
        method: "GET",
        path: claimsPath(namespace),
        query: { labelSelector: selector, watch: "true", resourceVersion: version, allowWatchBookmarks: "true", timeoutSeconds: String(WATCH_SECONDS) },
        operation: "watch the SandboxClaims"
      }, onEvent)
    )

    let pause = RETRY_MIN_MS
    const loop: Effect.Effect<void> = Effect.gen(function*() {
      const outcome = yield* Effect.either(version === "" ? list.pipe(Effect.zipRight(watch)) : watch)
      if (outcome._tag === "Left") {
        if (outcome.left.reason === "Conflict") version = "" // 410: too old
        yield* Effect.logDebug(`kubernetes backend: following the SandboxClaims: ${outcome.left.message}; again in ${pause} ms`)
        yield* Effect.sleep(Duration.millis(pause))
        pause = Math.min(pause * 2, RETRY_MAX_MS)
      } else pause = RETRY_MIN_MS
    }).pipe(Effect.forever)
    yield* Effect.forkScoped(loop)

    const until = <A>(name: string, done: (claim: KubeObject) => A | undefined, absent: "gone" | "wait" = "wait"): Effect.Effect<Option.Option<A>> =>
      Effect.gen(function*() {
        const answer = yield* Deferred.make<Option.Option<A>>()
        const waiter: Waiter = {
          check: (claim) => {
            if (claim === undefined) {
              Deferred.unsafeDone(answer, Effect.succeed(Option.none()))
              return true
            }
            const value = done(claim)
            if (value === undefined) return false
            Deferred.unsafeDone(answer, Effect.succeed(Option.some(value)))
            return true
          }
        }
        yield* Deferred.await(synced)
        const existing = claims.get(name)
        if (existing === undefined && absent === "gone") return Option.none()
        if (existing !== undefined) {
          const value = done(existing)
          if (value !== undefined) return Option.some(value)
        }
        const set = waiters.get(name) ?? new Set<Waiter>()
        set.add(waiter)
        waiters.set(name, set)
        return yield* Deferred.await(answer).pipe(
          Effect.ensuring(Effect.sync(() => {
            set.delete(waiter)
            if (set.size === 0 && waiters.get(name) === set) waiters.delete(name)
          }))
        )
      })

    return {
      current: (name) => Option.fromNullable(claims.get(name)),
      until,
      synced: Deferred.await(synced)
    }
  })
