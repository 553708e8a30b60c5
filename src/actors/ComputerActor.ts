/**
 * A computer as an actor: the one owner of its lifecycle on every backend.
 *
 * It holds the provider's `Instance`, the `Connection` its processes run through (in a child
 * Scope, replaced at every restart, reset or recovery: a new generation), the sessions that hold it,
 * its processes (a FiberMap: a process belongs to its computer, never to the request that started
 * it) and the lease renewal. Lifecycle steps are serialised by one permit: processes end first
 * (SIGTERM, a grace, then kill; `ps` records why), then the provider acts. Nothing outside mutates
 * its state; the provider is a set of stateless calls.
 *
 *   creating ─▶ running ─▶ restarting / resetting / recovering ─▶ running
 *       │          │
 *       ▼          ├─▶ lost (the provider reported it gone; recovered on next use)
 *     failed       └─▶ deleting ─▶ deleted          closing ─▶ closed (released / shutdown)
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Random from "effect/Random"
import * as Scope from "effect/Scope"
import type { ComputerMetadata } from "../domain/ComputerMetadata.js"
import { ComputerUnavailable, type ProviderError, providerError, Unsupported } from "../domain/Errors.js"
import type { Backend, Connection, Instance, SpawnSpec } from "../services/Backend.js"
import type { ProcessRequest } from "../services/Computers.js"
import * as ComputerAudit from "./ComputerAudit.js"
import { computerInfo } from "./ComputerInfo.js"
import * as ExternalComputer from "./ExternalComputer.js"
import * as Spans from "../services/Spans.js"
import type { ComputerActor, ComputerActorOptions, ComputerState, Origin, ServerIdentity } from "./ComputerActorApi.js"
import * as ComputerProcesses from "./ComputerProcesses.js"
import * as LeaseRenewal from "./LeaseRenewal.js"
import { runToCompletion } from "./RunToCompletion.js"

export type { ComputerActor, ComputerActorOptions, ComputerState, Origin, ServerIdentity } from "./ComputerActorApi.js"

const iso = (millis: number) => new Date(millis).toISOString()

/** A fresh random nonce: finds a computer whose create answer was lost. */
const nonce = Effect.map(Random.nextIntBetween(0, 0x7fffffff), (n) => n.toString(36))

/**
 * Runs a computer in the given Scope (the registry's). Creation or attachment proceeds in the
 * actor's own fiber: the actor exists, in state `creating`, from the moment it is made, so a
 * registry can claim an id synchronously and never hold a lock across provider calls.
 */
