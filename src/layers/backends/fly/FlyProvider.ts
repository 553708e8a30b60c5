/**
 * The Fly Machines provider: small effects over the Machines API, one per thing the kernel asks
 * (find by metadata, create, start, restart, remove, renew the lease, connect), with no lifecycle
 * state of their own.
 *
 * A machine is created with the supervisor (FlyScripts.ts) as its main process: the script is put
 * on the machine by `config.files` and run by `config.init.exec`, so the image's own command never
 * runs and every process of ours is the supervisor's child. Restart policy `no` (temporary) or
 * `always` (permanent), `auto_destroy` for temporary machines, and `rootfs.persist` `restart`
 * (temporary: the state survives a restart and goes with the machine) or `always` (permanent).
 * With `--fly-preview-port`, the machine's services serve those ports on public ports of its own
 * (FlyPreviews.ts), chosen one machine at a time and checked again once it runs.
 */
import type * as Scope from "effect/Scope"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import { InvalidInput } from "../../../domain/Errors.js"
import type { ComputerMetadata } from "../../../domain/ComputerMetadata.js"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Connection, Instance, InstanceState, Query } from "../../../services/Backend.js"
import type { FlyApi, Machine } from "./FlyApi.js"
import * as FlyConnection from "./FlyConnection.js"
import { flyError, toProviderError } from "./FlyError.js"
import * as FlyPreviews from "./FlyPreviews.js"
import * as FlyMetadata from "./FlyMetadata.js"
import * as FlyWatcher from "./FlyWatcher.js"
import * as Scripts from "./FlyScripts.js"
import type { RequestBudget } from "./RequestBudget.js"

export const HOME = "/home/agent"

/**
 * The kernel's word for a Fly state where it has one; a state in between (`starting`, `stopping`,
 * `suspending`, `replacing`, …) stays Fly's own word, so that `start` knows what to wait for.
 */
export const stateOf = (flyState: string): InstanceState =>
  flyState === "started"
    ? "running"
    : FlyWatcher.GONE_STATES.has(flyState)
    ? "gone"
    : flyState === "suspended"
    ? "paused"
    : flyState === "stopped" || flyState === "failed"
    ? "stopped"
    : flyState

/** Fly states of a machine that is coming up by itself. */
const COMING_UP: ReadonlySet<string> = new Set(["starting", "replacing", "updating"])

export const instanceOf = (machine: Machine): Option.Option<Instance> =>
  Option.map(FlyMetadata.decode(machine), (metadata) => ({ providerId: machine.id, metadata, state: stateOf(machine.state) }))

export interface ProviderOptions {
  readonly api: FlyApi
  readonly app: string
  /** Ports inside new machines that Fly's proxy serves (preview URLs). */
  readonly previewPorts: ReadonlyArray<number>
  readonly budget: RequestBudget
  readonly watcher: FlyWatcher.FlyWatcher
  readonly region: string | undefined
  readonly guest: { readonly cpu_kind: "shared" | "performance"; readonly cpus: number; readonly memory_mb: number }
  readonly rootfsSizeGb: number | undefined
  /** Budget for a machine to reach `started` / `destroyed`. */
  readonly startTimeoutMs: number
  /** `timeout` of one `/wait` call, seconds (the API's maximum is 60). */
  readonly waitTimeoutSeconds: number
  readonly connection: FlyConnection.ConnectionTuning
}

/** The body of a create call: our metadata, the supervisor as the main process. */
export const createBody = (
  options: Pick<ProviderOptions, "region" | "guest" | "rootfsSizeGb">,
  metadata: ComputerMetadata,
  services: ReadonlyArray<ReturnType<typeof FlyPreviews.services>[number]> = []
) => ({
  name: FlyMetadata.machineName(metadata.id),
  ...(options.region === undefined ? {} : { region: options.region }),
  config: {
    image: metadata.image,
    guest: options.guest,
    metadata: FlyMetadata.encode(metadata),
    init: { exec: ["/bin/sh", Scripts.SUPERVISOR_PATH] },
    files: [{ guest_path: Scripts.SUPERVISOR_PATH, raw_value: Buffer.from(Scripts.SUPERVISOR).toString("base64"), mode: 0o755 }],
    restart: { policy: metadata.temporary ? "no" : "always" },
    auto_destroy: metadata.temporary,
    rootfs: {
      persist: metadata.temporary ? "restart" : "always",
      ...(options.rootfsSizeGb === undefined ? {} : { size_gb: options.rootfsSizeGb })
    },
    ...(services.length === 0 ? {} : { services })
  }
})

