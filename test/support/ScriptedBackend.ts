import { Clock, Deferred, Effect, Layer, Option } from "effect"
import type { ComputerMetadata } from "../../src/domain/ComputerMetadata.js"
import { providerError, SpawnFailed, Unsupported } from "../../src/domain/Errors.js"
import {
  Backend,
  type Capabilities,
  type Instance,
  type Renewal,
  type SpawnSpec
} from "../../src/services/Backend.js"
import * as ScriptedProcess from "./ScriptedProcess.js"

export type { ScriptedProcess } from "./ScriptedProcess.js"

/** A computer of the scripted provider. */
export interface ScriptedComputer {
  instance: Instance
  /** Connections made to it so far. */
  connections: number
  /** Completes the current connection's `lost`. */
  lose: (reason: string) => Effect.Effect<void>
}

export interface ScriptedOptions {
  readonly capabilities?: Partial<Capabilities>
  readonly renewal?: Omit<Renewal, "renew"> | undefined
  /** How long `create` takes (a Deferred the test completes), when set. */
  readonly gateCreate?: boolean
  /** A provider whose computers cannot be renamed (no warm pool). */
  readonly noAdopt?: boolean
  /** The provider ends each computer this long after its creation (a plan's runtime cap). */
  readonly endsAfterMs?: number
  /** Connections carry the computer's lifecycle lease (Connection.lease), as an agent's do. */
  readonly leases?: boolean
}

/**
 * A fake provider for kernel tests: computers live in a map the test can read and change (as if
 * from outside), every call is logged, and processes are steered by their command (argv[2] of
 * `sh -c`), as ScriptedProcess says; `missing` fails to spawn. A test can hold an operation at a
 * gate (`gate("restart")`: every call of it waits until the gate opens) or make its next call fail.
 */
