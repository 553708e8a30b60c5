/**
 * Watching the machines of open connections for loss with one list call per period for all of
 * them (listing is counted per app: one call, however many computers), and asking a machine's own
 * state (`GET …/{id}`) only for those the list shows down or no longer has. Whether a machine is
 * still there is always asked of the provider, never inferred from the status of a failed exec:
 * the exec endpoint documents only 200 and 400.
 */
import type * as Scope from "effect/Scope"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import type { FlyApi } from "./FlyApi.js"
import * as FlyMetadata from "./FlyMetadata.js"

/** Fly states of a machine that is going or gone, and of one that is down (stopped, suspended, failed). */
export const GONE_STATES: ReadonlySet<string> = new Set(["destroying", "destroyed"])
export const DOWN_STATES: ReadonlySet<string> = new Set(["stopping", "stopped", "suspending", "suspended", "failed"])

/** What the watcher asks of the API. */
export type WatcherApi = Pick<FlyApi, "list" | "get">

/** The machine's Fly state now; none when it does not exist any more. */
export const look = (api: WatcherApi, machineId: string) =>
  api.get(machineId).pipe(
    Effect.map((machine) => Option.some(machine.state)),
    Effect.catchIf((error) => error.reason === "NotFound", () => Effect.succeed(Option.none<string>()))
  )

/** A sentence when the machine is gone or down; none while it runs (or cannot be asked). */
export const check = (api: WatcherApi, machineId: string): Effect.Effect<Option.Option<string>> =>
  look(api, machineId).pipe(
    Effect.map((state) => {
      if (Option.isNone(state) || GONE_STATES.has(state.value)) return Option.some(`its machine ${machineId} was destroyed outside kilntainers`)
      if (DOWN_STATES.has(state.value)) return Option.some(`its machine ${machineId} was stopped outside kilntainers (state ${state.value})`)
      return Option.none<string>()
    }),
    Effect.orElseSucceed(() => Option.none<string>())
  )

export interface FlyWatcher {
  /** Watches the machine until the Scope closes; `gone` is told what happened when it goes. */
  readonly watch: (machineId: string, gone: (why: string) => Effect.Effect<void>) => Effect.Effect<void, never, Scope.Scope>
}

/** The watcher of one backend; its loop lives as long as the Scope (the backend layer's). */
export const make = (api: WatcherApi, intervalMs: number): Effect.Effect<FlyWatcher, never, Scope.Scope> =>
  Effect.gen(function*() {
    const watched = new Map<string, (why: string) => Effect.Effect<void>>()

    yield* Effect.gen(function*() {
      if (watched.size === 0) return
      const machines = yield* api.list(FlyMetadata.filter({}))
      const states = new Map(machines.map((machine) => [machine.id, machine.state]))
      for (const [machineId, gone] of [...watched]) {
        const state = states.get(machineId)
        if (state !== undefined && !GONE_STATES.has(state) && !DOWN_STATES.has(state)) continue
        const why = yield* check(api, machineId)
        if (Option.isSome(why) && watched.get(machineId) === gone) yield* gone(why.value)
      }
    }).pipe(
      Effect.catchAll((error) => Effect.logDebug(`fly backend: watcher: ${error.message}`)),
      Effect.repeat(Schedule.spaced(Duration.millis(intervalMs))),
      Effect.forkScoped
    )

    return {
      watch: (machineId, gone) =>
        Effect.acquireRelease(
          Effect.sync(() => void watched.set(machineId, gone)),
          () => Effect.sync(() => void (watched.get(machineId) === gone && watched.delete(machineId)))
        )
    }
  })
