/**
 * A computer as an actor: the one owner of its lifecycle on every backend.
 *
 * Its state is one `ComputerLife` value (ComputerLife.ts: where it is in its life, the provider's
 * `Instance`, and while it runs the `Connection` its processes run through, in a child Scope
 * replaced at every restart, reset or recovery: a new generation), written only by `become` — the
 * steps, a loss, the lease renewal's answer and the finalizer all go through it. Beside it: the
 * sessions that hold it, its processes (a FiberMap: a process belongs to its computer, never to the
 * request that started it) and the lease renewal. Lifecycle steps are serialised by one permit
 * (and, across servers, by the computer's lease where it has one, Connection.lease):
 * processes end first (SIGTERM, a grace, then kill; `ps` records why), then the provider acts.
 * Nothing outside mutates its state; the provider is a set of stateless calls.
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Scope from "effect/Scope"
import { ComputerUnavailable, type ProviderError, providerError, Unsupported } from "../domain/Errors.js"
import type { Backend, Instance, SpawnSpec } from "../services/Backend.js"
import type { ProcessRequest } from "../services/Computers.js"
import * as ComputerAudit from "./ComputerAudit.js"
import { computerInfo } from "./ComputerInfo.js"
import * as ExternalComputer from "./ExternalComputer.js"
import * as Spans from "../services/Spans.js"
import type { ComputerActor, ComputerActorOptions, Origin } from "./ComputerActorApi.js"
import { ComputerLife, ending, stateOf, whyOf } from "./ComputerLife.js"
import * as ComputerPorts from "./ComputerPorts.js"
import * as ComputerProcesses from "./ComputerProcesses.js"
import * as LeaseRenewal from "./LeaseRenewal.js"
import { newMetadata } from "./NewMetadata.js"
import { runToCompletion } from "./RunToCompletion.js"

export type { ComputerActor, ComputerActorOptions, ComputerState, Origin, ServerIdentity } from "./ComputerActorApi.js"


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
    /** The one state; `become` is its only writer. */
    let life: ComputerLife = ComputerLife.Creating({ instance: undefined })
    /** Identity: changes once, when a warm pool hands the computer out (`adopt`). */
    let id = options.id
    let shared = options.shared
    const owners = new Set(options.session === "" ? [] : [options.session])
    /** Connections made so far: the next one's generation. */
    let generations = 0
    const startedAt = yield* Clock.currentTimeMillis
    const processes = yield* ComputerProcesses.make({ computerId: () => id, backend: backend.name, killGraceMs: options.killGraceMs })
    const lifecycle = yield* Effect.makeSemaphore(1)
    const ready = yield* Deferred.make<void, ProviderError>()
    // Connections live in a scope made before the actor's finalizer, so they close after it: the
    // finalizer ends the processes while the connection they run through still stands.
    const connections = yield* Scope.fork(actorScope, ExecutionStrategy.sequential)
    const closed = yield* Deferred.make<void>()
    const deleted = yield* Deferred.make<void>()
    const label = () => `computer ${id}`

    const become = (next: ComputerLife) => {
      life = next
    }
    const instanceNow = () => life.instance
    /** When the provider made it (its metadata), else when this actor began. */
    const createdAt = () => {
      const created = Date.parse(life.instance?.metadata.created ?? "")
      return Number.isNaN(created) ? startedAt : created
    }
    /** Closes a connection the state no longer holds. */
    const close = (left: ComputerLife) => (left._tag === "Running" ? Scope.close(left.connection.scope, Exit.void) : Effect.void)

    /** A step's span and audit entry. */
    const traced = ComputerAudit.lifecycle(options.audit, () => ({ computer: id, backend: backend.name, session: options.session }))
    /** What every lifecycle span of this computer says. */
    const spanned = () => ({
      [Spans.Attr.backend]: backend.name,
      [Spans.Attr.computerId]: id,
      [Spans.Attr.temporary]: options.temporary,
      [Spans.Attr.generation]: generations,
      ...(life.instance === undefined ? {} : { [Spans.Attr.providerId]: life.instance.providerId })
    })

    /** A lost computer: its processes end (ps says why) and its connection goes. */
    const markLost = (reason: string, generation: number) =>
      Effect.suspend(() => {
        const left = life
        if (left._tag !== "Running" || left.connection.generation !== generation) return Effect.void
        become(ComputerLife.Lost({ instance: left.instance, why: reason }))
        return Effect.logWarning(`${label()} was lost: ${reason}`).pipe(
          Effect.zipRight(processes.lost(reason)),
          Effect.zipRight(close(left)),
          traced("lost", () => ({ ...spanned(), [Spans.Attr.reason]: reason }), { root: true })
        )
      })

    /** Connects to `target`: a new generation, watched for loss. The caller makes it the state. */
    const connect = (target: Instance) =>
      Effect.gen(function*() {
        const scope = yield* Scope.fork(connections, ExecutionStrategy.sequential)
        const value = yield* backend.connect(target).pipe(
          Scope.extend(scope),
          Effect.onExit((exit) => (Exit.isFailure(exit) ? Scope.close(scope, exit) : Effect.void))
        )
        const generation = ++generations
        yield* Spans.annotate(() => ({ [Spans.Attr.generation]: generation, [Spans.Attr.providerId]: target.providerId }))
        yield* value.lost.pipe(
          Effect.flatMap((reason) => lifecycle.withPermits(1)(markLost(reason, generation))),
          Effect.forkIn(scope)
        )
        return ComputerLife.Running({ instance: target, connection: { value, scope, generation } })
      })

    /** The metadata of a new computer; `previous` is the one a factory reset replaces. */
    const metadataFor = (previous: Instance | undefined) =>
      newMetadata(backend, options, id, previous, origin._tag === "Create" && origin.pooled === true)

    const startIfNeeded = (found: Instance) => found.state === "running" ? Effect.succeed(found) : backend.start(found)

    /** Creates the computer; a name taken meanwhile by our own computer of the same kind is attached instead. */
    const create = (previous: Instance | undefined) =>
      Effect.gen(function*() {
        const metadata = yield* metadataFor(previous)
        // A fork is made from its checkpoint once; a reset or recovery later makes it from the base image.
        const from = origin._tag === "Create" && previous === undefined ? origin.from : undefined
        const made = from === undefined || backend.checkpoints === undefined ? backend.create(metadata) : backend.checkpoints.restore(from, metadata)
        return yield* made.pipe(
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
      })

    /** A factory reset of an instance never started here: removed, and made afresh from its recorded image. */
    const replace = (old: Instance) => Effect.zipRight(Effect.zipRight(ExternalComputer.refuse(backend.name, old, "factory reset"), backend.remove(old)), create(old))
    /** The first step: create, attach, or replace (the old instance may be what cannot start), then connect. */
    const open = Effect.gen(function*() {
      const instance = origin._tag === "Create" ? yield* create(undefined) : origin._tag === "Attach" ? yield* startIfNeeded(origin.instance) : yield* replace(origin.instance)
      become(ComputerLife.Creating({ instance }))
      become(yield* connect(instance))
    })

    yield* lifecycle.withPermits(1)(open).pipe(
      traced(({ Create: "create", Attach: "attach", Replace: "reset" } as const)[origin._tag], () => ({
        ...spanned(),
        ...(origin._tag === "Create" && origin.pooled ? { "kilntainers.computer.pooled": true } : {})
      })),
      Effect.onExit((exit) =>
        Exit.isSuccess(exit)
          ? Deferred.succeed(ready, undefined)
          : Effect.sync(() => become(ComputerLife.Failed({ instance: instanceNow() }))).pipe(
            Effect.zipRight(Deferred.failCause(ready, exit.cause))
          )
      ),
      Effect.forkScoped
    )

    // Lease renewal / keep-alive: the provider extends the computer's life while this server holds it.
    if (backend.renewal !== undefined) {
      yield* LeaseRenewal.keep(backend.renewal, {
        current: () => (life._tag === "Running" ? life.instance : undefined),
        // The provider's answer replaces the instance it renewed, if the computer still runs on it.
        renewed: (before, after) =>
          Effect.sync(() => {
            if (life._tag === "Running" && life.instance === before) become(ComputerLife.Running({ ...life, instance: after }))
          }),
        traced: spanned,
        label
      })
    }

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        const left = life
        const wasDeleted = left._tag === "Deleted"
        if (!wasDeleted) become(ComputerLife.Closing({ instance: left.instance }))
        yield* processes.release(`${label()} closed`, !options.temporary && left._tag === "Running" && left.connection.value.held !== undefined)
        yield* close(left)
        if (!wasDeleted && left.instance !== undefined) {
          const target = left.instance
          const release = options.temporary ? backend.remove(target) : (backend.suspend?.(target) ?? Effect.void)
          yield* release.pipe(
            Effect.interruptible,
            Effect.timeout(Duration.seconds(60)),
            Effect.catchAll((error) => Effect.logWarning(`${label()}: cannot release it: ${String(error)}`))
          )
        }
        if (!wasDeleted) become(ComputerLife.Closed({ instance: left.instance }))
        yield* Deferred.succeed(closed, undefined)
      }).pipe(traced("release", () => ({
        ...spanned(),
        "kilntainers.computer.release": life._tag === "Deleted" ? "none" : options.temporary ? "remove" : "suspend"
      })))
    )

    const usable = Effect.suspend(() =>
      life._tag === "Running"
        ? Effect.succeed(life.connection.value)
        : Effect.fail(new ComputerUnavailable({ id, state: stateOf(life), ...(whyOf(life) === undefined ? {} : { why: whyOf(life)! }) })))

    /** The computer's lease for a step while its connection stands: one server's step at a time (a Conflict names the other's). */
    const leased = (left: ComputerLife, step: string) =>
      left._tag === "Running" && left.connection.value.lease !== undefined ? left.connection.value.lease(step) : Effect.void

    // What runs in the computer goes through its connection, while it is usable.
    const spawn = (request: ProcessRequest) => Effect.flatMap(usable, (target) => processes.spawn(target, request))
    const run = (spec: SpawnSpec, stdin: Uint8Array | undefined, maxBytes: number) =>
      Effect.flatMap(usable, (target) => runToCompletion(target, spec, stdin, maxBytes))

    /**
     * A serialised lifecycle step: processes end first (while the connection still stands), then it
     * closes, then the provider acts and answers the new state; a failure leaves it lost (`failed`).
     */
    const step = <E>(
      during: (had: { readonly instance: Instance | undefined }) => ComputerLife,
      ended: string,
      failed: string,
      name: Spans.LifecycleStep,
      act: (instance: Instance) => Effect.Effect<ComputerLife, E>
    ) =>
      lifecycle.withPermits(1)(
        Effect.gen(function*() {
          const left = life
          // A computer never created (failed) has nothing to restart or reset.
          if (ending(left) || left.instance === undefined) return yield* new ComputerUnavailable({ id, state: stateOf(left) })
          yield* leased(left, name)
          const instance = left.instance
          become(during({ instance }))
          yield* processes.endAll(`${label()} ${ended}`)
          yield* close(left)
          yield* act(instance).pipe(
            Effect.tapError(() => Effect.sync(() => become(ComputerLife.Lost({ instance: instanceNow(), why: failed })))),
            Effect.map(become)
          )
        }).pipe(Effect.scoped, traced(name, spanned))
      )

    const unsupported = (feature: string) => new Unsupported({ backend: backend.name, feature })

    /** Adopted computers refuse restart, reset and delete before any process is touched. */
    const unlessExternal = <A, E>(what: string, effect: Effect.Effect<A, E>) =>
      Effect.zipRight(Effect.suspend(() => ExternalComputer.refuse(backend.name, instanceNow(), what)), effect)

    const restart = backend.capabilities.restart
      ? unlessExternal(
        "restart",
        step(ComputerLife.Restarting, "restarted", "restart failed", "restart", (instance) =>
          Effect.gen(function*() {
            const restarted = yield* backend.restart(instance)
            become(ComputerLife.Restarting({ instance: restarted }))
            return yield* connect(restarted)
          }))
      )
      : Effect.fail(unsupported("restarting a computer while keeping its files"))

    const factoryReset = backend.capabilities.factoryReset
      ? unlessExternal(
        "factory reset",
        step(ComputerLife.Resetting, "factory reset", "factory reset failed", "reset", (instance) =>
          Effect.gen(function*() {
            yield* backend.remove(instance)
            const created = yield* create(instance)
            become(ComputerLife.Resetting({ instance: created }))
            return yield* connect(created)
          }))
      )
      : Effect.fail(unsupported("factory reset"))

    const recover = lifecycle.withPermits(1)(Effect.suspend(() => {
      const left = life
      if (left._tag !== "Lost") return Effect.void
      become(ComputerLife.Recovering({ instance: left.instance }))
      return Effect.gen(function*() {
        yield* Effect.logInfo(`${label()} was lost; opening it again`)
        const found = yield* backend.find({ id })
        const ours = found.find((candidate) => candidate.metadata.temporary === options.temporary && candidate.state !== "gone")
        const instance = ours !== undefined ? yield* startIfNeeded(ours) : yield* create(left.instance)
        become(ComputerLife.Recovering({ instance }))
        become(yield* connect(instance))
      }).pipe(
        // Still lost, for the reason it was lost.
        Effect.tapError(() => Effect.sync(() => become(ComputerLife.Lost({ instance: instanceNow(), why: left.why })))),
        traced("recover", spanned)
      )
    }))

    const destroy = unlessExternal("delete", lifecycle.withPermits(1)(Effect.suspend(() => {
      const left = life
      if (left._tag === "Deleted") return Effect.void
      return Effect.gen(function*() {
        yield* leased(left, "delete")
        become(ComputerLife.Deleting({ instance: left.instance }))
        yield* processes.endAll(`${label()} deleted`)
        yield* close(left)
        if (left.instance !== undefined) yield* backend.remove(left.instance)
        become(ComputerLife.Deleted({ instance: left.instance }))
        yield* Deferred.succeed(deleted, undefined)
      }).pipe(
        // Refused (another server is mid-step): it is as it was.
        Effect.tapError(() => Effect.sync(() => life._tag === "Deleting" && become(ComputerLife.Lost({ instance: left.instance, why: "delete failed" })))),
        Effect.scoped,
        traced("delete", spanned)
      )
    })))

    const whileRunning = <A, E>(f: (instance: Instance) => Effect.Effect<A, E>) =>
      lifecycle.withPermits(1)(Effect.suspend((): Effect.Effect<A, E | ComputerUnavailable> => life._tag === "Running" ? f(life.instance) : Effect.fail(new ComputerUnavailable({ id, state: stateOf(life) }))))

    const info = Effect.gen(function*() {
      const facts = { id, backend: backend.name, state: stateOf(life), temporary: options.temporary, instance: life.instance }
      const unheld = !options.temporary && backend.capabilities.heldProcesses && life._tag === "Running" &&
        life.connection.value.held === undefined
      const more = { createdAt: createdAt(), warnBeforeEndMs: options.warnBeforeEndMs, processes: yield* processes.running, unheld }
      return computerInfo({ ...facts, ...more }, yield* Clock.currentTimeMillis)
    })

    const adopt = (request: { readonly id: string; readonly session: string; readonly shared: boolean }) =>
      lifecycle.withPermits(1)(Effect.gen(function*() {
        if (backend.adopt === undefined) {
          return yield* new Unsupported({ backend: backend.name, feature: "warm pools (its computers cannot be renamed)" })
        }
        const current = life
        if (current._tag !== "Running") return yield* new ComputerUnavailable({ id, state: stateOf(current) })
        const { pooled: _pooled, ...metadata } = current.instance.metadata
        const adopted = yield* backend.adopt(current.instance, { ...metadata, id: request.id })
        // The renewal may have answered meanwhile: the adopted instance is the latest.
        if (life._tag === "Running") become(ComputerLife.Running({ ...life, instance: adopted }))
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
        return life._tag === "Running" ? life.connection.value.home : ""
      },
      providerId: Effect.sync(() => life.instance?.providerId ?? ""),
      visibleTo: (session) => !options.temporary || shared || owners.has(session),
      spawn,
      run,
      follow: (follow) => Effect.flatMap(usable, (target) => processes.follow(target, follow)),
      heldRecord: (processId) => Effect.flatMap(usable, (target) => processes.heldRecord(target, processId)),
      openPort: (port) => Effect.flatMap(usable, (target) => ComputerPorts.open(backend.name, target, port)),
      publicUrl: (port) => Effect.flatMap(usable, (target) => ComputerPorts.publicUrl(target, port)),
      closed: Deferred.await(closed),
      deleted: Deferred.await(deleted),
      ready: Deferred.await(ready),
      state: Effect.sync(() => stateOf(life)),
      info,
      warning: Effect.map(info, (current) => current.warning),
      hold: (session) => Effect.sync(() => void owners.add(session)),
      release: (session) =>
        Effect.sync(() => {
          owners.delete(session)
          return owners.size > 0
        }),
      share: Effect.sync(() => {
        shared = true
      }),
      adopt,
      liveProcesses: processes.running,
      recover,
      restart,
      factoryReset,
      whileRunning,
      destroy
    }
    return actor
  })