export const make = (options: ProviderOptions) => {
  const { api } = options
  const failed = (error: Parameters<typeof toProviderError>[0]) => toProviderError(error)
  // One machine at a time picks its public ports: the next one sees them taken.
  const choosing = Effect.unsafeMakeSemaphore(1)

  /** Our machines (not gone), by computer id and/or temporary. */
  const find = (query: Query): Effect.Effect<ReadonlyArray<Instance>, ProviderError> =>
    api.list(FlyMetadata.filter(query)).pipe(
      Effect.mapError(failed),
      Effect.map((machines) =>
        machines.flatMap((machine) =>
          Option.match(instanceOf(machine), {
            onNone: () => [],
            onSome: (instance) =>
              instance.state === "gone" ||
                (query.id !== undefined && instance.metadata.id !== query.id) ||
                (query.temporary !== undefined && instance.metadata.temporary !== query.temporary)
                ? []
                : [instance]
          })
        )
      )
    )

  /**
   * Waits (bounded) for a state; a 408 from /wait just means "ask again". `stopped` is waited for
   * on the instance that is stopping (`instanceId`, required by Fly for that state).
   */
  const waitFor = (
    machineId: string,
    state: "started" | "destroyed" | "stopped" | "suspended",
    instanceId?: string
  ): Effect.Effect<void, ProviderError> =>
    Effect.gen(function*() {
      const operation = `wait for machine ${machineId} to be ${state}`
      const deadline = (yield* Clock.currentTimeMillis) + options.startTimeoutMs
      for (;;) {
        const remaining = Math.ceil((deadline - (yield* Clock.currentTimeMillis)) / 1000)
        if (remaining <= 0) break
        const reached = yield* api.wait(machineId, state, Math.max(1, Math.min(options.waitTimeoutSeconds, remaining)), instanceId).pipe(
          Effect.catchIf((error) => state === "destroyed" && error.reason === "NotFound", () => Effect.succeed(true)),
          Effect.mapError(failed)
        )
        if (reached) return
        const now = yield* FlyWatcher.look(api, machineId).pipe(Effect.mapError(failed))
        if (Option.isNone(now)) {
          if (state === "destroyed") return
          return yield* flyError(operation, "NotFound", "it disappeared while starting")
        }
        if (now.value === state) return
        if (state === "started" && FlyWatcher.GONE_STATES.has(now.value)) return yield* flyError(operation, "Failed", `it is ${now.value} instead`)
        yield* Effect.sleep(Duration.millis(100))
      }
      return yield* flyError(operation, "Timeout", `it did not become ${state} within ${Math.round(options.startTimeoutMs / 1000)} s`)
    })

  /**
   * Destroyed, and waited for until it is: the name is free again when this returns (a factory
   * reset creates the same name next). A machine that is already gone is fine.
   */
  const remove = (instance: Instance) =>
    api.destroy(instance.providerId).pipe(
      Effect.asVoid,
      Effect.catchIf((error) => error.reason === "NotFound", () => Effect.void),
      Effect.mapError(failed),
      Effect.andThen(waitFor(instance.providerId, "destroyed"))
    )

  /** Created and started; a machine that never comes up is removed rather than left behind. A taken name is a Conflict. */
  const create = (metadata: ComputerMetadata): Effect.Effect<Instance, ProviderError> =>
    Effect.gen(function*() {
      const name = FlyMetadata.machineName(metadata.id)
      const created = (services: ReturnType<typeof FlyPreviews.services>) => api.create(createBody(options, metadata, services)).pipe(
        Effect.mapError((error) =>
          error.reason === "Conflict"
            ? flyError(
              `create machine ${name}`,
              "Conflict",
              `the name is taken (${error.said}); a machine of that name that kilntainers did not create for computer '${metadata.id}' is left untouched: remove or rename it, or use another computer id`,
              error
            )
            : toProviderError(error)
        )
      )
      const machine = options.previewPorts.length === 0 ? yield* created([]) : yield* choosing.withPermits(1)(
        Effect.gen(function*() {
          const taken = FlyPreviews.takenPorts(yield* api.list({}).pipe(Effect.mapError(failed)))
          const start = yield* Random.nextIntBetween(FlyPreviews.PUBLIC_FIRST, FlyPreviews.PUBLIC_LAST + 1)
          const ports = FlyPreviews.allocate(options.previewPorts, taken, start)
          if (ports === undefined) return yield* flyError(`create machine ${name}`, "Quota", `no free public ports for preview services (${FlyPreviews.PUBLIC_FIRST}–${FlyPreviews.PUBLIC_LAST}) in app ${options.app}`)
          return yield* created(FlyPreviews.services(options.previewPorts, ports))
        })
      )
      yield* waitFor(machine.id, "started").pipe(Effect.tapError(() => api.destroy(machine.id).pipe(Effect.ignore)))
      if (options.previewPorts.length > 0) {
        // Another server of the app may have picked the same public port at the same moment: Fly would
        // balance it between two computers. Such a machine is removed rather than shared.
        const mine = FlyPreviews.takenPorts([{ ...machine, state: "started" }])
        const others = FlyPreviews.takenPorts((yield* api.list({}).pipe(Effect.mapError(failed))).filter((other) => other.id !== machine.id))
        const shared = [...mine].filter((port) => others.has(port))
        if (shared.length > 0) {
          yield* remove({ providerId: machine.id, metadata, state: "running" }).pipe(Effect.ignore)
          return yield* flyError(`create machine ${name}`, "Conflict", `another machine of app ${options.app} took public port ${shared.join(", ")} at the same moment; try again`)
        }
      }
      yield* Effect.logInfo(`fly backend: created machine ${machine.id} (${name}) from ${metadata.image}${metadata.temporary ? ", temporary" : ""}`)
      return { providerId: machine.id, metadata, state: "running" } satisfies Instance
    })

  /** A stopped or suspended machine runs again. */
  const start = (instance: Instance): Effect.Effect<Instance, ProviderError> =>
    Effect.gen(function*() {
      const machineId = instance.providerId
      if (instance.state === "running") return instance
      if (instance.state === "gone") return yield* flyError(`start machine ${machineId}`, "NotFound", "it was destroyed")
      if (COMING_UP.has(instance.state)) {
        // Already on its way: asking to start it again would be refused as a failed precondition.
        yield* waitFor(machineId, "started")
        return { ...instance, state: "running" }
      }
      if (instance.state === "stopping") {
        // A start would be refused until the stop is done: wait for it, on the instance that stops.
        const machine = yield* api.get(machineId).pipe(Effect.mapError(failed))
        if (machine.state === "stopping") yield* waitFor(machineId, "stopped", machine.instance_id ?? undefined)
      } else if (instance.state === "suspending") {
        yield* waitFor(machineId, "suspended")
      }
      yield* api.start(machineId).pipe(Effect.mapError(failed))
      yield* waitFor(machineId, "started")
      return { ...instance, state: "running" }
    })

  /** Restarts the machine; its root filesystem is kept (`rootfs.persist`). */
  const restart = (instance: Instance): Effect.Effect<Instance, ProviderError> =>
    api.restart(instance.providerId).pipe(
      Effect.mapError(failed),
      Effect.andThen(waitFor(instance.providerId, "started")),
      Effect.as({ ...instance, state: "running" })
    )

  /** The lease of the machine now ends at `until` (the kernel renews it while it holds the computer). */
  const renew = (instance: Instance, until: number): Effect.Effect<Instance, ProviderError> => {
    const expires = new Date(until).toISOString()
    return api.setMetadata(instance.providerId, FlyMetadata.EXPIRES, expires).pipe(
      Effect.mapError(failed),
      Effect.as({ ...instance, metadata: { ...instance.metadata, expires } })
    )
  }

  /** Follows the machine's processes until the Scope closes. */
  /** The URL Fly's proxy serves a port of the machine at (its services, made with it). */
  const publicUrl = (machineId: string) => (port: number): Effect.Effect<string, ProviderError | InvalidInput> =>
    Effect.gen(function*() {
      const machine = yield* api.get(machineId).pipe(Effect.mapError(failed))
      const publicPort = FlyPreviews.publicPortOf(machine, port)
      if (publicPort !== undefined) return FlyPreviews.urlOf(options.app, publicPort)
      const served = FlyPreviews.servedPorts(machine)
      return yield* new InvalidInput({
        message: `port ${port} has no Fly service on this machine: ports are served when the machine is made ` +
          `(--fly-preview-port; this computer's: ${served.length === 0 ? "none" : served.join(", ")})`
      })
    })

  const connect = (instance: Instance): Effect.Effect<Connection, ProviderError, Scope.Scope> =>
    Effect.map(FlyConnection.connect({
      api,
      budget: options.budget,
      machineId: instance.providerId,
      computerId: instance.metadata.id,
      disposable: instance.metadata.temporary,
      home: HOME,
      tuning: options.connection,
      check: FlyWatcher.check(api, instance.providerId),
      watch: options.watcher.watch
    }), (connection) => ({ ...connection, publicUrl: publicUrl(instance.providerId) }))

  return { find, create, start, restart, remove, renew, connect }
}

export type FlyProvider = ReturnType<typeof make>
