/**
 * The computers of one server: ids (the fork's slug rule, readable generated ids), each session's
 * default computer, rediscovery of permanent computers from the provider, and the reaper.
 *
 * An id is claimed synchronously (the ComputerActor exists in state `creating` at once) and the
 * provider is called in the actor's own fiber, so there is no lock around provider calls: creating
 * ten computers takes about as long as one, and one slow computer never holds up another.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import * as ComputerActor from "../actors/ComputerActor.js"
import { computerIdPattern, computerIdProblem, generateComputerId } from "../domain/ComputerIds.js"
import { AccessDenied, ComputerNotFound, InvalidInput, type ProviderError, Unsupported } from "../domain/Errors.js"
import { AuditLog } from "../services/AuditLog.js"
import { Backend, type Instance, survivalOf } from "../services/Backend.js"
import { type CheckpointRequest, type ComputerInfo, type ComputerRequest, Computers } from "../services/Computers.js"
import { ServerIdentity } from "../services/ServerIdentity.js"
import { Settings } from "../services/Settings.js"
import * as CheckpointStore from "./CheckpointStore.js"
import * as CheckpointSweep from "./CheckpointSweep.js"
import * as Reaper from "./Reaper.js"
import { tracedBackend } from "./tracing/TracedBackend.js"
import * as WarmPool from "./WarmPool.js"

interface Entry {
  readonly actor: ComputerActor.ComputerActor
  readonly scope: Scope.CloseableScope
}

export const invalidId = (id: string) => new InvalidInput({ message: computerIdProblem(id) ?? `computer_id '${id}' is not valid` })

const privateComputer = (id: string) =>
  new AccessDenied({
    what: `computer '${id}'`,
    why: "it is a temporary computer of another session; sessions can use it only if it was created with shared=true"
  })

const foreignComputer = (id: string) =>
  new AccessDenied({ what: `computer '${id}'`, why: "it is a temporary computer of another kilntainers server; choose another id" })

const iso = (millis: number) => new Date(millis).toISOString()

export const layer = Layer.scoped(
  Computers,
  Effect.gen(function*() {
    // Every provider call of the kernel (actors, reaper, registry) in a span: wrapped once, here.
    const backend = tracedBackend(yield* Backend)
    const settings = yield* Settings
    const server = yield* ServerIdentity
    const audit = Option.getOrUndefined(yield* Effect.serviceOption(AuditLog))?.record
    const root = yield* Effect.scope
    const entries = new Map<string, Entry>()
    const sessionDefaults = new Map<string, string>()
    let incarnations = 0

    // Its finalizer is registered before the computers': checkpoints are removed with the server, after its computers.
    const checkpoints = yield* CheckpointStore.make(backend, settings.maxCheckpoints, server.owner)
    yield* Reaper.run(server).pipe(Effect.provideService(Backend, backend), Effect.forkScoped)
    yield* CheckpointSweep.run(backend, server).pipe(Effect.forkScoped)

    const close = (entry: Entry) =>
      Effect.suspend(() => {
        if (entries.get(entry.actor.id) === entry) entries.delete(entry.actor.id)
        return Scope.close(entry.scope, Exit.void)
      })

    yield* Effect.addFinalizer(() =>
      Effect.forEach([...entries.values()], close, { concurrency: "unbounded", discard: true })
    )

    const make = (id: string, temporary: boolean, session: string, shared: boolean, origin: ComputerActor.Origin) =>
      Effect.gen(function*() {
        const scope = yield* Scope.fork(root, ExecutionStrategy.sequential)
        const actor = yield* ComputerActor.make(backend, {
          id,
          temporary,
          shared,
          session,
          incarnation: ++incarnations,
          killGraceMs: settings.killGraceMs,
          server,
          audit
        }, origin).pipe(Scope.extend(scope))
        return { actor, scope }
      })

    /** Claims the id now; creation or attachment runs in the actor's own fiber. */
    const open = (id: string, temporary: boolean, session: string, shared: boolean, origin: ComputerActor.Origin) =>
      Effect.gen(function*() {
        const entry: Entry = yield* make(id, temporary, session, shared, origin)
        entries.set(id, entry)
        // A computer that could not be made frees its id at once.
        yield* entry.actor.ready.pipe(
          Effect.catchAll(() => close(entry)),
          Effect.forkIn(root)
        )
        return entry
      })

    if (settings.warmPool > 0 && backend.adopt === undefined) {
      return yield* new Unsupported({
        backend: backend.name,
        feature: "--warm-pool (its computers cannot be renamed when handed out; use a pool with the docker or host backend)"
      })
    }
    const pool = settings.warmPool > 0
      ? yield* WarmPool.make({
        size: settings.warmPool,
        concurrency: Math.min(settings.warmPool, 4),
        // A burst of hand-outs first, the refill after (WarmPool.make).
        quiet: Duration.millis(100),
        open: Effect.flatMap(generateComputerId, (id) => make(`pool-${id}`, true, "", false, { _tag: "Create", pooled: true }))
      })
      : undefined

    /** A new temporary computer: from the warm pool when one is ready, else made now. */
    const openNew = (id: string, temporary: boolean, session: string, shared: boolean) =>
      Effect.gen(function*() {
        const member = temporary && pool !== undefined ? pool.take() : Option.none<WarmPool.Member>()
        if (Option.isSome(member)) {
          const entry: Entry = member.value
          // Claimed before anything yields: a concurrent call for this id finds it.
          entries.set(id, entry)
          yield* entry.actor.hold(session)
          const adopted = yield* Effect.either(entry.actor.adopt({ id, session, shared }))
          if (adopted._tag === "Right") return entry
          entries.delete(id)
          yield* Effect.logWarning(`warm pool: cannot hand out ${entry.actor.id}: ${adopted.left.message}; creating ${id} instead`)
          yield* Scope.close(entry.scope, Exit.void)
        }
        return yield* open(id, temporary, session, shared, { _tag: "Create" })
      })

    /**
     * The running computer of an entry; a lost one is recovered first, unless `reopen` is false (a
     * factory reset replaces a lost computer without opening its old instance, which may be the very
     * thing that cannot start: a container whose shared directory a guest swapped).
     */
    const attach = (entry: Entry, session: string, reopen = true) =>
      Effect.gen(function*() {
        yield* entry.actor.hold(session)
        yield* entry.actor.ready
        if (reopen && (yield* entry.actor.state) === "lost") yield* entry.actor.recover
        return entry.actor
      })

    const checkTemporary = (actor: ComputerActor.ComputerActor, temporary: boolean | undefined) =>
      temporary !== undefined && temporary !== actor.temporary
        ? new InvalidInput({
          // "lifecycle mode cannot be changed": the words Kilntainers' fork says (and its tests look for).
          message: `computer '${actor.id}' already exists as a ${actor.temporary ? "temporary" : "permanent"} computer ` +
            `(its lifecycle mode cannot be changed); ask for it with temporary=${actor.temporary} or choose another id`
        })
        : Effect.void

    const checkAccess = (actor: ComputerActor.ComputerActor, session: string) =>
      actor.visibleTo(session) ? Effect.void : Effect.fail(privateComputer(actor.id))

    /** Our computer with this id at the provider, if any (a live one of this kind wins). */
    const atProvider = (id: string) =>
      backend.find({ id }).pipe(
        Effect.map((found) => Option.fromNullable(found.find((instance) => instance.state !== "gone")))
      )

    const existing = (session: string, id: string, temporary: boolean | undefined, shared: boolean | undefined, reopen: boolean) =>
      Effect.gen(function*() {
        const entry = entries.get(id)!
        yield* checkAccess(entry.actor, session)
        yield* checkTemporary(entry.actor, temporary)
        if (shared) yield* entry.actor.share
        return yield* attach(entry, session, reopen)
      })

    /** A computer by id: attached here, or found at the provider, or (when `create`) made; `reopen` as `attach` says. */
    const byId = (
      session: string,
      id: string,
      request: { readonly temporary?: boolean | undefined; readonly shared?: boolean | undefined },
      create: boolean,
      reopen = true
    ) =>
      Effect.gen(function*() {
        if (!computerIdPattern.test(id)) return yield* invalidId(id)
        if (entries.has(id)) return yield* existing(session, id, request.temporary, request.shared, reopen)
        const found = yield* atProvider(id)
        // Another call may have opened it while the provider answered.
        if (entries.has(id)) return yield* existing(session, id, request.temporary, request.shared, reopen)
        if (Option.isSome(found)) {
          const instance: Instance = found.value
          if (instance.metadata.temporary) return yield* foreignComputer(id)
          if (request.temporary === true) {
            return yield* new InvalidInput({
              message: `computer '${id}' exists as a permanent computer; ask for it with temporary=false (or omit temporary) or choose another id`
            })
          }
          const entry = yield* open(id, false, session, false, { _tag: "Attach", instance })
          return yield* attach(entry, session)
        }
        if (!create) return yield* new ComputerNotFound({ id })
        if (request.temporary === false && !backend.capabilities.persistence) {
          return yield* new Unsupported({ backend: backend.name, feature: "permanent computers (temporary: false)" })
        }
        const entry = yield* openNew(id, request.temporary ?? true, session, request.shared ?? false)
        return yield* attach(entry, session)
      })

    const freshId = Effect.gen(function*() {
      let id = yield* generateComputerId
      while (entries.has(id)) id = yield* generateComputerId
      return id
    })

    const resolve = (session: string, request: ComputerRequest) =>
      Effect.gen(function*() {
        const requested = request.computer_id
        if (requested !== undefined && requested !== "") return yield* byId(session, requested, request, true)
        let id = sessionDefaults.get(session)
        if (id === undefined) {
          id = yield* freshId
          sessionDefaults.set(session, id)
        }
        return yield* byId(session, id, { temporary: request.temporary }, true)
      })

    const create = (session: string, request: ComputerRequest) =>
      Effect.gen(function*() {
        const requested = request.computer_id
        const id = requested !== undefined && requested !== "" ? requested : yield* freshId
        if (request.from_checkpoint !== undefined && request.from_checkpoint !== "") return yield* fork(session, id, request, request.from_checkpoint)
        return yield* byId(session, id, request, true)
      })

    /** A new computer made from a checkpoint: always new (an existing id is refused), never from the warm pool. */
    const fork = (session: string, id: string, request: ComputerRequest, checkpoint: string) =>
      Effect.gen(function*() {
        if (!computerIdPattern.test(id)) return yield* invalidId(id)
        const stored = yield* checkpoints.forFork(session, checkpoint)
        if (entries.has(id) || Option.isSome(yield* atProvider(id)) || entries.has(id)) {
          return yield* new InvalidInput({ message: `computer '${id}' already exists; a computer made from a checkpoint needs a new id (or none)` })
        }
        if (request.temporary === false && !backend.capabilities.persistence) {
          return yield* new Unsupported({ backend: backend.name, feature: "permanent computers (temporary: false)" })
        }
        const entry = yield* open(id, request.temporary ?? true, session, request.shared ?? false, { _tag: "Create", from: stored })
        return yield* attach(entry, session)
      })

    const checkpoint = (session: string, request: CheckpointRequest) =>
      Effect.flatMap(get(session, request.computer_id), (actor) => checkpoints.take(session, actor, request))

    const get = (session: string, id: string) => byId(session, id, {}, false)

    const restart = (session: string, id: string) =>
      Effect.gen(function*() {
        const actor = yield* get(session, id)
        yield* actor.restart
        return actor
      })

    const factoryReset = (session: string, id: string) =>
      Effect.gen(function*() {
        // A permanent computer not attached here is replaced without being started: its old instance may
        // be the very thing that cannot start (a container whose shared directory a guest swapped).
        const kept = entries.has(id) || !computerIdPattern.test(id) || !backend.capabilities.factoryReset ? Option.none() : yield* atProvider(id)
        if (Option.isSome(kept) && !kept.value.metadata.temporary && !entries.has(id)) {
          return yield* attach(yield* open(id, false, session, false, { _tag: "Replace", instance: kept.value }), session, false)
        }
        // A lost computer is reset as it is: the new one is made from the image, the old never reopened.
        const actor = yield* byId(session, id, {}, false, false)
        yield* actor.factoryReset
        return actor
      })

    const remove = (session: string, id: string) =>
      Effect.gen(function*() {
        const actor = yield* get(session, id)
        yield* actor.destroy
        const entry = entries.get(id)
        if (entry?.actor === actor) yield* close(entry)
        for (const [owner, defaultId] of sessionDefaults) if (defaultId === id) sessionDefaults.delete(owner)
      })

    const fromProvider = (instance: Instance): ComputerInfo => ({
      computer_id: instance.metadata.id,
      sandbox_id: instance.providerId,
      backend: backend.name,
      state: instance.state,
      temporary: instance.metadata.temporary,
      image: instance.metadata.image,
      created_at: instance.metadata.created,
      processes: 0,
      ...(instance.endsAt === undefined ? {} : { ends_at: iso(instance.endsAt) })
    })

    const list = (session: string): Effect.Effect<ReadonlyArray<ComputerInfo>, ProviderError> =>
      Effect.gen(function*() {
        const visible = [...entries.values()].filter((entry) => entry.actor.visibleTo(session))
        const attached = yield* Effect.forEach(visible, (entry) => entry.actor.info)
        // Permanent computers the provider keeps that are not attached here (temporary ones that are
        // not ours belong to other server instances: not ours to show).
        const kept = (yield* backend.find({ temporary: false })).filter((instance) =>
          !entries.has(instance.metadata.id) && instance.state !== "gone"
        )
        return [...attached, ...kept.map(fromProvider)]
      })

    const release = (session: string) =>
      Effect.gen(function*() {
        sessionDefaults.delete(session)
        const orphaned: Array<Entry> = []
        for (const entry of entries.values()) {
          const held = yield* entry.actor.release(session)
          if (entry.actor.temporary && !held) orphaned.push(entry)
        }
        yield* Effect.forEach(orphaned, close, { concurrency: "unbounded", discard: true })
        // After its computers: a checkpoint image still used by a fork can only be untagged.
        yield* checkpoints.release(session)
      })

    const attached = (session: string) =>
      Effect.sync(() => [...entries.values()].map((entry) => entry.actor).filter((actor) => actor.visibleTo(session)))

    return Computers.of({
      resolve,
      create,
      get,
      attached,
      restart,
      factoryReset,
      delete: remove,
      list,
      release,
      checkpoint,
      checkpoints: checkpoints.list,
      deleteCheckpoint: checkpoints.remove,
      capabilities: backend.capabilities,
      pool: pool === undefined ? Effect.succeed(undefined) : pool.status,
      serverExit: survivalOf(backend.capabilities, backend.name)
    })
  })
)