export const make = (
  backend: Backend["Type"],
  options: ComputerActorOptions,
  origin: Origin
): Effect.Effect<ComputerActor, never, Scope.Scope> =>
  Effect.gen(function*() {
    const actorScope = yield* Effect.scope
    let id = options.id
    let state: ComputerState = "creating"
    let why: string | undefined
    let instance: Instance | undefined
    let connection: { readonly value: Connection; readonly scope: Scope.CloseableScope } | undefined
    let generation = 0
    let createdAt = yield* Clock.currentTimeMillis
    let shared = options.shared
    const owners = new Set(options.session === "" ? [] : [options.session])
    const processes = yield* ComputerProcesses.make({ computerId: () => id, backend: backend.name, killGraceMs: options.killGraceMs })
    const lifecycle = yield* Effect.makeSemaphore(1)
    const ready = yield* Deferred.make<void, ProviderError>()
    // Connections live in a scope made before the actor's finalizer, so they close after it: the
    // finalizer ends the processes while the connection they run through still stands.
    const connections = yield* Scope.fork(actorScope, ExecutionStrategy.sequential)
    const closed = yield* Deferred.make<void>()
    const deleted = yield* Deferred.make<void>()
    const label = () => `computer ${id}`
    /** A step's span and audit entry. */
    const traced = ComputerAudit.lifecycle(options.audit, () => ({ computer: id, backend: backend.name, session: options.session }))
    /** What every lifecycle span of this computer says. */
    const spanned = () => ({
      [Spans.Attr.backend]: backend.name,
      [Spans.Attr.computerId]: id,
      [Spans.Attr.temporary]: options.temporary,
      [Spans.Attr.generation]: generation,
      ...(instance === undefined ? {} : { [Spans.Attr.providerId]: instance.providerId })
    })

    const setInstance = (next: Instance) => {
      instance = next
      const created = Date.parse(next.metadata.created)
      if (!Number.isNaN(created)) createdAt = created
    }

    const disconnect = Effect.suspend(() => {
      const current = connection
      connection = undefined
      return current === undefined ? Effect.void : Scope.close(current.scope, Exit.void)
    })

    /** A lost computer: its processes end (ps says why) and its connection goes. */
    const markLost = (reason: string, forGeneration: number) =>
      Effect.gen(function*() {
        if (state !== "running" || generation !== forGeneration) return
        state = "lost"
        why = reason
        yield* Effect.logWarning(`${label()} was lost: ${reason}`)
        yield* processes.lost(reason)
        yield* disconnect
      }).pipe(traced("lost", () => ({ ...spanned(), [Spans.Attr.reason]: reason }), { root: true }))

    /** Connects to the current instance: a new generation, watched for loss. */
    const connect = Effect.gen(function*() {
      const target = instance!
      const scope = yield* Scope.fork(connections, ExecutionStrategy.sequential)
      const value = yield* backend.connect(target).pipe(
        Scope.extend(scope),
        Effect.onExit((exit) => (Exit.isFailure(exit) ? Scope.close(scope, exit) : Effect.void))
      )
      const current = ++generation
      connection = { value, scope }
      yield* Spans.annotate(() => ({ [Spans.Attr.generation]: current, [Spans.Attr.providerId]: target.providerId }))
      yield* value.lost.pipe(
        Effect.flatMap((reason) => lifecycle.withPermits(1)(markLost(reason, current))),
        Effect.forkIn(scope)
      )
    })

    const metadataFor = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      const metadata: ComputerMetadata = {
        id,
        temporary: options.temporary,
        image: instance?.metadata.image ?? backend.image,
        created: iso(now),
        instance: options.server.instanceId,
        owner: options.server.owner,
        nonce: yield* nonce,
        ...(backend.renewal === undefined ? {} : { expires: iso(now + backend.renewal.leaseMs) }),
        ...(origin._tag === "Create" && origin.pooled && instance === undefined ? { pooled: true } : {})
      }
      return metadata
    })

    /** Creates the computer; a name taken meanwhile by our own computer of the same kind is attached instead. */
    const create = Effect.gen(function*() {
      const metadata = yield* metadataFor
      const created = yield* backend.create(metadata).pipe(
        Effect.catchIf((error) => error.reason === "Conflict", (error) =>
          backend.find({ id }).pipe(
            Effect.flatMap((found) => {
              const ours = found.find((candidate) =>
                candidate.metadata.temporary === options.temporary &&
                (!options.temporary || candidate.metadata.nonce === metadata.nonce)
              )
              return ours === undefined ? Effect.fail(error) : startIfNeeded(ours)
            })
          ))
      )
      setInstance(created)
    })

    const startIfNeeded = (found: Instance) => found.state === "running" ? Effect.succeed(found) : backend.start(found)

    /** The first step: create or attach, then connect. */
    const open = Effect.gen(function*() {
      if (origin._tag === "Create") yield* create
      else setInstance(yield* startIfNeeded(origin.instance))
      yield* connect
      state = "running"
      why = undefined
    })

    yield* lifecycle.withPermits(1)(open).pipe(
      traced(origin._tag === "Create" ? "create" : "attach", () => ({
        ...spanned(),
        ...(origin._tag === "Create" && origin.pooled ? { "kilntainers.computer.pooled": true } : {})
      })),
      Effect.onExit((exit) =>
        Exit.isSuccess(exit)
          ? Deferred.succeed(ready, undefined)
          : Effect.sync(() => {
            state = "failed"
          }).pipe(Effect.zipRight(Deferred.failCause(ready, exit.cause)))
      ),
      Effect.forkScoped
    )

    // Lease renewal / keep-alive: the provider extends the computer's life while this server holds it.
    if (backend.renewal !== undefined) {
      yield* LeaseRenewal.keep(backend.renewal, {
        current: () => (state === "running" ? instance : undefined),
        renewed: (before, after) => {
          if (instance === before) instance = after
        },
        traced: spanned,
        label
      })
    }

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        const wasDeleted = state === "deleted"
        state = wasDeleted ? "deleted" : "closing"
        yield* processes.endAll(`${label()} closed`)
        yield* disconnect
        if (!wasDeleted && instance !== undefined) {
          const target = instance
          const release = options.temporary ? backend.remove(target) : (backend.suspend?.(target) ?? Effect.void)
          yield* release.pipe(
            Effect.interruptible,
            Effect.timeout(Duration.seconds(60)),
            Effect.catchAll((error) => Effect.logWarning(`${label()}: cannot release it: ${String(error)}`))
          )
        }
        if (!wasDeleted) state = "closed"
        yield* Deferred.succeed(closed, undefined)
      }).pipe(traced("release", () => ({
        ...spanned(),
        "kilntainers.computer.release": state === "deleted" ? "none" : options.temporary ? "remove" : "suspend"
      })))
    )

    const usable = Effect.suspend(() =>
      state === "running" && connection !== undefined
        ? Effect.succeed(connection.value)
        : Effect.fail(new ComputerUnavailable({ id, state, ...(why === undefined ? {} : { why }) }))
    )

    const spawn = (request: ProcessRequest) => Effect.flatMap(usable, (target) => processes.spawn(target, request))

    const run = (spec: SpawnSpec, stdin: Uint8Array | undefined, maxBytes: number) =>
      Effect.flatMap(usable, (target) => runToCompletion(target, spec, stdin, maxBytes))

    /** A serialised lifecycle step: processes end first, then the provider acts, then a new connection. */
    const step = <E>(during: ComputerState, done: string, name: Spans.LifecycleStep, act: Effect.Effect<void, E>) =>
      lifecycle.withPermits(1)(
        Effect.gen(function*() {
          if (state === "deleted" || state === "closing" || state === "closed") {
            return yield* new ComputerUnavailable({ id, state })
          }
          state = during
          yield* processes.endAll(`${label()} ${done}`)
          yield* disconnect
          yield* act.pipe(Effect.onExit((exit) =>
            Effect.sync(() => {
              if (Exit.isSuccess(exit)) {
                state = "running"
                why = undefined
              } else {
                state = "lost"
                why = `${done.replace(/ed$/, "")} failed`
              }
            })
          ))
        }).pipe(traced(name, spanned))
      )

    const unsupported = (feature: string) => new Unsupported({ backend: backend.name, feature })

    /** Adopted computers refuse restart, reset and delete before any process is touched. */
    const unlessExternal = <A, E>(what: string, effect: Effect.Effect<A, E>) =>
      Effect.zipRight(Effect.suspend(() => ExternalComputer.refuse(backend.name, instance, what)), effect)

    const restart = backend.capabilities.restart ? unlessExternal("restart", step("restarting", "restarted", "restart", Effect.gen(function*() {
      setInstance(yield* backend.restart(instance!))
      yield* connect
    }))) : Effect.fail(unsupported("restarting a computer while keeping its files"))

    const factoryReset = backend.capabilities.factoryReset ? unlessExternal("factory reset", step("resetting", "factory reset", "reset", Effect.gen(function*() {
      yield* backend.remove(instance!)
      yield* create
      yield* connect
    }))) : Effect.fail(unsupported("factory reset"))

    const recover = lifecycle.withPermits(1)(Effect.gen(function*() {
      if (state !== "lost") return
      state = "recovering"
      yield* Effect.logInfo(`${label()} was lost; opening it again`)
      const found = yield* backend.find({ id })
      const ours = found.find((candidate) => candidate.metadata.temporary === options.temporary && candidate.state !== "gone")
      if (ours !== undefined) setInstance(yield* startIfNeeded(ours))
      else yield* create
      yield* connect
      state = "running"
      why = undefined
    }).pipe(
      Effect.tapError(() => Effect.sync(() => {
        state = "lost"
      })),
      traced("recover", spanned)
    ))

    const destroy = unlessExternal("delete", lifecycle.withPermits(1)(Effect.gen(function*() {
      if (state === "deleted") return
      state = "deleting"
      yield* processes.endAll(`${label()} deleted`)
      yield* disconnect
      if (instance !== undefined) yield* backend.remove(instance)
      state = "deleted"
      yield* Deferred.succeed(deleted, undefined)
    }).pipe(
      Effect.tapError(() => Effect.sync(() => {
        state = "lost"
        why = "delete failed"
      })),
      traced("delete", spanned)
    )))

    const liveProcesses = processes.running

    const info = Effect.gen(function*() {
      const facts = { id, backend: backend.name, state, temporary: options.temporary, instance, createdAt, warnBeforeEndMs: options.warnBeforeEndMs }
      return computerInfo({ ...facts, processes: yield* liveProcesses }, yield* Clock.currentTimeMillis)
    })

    const adopt = (request: { readonly id: string; readonly session: string; readonly shared: boolean }) =>
      lifecycle.withPermits(1)(Effect.gen(function*() {
        if (backend.adopt === undefined) {
          return yield* new Unsupported({ backend: backend.name, feature: "warm pools (its computers cannot be renamed)" })
        }
        if (state !== "running" || instance === undefined) {
          return yield* new ComputerUnavailable({ id, state })
        }
        const { pooled: _pooled, ...metadata } = instance.metadata
        setInstance(yield* backend.adopt(instance, { ...metadata, id: request.id }))
        id = request.id
        shared = request.shared
        owners.add(request.session)
      }).pipe(traced("adopt", () => ({ ...spanned(), "kilntainers.computer.new_id": request.id })))).pipe(
        Effect.catchTag("ComputerUnavailable", (error) =>
          Effect.fail(providerError(backend.name, "hand out a pooled computer", "Failed", error.message))
        )
      )

    const actor: ComputerActor = {
      get id() {
        return id
      },
      temporary: options.temporary,
      backendName: backend.name,
      incarnation: options.incarnation,
      get home() {
        return connection?.value.home ?? ""
      },
      providerId: Effect.sync(() => instance?.providerId ?? ""),
      visibleTo: (session) => !options.temporary || shared || owners.has(session),
      spawn,
      run,
      closed: Deferred.await(closed),
      deleted: Deferred.await(deleted),
      ready: Deferred.await(ready),
      state: Effect.sync(() => state),
      info,
      warning: Effect.map(info, (current) => current.warning),
      hold: (session) => Effect.sync(() => void owners.add(session)),
      release: (session) => Effect.sync(() => {
        owners.delete(session)
        return owners.size > 0
      }),
      share: Effect.sync(() => {
        shared = true
      }),
      adopt,
      liveProcesses,
      recover,
      restart,
      factoryReset,
      destroy
    }
    return actor
  })

/** Whether a computer found at the provider is another server's temporary one (never ours to take). */
export const isForeignTemporary = (found: Instance, server: ServerIdentity) =>
  found.metadata.temporary && found.metadata.instance !== server.instanceId