export const make = (options: ScriptedOptions = {}) => Effect.gen(function*() {
  const spawned: Array<ScriptedProcess.ScriptedProcess> = []
  const calls: Array<string> = []
  const computers = new Map<string, ScriptedComputer>()
  const failNext = new Map<string, string>()
  const createGate = yield* Deferred.make<void>()
  if (!options.gateCreate) yield* Deferred.succeed(createGate, undefined)
  const gates = new Map<string, Deferred.Deferred<void>>()
  /** Provider ids every connection to which fails, with why (an instance that can no longer start). */
  const refused = new Map<string, string>()
  /** The step another server is in, by computer id (it holds the computer's lease). */
  const otherServerStep = new Map<string, string>()
  let counter = 0

  /** Waits while the test holds this operation at a gate. */
  const gated = (operation: string) => Effect.suspend(() => {
    const gate = gates.get(operation)
    return gate === undefined ? Effect.void : Deferred.await(gate)
  })

  const failIfAsked = (operation: string) =>
    Effect.suspend(() => {
      const detail = failNext.get(operation)
      if (detail === undefined) return Effect.void
      failNext.delete(operation)
      return Effect.fail(providerError("scripted", operation, "Failed", detail))
    })

  const spawnIn = (generation: number) => (spec: SpawnSpec) =>
    Effect.gen(function*() {
      const command = spec.argv[spec.argv.length - 1] ?? ""
      if (command === "missing") return yield* new SpawnFailed({ command, reason: "No such file or directory" })
      yield* gated("spawn")
      const scripted = yield* ScriptedProcess.make(spec, {
        pid: spawned.length + 1,
        generation,
        onSignal: (signal) => void calls.push(`signal ${signal}`)
      })
      spawned.push(scripted)
      return scripted.process
    })

  const live = (instance: Instance) =>
    Option.fromNullable(computers.get(instance.providerId)).pipe(
      Option.match({
        onNone: () => Effect.fail(providerError("scripted", "find the computer", "NotFound", `${instance.providerId} is gone`)),
        onSome: Effect.succeed
      })
    )

  const capabilities: Capabilities = {
    pty: false,
    stdin: true,
    signals: true,
    restart: true,
    factoryReset: true,
    persistence: true,
    heldProcesses: false,
    files: false,
    networkControl: false,
    checkpoints: false,
    previews: false,
    ...options.capabilities
  }

  const backend = Backend.of({
    name: "scripted",
    capabilities,
    labelStyle: "dashed",
    image: "scripted-image",
    find: (query) =>
      Effect.sync(() => {
        calls.push(`find ${query.id ?? "*"}`)
        return [...computers.values()].map((c) => c.instance).filter((instance) =>
          (query.id === undefined || instance.metadata.id === query.id) &&
          (query.temporary === undefined || instance.metadata.temporary === query.temporary)
        )
      }),
    create: (metadata: ComputerMetadata) =>
      Effect.gen(function*() {
        calls.push(`create ${metadata.id}`)
        yield* Deferred.await(createGate)
        yield* failIfAsked("create")
        if ([...computers.values()].some((c) => c.instance.metadata.id === metadata.id)) {
          return yield* providerError("scripted", "create", "Conflict", `the name ${metadata.id} is taken`)
        }
        const now = yield* Clock.currentTimeMillis
        const instance: Instance = {
          providerId: `scripted-${++counter}`,
          metadata,
          state: "running",
          ...(options.endsAfterMs === undefined ? {} : { endsAt: now + options.endsAfterMs })
        }
        computers.set(instance.providerId, { instance, connections: 0, lose: () => Effect.void })
        return instance
      }),
    start: (instance) =>
      Effect.gen(function*() {
        calls.push(`start ${instance.metadata.id}`)
        const computer = yield* live(instance)
        computer.instance = { ...computer.instance, state: "running" }
        return computer.instance
      }),
    connect: (instance) =>
      Effect.gen(function*() {
        calls.push(`connect ${instance.metadata.id}`)
        yield* failIfAsked("connect")
        const why = refused.get(instance.providerId)
        if (why !== undefined) return yield* providerError("scripted", "start the computer", "Conflict", why)
        const computer = yield* live(instance)
        const generation = ++computer.connections
        const lost = yield* Deferred.make<string>()
        computer.lose = (reason) => Deferred.succeed(lost, reason).pipe(Effect.asVoid)
        yield* Effect.addFinalizer(() => Effect.sync(() => calls.push(`disconnect ${instance.metadata.id}`)))
        const id = instance.metadata.id
        const lease = (step: string) =>
          Effect.acquireRelease(
            Effect.suspend(() => {
              const other = otherServerStep.get(id)
              if (other !== undefined) {
                return Effect.fail(providerError("scripted", `${step} computer '${id}'`, "Conflict", `another kilntainers server is in its ${other}`))
              }
              calls.push(`lease ${step} ${id}`)
              return Effect.void
            }),
            () => Effect.sync(() => calls.push(`unlease ${step} ${id}`))
          )
        return { home: "/home/agent", spawn: spawnIn(generation), lost: Deferred.await(lost), ...(options.leases ? { lease } : {}) }
      }),
    restart: (instance) =>
      Effect.gen(function*() {
        calls.push(`restart ${instance.metadata.id}`)
        if (!capabilities.restart) return yield* new Unsupported({ backend: "scripted", feature: "restart" })
        yield* gated("restart")
        yield* failIfAsked("restart")
        return (yield* live(instance)).instance
      }),
    remove: (instance) =>
      Effect.gen(function*() {
        calls.push(`remove ${instance.metadata.id}`)
        yield* gated("remove")
        yield* failIfAsked("remove")
        computers.delete(instance.providerId)
      }),
    adopt: options.noAdopt ? undefined : (instance, metadata) =>
      Effect.gen(function*() {
        calls.push(`adopt ${instance.metadata.id} as ${metadata.id}`)
        yield* failIfAsked("adopt")
        const computer = yield* live(instance)
        computer.instance = { ...computer.instance, metadata: { ...metadata, pooled: true } }
        return computer.instance
      }),
    suspend: (instance) => Effect.sync(() => void calls.push(`suspend ${instance.metadata.id}`)),
    renewal: options.renewal === undefined ? undefined : {
      ...options.renewal,
      renew: (instance, until) =>
        Effect.gen(function*() {
          calls.push(`renew ${instance.metadata.id} ${new Date(until).toISOString()}`)
          yield* failIfAsked("renew")
          const computer = computers.get(instance.providerId)
          if (computer) computer.instance = { ...computer.instance, metadata: { ...computer.instance.metadata, expires: new Date(until).toISOString() } }
          return computer?.instance ?? instance
        })
    }
  })

  /** A computer the provider has, as if made by another server or an earlier run. */
  const plant = (metadata: ComputerMetadata, state: Instance["state"] = "running") =>
    Effect.sync(() => {
      const instance: Instance = { providerId: `scripted-${++counter}`, metadata, state }
      computers.set(instance.providerId, { instance, connections: 0, lose: () => Effect.void })
      return instance
    })

  const byId = (id: string) => [...computers.values()].find((c) => c.instance.metadata.id === id)

  return {
    layer: Layer.succeed(Backend, backend),
    backend,
    spawned,
    calls,
    computers,
    byId,
    plant,
    /** The next call of this operation fails with a provider error. */
    failNext: (operation: "create" | "connect" | "restart" | "remove" | "renew" | "adopt", detail: string) =>
      Effect.sync(() => void failNext.set(operation, detail)),
    /** Every later connection to this instance fails with `detail`, as a container that can no longer start. */
    refuseConnect: (providerId: string, detail: string) => Effect.sync(() => void refused.set(providerId, detail)),
    /** Another server takes (a step name) or gives back (undefined) the computer's lease. */
    otherServer: (id: string, step: string | undefined) =>
      Effect.sync(() => void (step === undefined ? otherServerStep.delete(id) : otherServerStep.set(id, step))),
    openCreate: Deferred.succeed(createGate, undefined),
    /** Holds every call of the operation until the answer is run (it opens the gate for good). */
    gate: (operation: "spawn" | "restart" | "remove") =>
      Effect.gen(function*() {
        const gate = yield* Deferred.make<void>()
        gates.set(operation, gate)
        return Effect.zipRight(Effect.sync(() => void gates.delete(operation)), Deferred.succeed(gate, undefined))
      })
  } as const
})
