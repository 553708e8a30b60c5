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
import * as FiberMap from "effect/FiberMap"
import * as Random from "effect/Random"
import * as Schedule from "effect/Schedule"
import * as Scope from "effect/Scope"
import type { ComputerMetadata, Owner } from "../domain/ComputerMetadata.js"
import { ComputerUnavailable, type ProviderError, providerError, type SpawnFailed, Unsupported } from "../domain/Errors.js"
import type { Backend, Connection, Instance, SpawnSpec } from "../services/Backend.js"
import type { ComputerHandle, ComputerInfo, ProcessRequest } from "../services/Computers.js"
import * as ComputerAudit from "./ComputerAudit.js"
import { computerInfo } from "./ComputerInfo.js"
import type { ProcessHandle } from "../services/Processes.js"
import * as Tracing from "../layers/tracing/Tracing.js"
import * as ProcessActor from "./ProcessActor.js"
import { runToCompletion } from "./RunToCompletion.js"

export type ComputerState =
  | "creating"
  | "running"
  | "restarting"
  | "resetting"
  | "recovering"
  | "lost"
  | "deleting"
  | "deleted"
  | "closing"
  | "closed"
  | "failed"

/** Who this server is, as recorded on the computers it creates. */
export interface ServerIdentity {
  readonly instanceId: string
  readonly owner: Owner
}

export interface ComputerActorOptions {
  readonly id: string
  readonly temporary: boolean
  readonly shared: boolean
  /** The session that asked for it first. */
  readonly session: string
  readonly incarnation: number
  readonly killGraceMs: number
  readonly server: ServerIdentity
  /** How long before the provider's end of life the computer's info carries a warning. */
  readonly warnBeforeEndMs?: number | undefined
  /** Records the lifecycle steps in the audit log. */
  readonly audit?: ComputerAudit.LifecycleRecorder | undefined
}

/** Where the computer comes from: a new one (for a warm pool: marked pooled), or one the provider already has. */
export type Origin =
  | { readonly _tag: "Create"; readonly pooled?: boolean | undefined }
  | { readonly _tag: "Attach"; readonly instance: Instance }

export interface ComputerActor extends ComputerHandle {
  /** Completes when the computer is running (or fails when it could not be created or attached). */
  readonly ready: Effect.Effect<void, ProviderError>
  readonly state: Effect.Effect<ComputerState>
  readonly info: Effect.Effect<ComputerInfo>
  /** The session now holds this computer. */
  readonly hold: (session: string) => Effect.Effect<void>
  /** The session lets go; answers whether anyone still holds it. */
  readonly release: (session: string) => Effect.Effect<boolean>
  readonly share: Effect.Effect<void>
  readonly liveProcesses: Effect.Effect<number>
  /**
   * Hands a warm pool's computer out under its real id, to its first session: the provider renames
   * it (its labels keep the pool's mark: the reaper treats it as any temporary computer).
   */
  readonly adopt: (request: { readonly id: string; readonly session: string; readonly shared: boolean }) => Effect.Effect<void, ProviderError | Unsupported>
  /** Makes a lost computer run again (start it if the provider still has it, else create it). */
  readonly recover: Effect.Effect<void, ProviderError>
  /** Ends every process, then restarts keeping the writable state. */
  readonly restart: Effect.Effect<void, ProviderError | Unsupported | ComputerUnavailable>
  /** Ends every process, then recreates the computer from its base image. */
  readonly factoryReset: Effect.Effect<void, ProviderError | Unsupported | ComputerUnavailable>
  /** Ends every process and removes the computer for good. */
  readonly destroy: Effect.Effect<void, ProviderError>
}

const iso = (millis: number) => new Date(millis).toISOString()

/** A loss noticed this soon after a process ended explains its end; at most this many are kept. */
const RECENT_MS = 5_000
const RECENT_KEPT = 64

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
    const live = new Map<string, ProcessHandle>()
    /** Processes that ended lately: a loss noticed moments after their end explains it. */
    const recent: Array<{ readonly process: ProcessHandle; readonly endedAt: number }> = []
    const supervisor = yield* FiberMap.make<string>()
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
      [Tracing.Attr.backend]: backend.name,
      [Tracing.Attr.computerId]: id,
      [Tracing.Attr.temporary]: options.temporary,
      [Tracing.Attr.generation]: generation,
      ...(instance === undefined ? {} : { [Tracing.Attr.providerId]: instance.providerId })
    })

    const setInstance = (next: Instance) => {
      instance = next
      const created = Date.parse(next.metadata.created)
      if (!Number.isNaN(created)) createdAt = created
    }

    /** Why the processes being stopped now are stopped (their spans end before their exit is recorded). */
    let stopping: string | undefined
    const stopAll = (reason: string) =>
      Effect.suspend(() => {
        stopping = reason
        return FiberMap.clear(supervisor)
      }).pipe(Effect.ensuring(Effect.sync(() => {
        stopping = undefined
      })))

    /** SIGTERM to every live process, a bounded grace, then the supervisor kills the rest. */
    const endProcesses = (reason: string) =>
      Effect.gen(function*() {
        const actors = [...live.values()]
        yield* Effect.forEach(actors, (actor) =>
          actor.noteReason(reason).pipe(
            Effect.zipRight(actor.signal("SIGTERM")),
            Effect.ignore,
            Effect.zipRight(actor.exited)
          ), { concurrency: "unbounded", discard: true }).pipe(
            Effect.timeout(Duration.millis(options.killGraceMs)),
            Effect.interruptible,
            Effect.ignore
          )
        yield* stopAll(reason)
      })

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
        yield* Effect.forEach([...live.values()], (actor) => actor.noteReason(`computer lost: ${reason}`), { discard: true })
        const now = yield* Clock.currentTimeMillis
        yield* Effect.forEach(
          recent.filter((ended) => now - ended.endedAt <= RECENT_MS),
          (ended) => ended.process.explainEnd(`computer lost: ${reason}`),
          { discard: true }
        )
        yield* stopAll(`computer lost: ${reason}`)
        yield* disconnect
      }).pipe(traced("lost", () => ({ ...spanned(), [Tracing.Attr.reason]: reason }), { root: true }))

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
      yield* Tracing.annotate(() => ({ [Tracing.Attr.generation]: current, [Tracing.Attr.providerId]: target.providerId }))
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
      const renewal = backend.renewal
      yield* Effect.gen(function*() {
        if (state !== "running" || instance === undefined) return
        const now = yield* Clock.currentTimeMillis
        const current = instance
        yield* renewal.renew(current, now + renewal.leaseMs).pipe(
          Effect.tap((renewed) => Effect.sync(() => {
            if (instance === current) instance = renewed
          })),
          traced("renew", spanned, { root: true }),
          Effect.catchAll((error) => Effect.logWarning(`${label()}: cannot renew its lease: ${error.message}`))
        )
      }).pipe(
        Effect.repeat(Schedule.spaced(Duration.millis(renewal.everyMs))),
        Effect.delay(Duration.millis(renewal.everyMs)),
        Effect.forkScoped
      )
    }

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        const wasDeleted = state === "deleted"
        state = wasDeleted ? "deleted" : "closing"
        yield* endProcesses(`${label()} closed`)
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

    const spawn = (request: ProcessRequest) =>
      Effect.gen(function*() {
        const target = yield* usable
        const started = yield* Deferred.make<ProcessHandle, SpawnFailed | ProviderError>()
        // The process's span runs from spawn to exit; output of children that outlive it may follow.
        const untilExit = Effect.gen(function*() {
          const process = yield* target.spawn(request.spec)
          const actor = yield* ProcessActor.make(process, {
            id: request.id,
            computerId: id,
            command: request.command,
            cwd: request.spec.cwd,
            tty: request.spec.tty,
            headBytes: request.headBytes,
            tailBytes: request.tailBytes,
            mailboxCapacity: request.mailboxCapacity,
            onExit: request.onExit
          })
          live.set(request.id, actor)
          yield* Deferred.succeed(started, actor)
          yield* actor.exited
          yield* Tracing.processEnded(yield* actor.info, yield* actor.totals)
          return actor
        }).pipe(Tracing.process({ id: request.id, computerId: id, backend: backend.name, command: request.command, spec: request.spec }, () => stopping))
        const lifetime = Effect.gen(function*() {
          const actor = yield* untilExit
          yield* actor.closed
        }).pipe(
          Effect.scoped,
          Effect.onExit((exit) =>
            Effect.zipRight(
              Effect.flatMap(Clock.currentTimeMillis, (endedAt) =>
                Effect.sync(() => {
                  const actor = live.get(request.id)
                  live.delete(request.id)
                  if (actor === undefined) return
                  recent.push({ process: actor, endedAt })
                  if (recent.length > RECENT_KEPT) recent.shift()
                })
              ),
              Exit.isFailure(exit) ? Deferred.failCause(started, exit.cause) : Effect.void
            )
          )
        )
        yield* FiberMap.run(supervisor, request.id, lifetime)
        return yield* Deferred.await(started)
      })

    const run = (spec: SpawnSpec, stdin: Uint8Array | undefined, maxBytes: number) =>
      Effect.flatMap(usable, (target) => runToCompletion(target, spec, stdin, maxBytes))

    /** A serialised lifecycle step: processes end first, then the provider acts, then a new connection. */
    const step = <E>(during: ComputerState, done: string, name: Tracing.LifecycleStep, act: Effect.Effect<void, E>) =>
      lifecycle.withPermits(1)(
        Effect.gen(function*() {
          if (state === "deleted" || state === "closing" || state === "closed") {
            return yield* new ComputerUnavailable({ id, state })
          }
          state = during
          yield* endProcesses(`${label()} ${done}`)
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

    const restart = backend.capabilities.restart ? step("restarting", "restarted", "restart", Effect.gen(function*() {
      setInstance(yield* backend.restart(instance!))
      yield* connect
    })) : Effect.fail(unsupported("restarting a computer while keeping its files"))

    const factoryReset = backend.capabilities.factoryReset ? step("resetting", "factory reset", "reset", Effect.gen(function*() {
      yield* backend.remove(instance!)
      yield* create
      yield* connect
    })) : Effect.fail(unsupported("factory reset"))

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

    const destroy = lifecycle.withPermits(1)(Effect.gen(function*() {
      if (state === "deleted") return
      state = "deleting"
      yield* endProcesses(`${label()} deleted`)
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
    ))

    const liveProcesses = Effect.suspend(() => Effect.forEach([...live.values()], (actor) => actor.status)).pipe(
      Effect.map((statuses) => statuses.filter((status) => status === "running").length)
    )

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

