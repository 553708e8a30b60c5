import { Clock, Deferred, Effect, ExecutionStrategy, Exit, Layer, Scope } from "effect"
import * as ComputerActor from "../actors/ComputerActor.js"
import { computerIdPattern, generateComputerId } from "../domain/ComputerIds.js"
import { type BackendError, ComputerNotFound, InvalidInput } from "../domain/Errors.js"
import { Backend, type ProviderComputer } from "../services/Backend.js"
import { type ComputerInfo, type ComputerRequest, Computers } from "../services/Computers.js"
import { Settings } from "../services/Settings.js"

interface Entry {
  readonly id: string
  readonly temporary: boolean
  shared: boolean
  readonly ready: Deferred.Deferred<ComputerActor.ComputerActor, BackendError>
  readonly scope: Scope.CloseableScope
  readonly owners: Set<string>
}

const invalidId = (id: string) =>
  new InvalidInput({
    message: `computer_id '${id}' is not valid: use 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit`
  })

/**
 * The computers of one server. There is no lock around provider calls: an entry is claimed
 * synchronously, then created in its own fiber, so creating ten computers takes about as long as
 * creating one and one slow computer never holds up another.
 */
export const layer = Layer.scoped(
  Computers,
  Effect.gen(function*() {
    const backend = yield* Backend
    const settings = yield* Settings
    const root = yield* Effect.scope
    const entries = new Map<string, Entry>()
    const sessionDefaults = new Map<string, string>()

    const close = (entry: Entry) =>
      Effect.suspend(() => {
        if (entries.get(entry.id) === entry) entries.delete(entry.id)
        return Scope.close(entry.scope, Exit.void)
      })

    yield* Effect.addFinalizer(() =>
      Effect.forEach([...entries.values()], close, { concurrency: "unbounded", discard: true })
    )

    const open = (id: string, temporary: boolean, session: string, shared = false) =>
      Effect.gen(function*() {
        const scope = yield* Scope.fork(root, ExecutionStrategy.sequential)
        const ready = yield* Deferred.make<ComputerActor.ComputerActor, BackendError>()
        const entry: Entry = { id, temporary, shared, ready, scope, owners: new Set([session]) }
        entries.set(id, entry)
        yield* backend.open({ id, temporary }).pipe(
          Effect.flatMap((computer) =>
            ComputerActor.make(computer, { id, temporary, backendName: backend.name, killGraceMs: settings.killGraceMs })
          ),
          Scope.extend(scope),
          Effect.exit,
          Effect.flatMap((exit) =>
            Exit.isSuccess(exit)
              ? Deferred.succeed(ready, exit.value)
              : Effect.zipRight(close(entry), Deferred.failCause(ready, exit.cause))
          ),
          Effect.forkIn(root)
        )
        return entry
      })

    /** The attached computer of an entry; a lost one is replaced by a fresh open of the same id. */
    const attach = (entry: Entry, session: string): Effect.Effect<ComputerActor.ComputerActor, BackendError> =>
      Effect.gen(function*() {
        entry.owners.add(session)
        const computer = yield* Deferred.await(entry.ready)
        if ((yield* computer.state) !== "lost") return computer
        yield* Effect.logInfo(`computer ${entry.id} was lost; opening it again`)
        yield* close(entry)
        const fresh = entries.get(entry.id) ?? (yield* open(entry.id, entry.temporary, session))
        for (const owner of entry.owners) fresh.owners.add(owner)
        return yield* Deferred.await(fresh.ready)
      })

    const checkTemporary = (entry: Entry, temporary: boolean | undefined) =>
      temporary !== undefined && temporary !== entry.temporary
        ? new InvalidInput({
          message: `computer '${entry.id}' already exists as a ${entry.temporary ? "temporary" : "permanent"} computer; ` +
            `ask for it with temporary=${entry.temporary} or choose another id`
        })
        : Effect.void

    /** Another session's temporary computer is private unless it was created shared. */
    const accessible = (entry: Entry, session: string) => !entry.temporary || entry.shared || entry.owners.has(session)

    const checkAccess = (entry: Entry, session: string) =>
      accessible(entry, session)
        ? Effect.void
        : new InvalidInput({
          message: `computer '${entry.id}' is a temporary computer of another session; sessions can use it only ` +
            `if it was created with shared=true`
        })

    const freshId = Effect.gen(function*() {
      let id = yield* generateComputerId
      while (entries.has(id)) id = yield* generateComputerId
      return id
    })

    const byId = (session: string, id: string, temporary: boolean | undefined, shared?: boolean | undefined) =>
      Effect.gen(function*() {
        if (!computerIdPattern.test(id)) return yield* invalidId(id)
        const existing = entries.get(id)
        if (existing) {
          yield* checkAccess(existing, session)
          yield* checkTemporary(existing, temporary)
          if (shared) existing.shared = true
          return yield* attach(existing, session)
        }
        const known = (yield* backend.list).find((computer) => computer.id === id)
        // Another call may have opened it while the provider answered.
        const raced = entries.get(id)
        if (raced) {
          yield* checkAccess(raced, session)
          yield* checkTemporary(raced, temporary)
          return yield* attach(raced, session)
        }
        if (known && known.temporary) {
          // Ours by label but not open here: another server instance's temporary computer.
          return yield* new InvalidInput({
            message: `computer '${id}' is a temporary computer of another kilntainers server; choose another id`
          })
        }
        const entry = yield* open(id, temporary ?? true, session, shared ?? false)
        return yield* Deferred.await(entry.ready)
      })

    const resolve = (session: string, request: ComputerRequest) =>
      Effect.gen(function*() {
        const requested = request.computer_id
        if (requested !== undefined && requested !== "") return yield* byId(session, requested, request.temporary, request.shared)
        let id = sessionDefaults.get(session)
        if (id === undefined) {
          id = yield* freshId
          sessionDefaults.set(session, id)
        }
        return yield* byId(session, id, request.temporary)
      })

    const create = (session: string, request: ComputerRequest) =>
      Effect.gen(function*() {
        const requested = request.computer_id
        if (requested !== undefined && requested !== "") return yield* byId(session, requested, request.temporary, request.shared)
        return yield* byId(session, yield* freshId, request.temporary, request.shared)
      })

    /** An attached computer, or one the provider still has (a permanent computer from an earlier run). */
    const get = (session: string, id: string) =>
      Effect.gen(function*() {
        if (!computerIdPattern.test(id)) return yield* invalidId(id)
        const existing = entries.get(id)
        if (existing) {
          yield* checkAccess(existing, session)
          return yield* attach(existing, session)
        }
        const known = (yield* backend.list).find((computer) => computer.id === id)
        const raced = entries.get(id)
        if (raced) {
          yield* checkAccess(raced, session)
          return yield* attach(raced, session)
        }
        if (!known) return yield* new ComputerNotFound({ id })
        if (known.temporary) {
          return yield* new InvalidInput({ message: `computer '${id}' is a temporary computer of another kilntainers server` })
        }
        const entry = yield* open(id, known.temporary, session)
        return yield* Deferred.await(entry.ready)
      })

    const restart = (session: string, id: string) =>
      Effect.gen(function*() {
        const computer = yield* get(session, id)
        if ((yield* computer.state) === "lost") {
          const entry = entries.get(id)!
          yield* close(entry)
          const fresh = yield* open(id, entry.temporary, session)
          return yield* Deferred.await(fresh.ready)
        }
        yield* computer.restart
        return computer
      })

    const factoryReset = (session: string, id: string) =>
      Effect.gen(function*() {
        const computer = yield* get(session, id)
        yield* computer.factoryReset
        return computer
      })

    const remove = (session: string, id: string) =>
      Effect.gen(function*() {
        const computer = yield* get(session, id)
        yield* computer.destroy
        const entry = entries.get(id)
        if (entry) yield* close(entry)
        for (const [owner, defaultId] of sessionDefaults) if (defaultId === id) sessionDefaults.delete(owner)
      })

    const iso = (millis: number) => new Date(millis).toISOString()

    const info = (entry: Entry): Effect.Effect<ComputerInfo | undefined> =>
      Effect.gen(function*() {
        const polled = yield* Deferred.poll(entry.ready)
        if (polled._tag === "None") {
          return {
            computer_id: entry.id,
            sandbox_id: "",
            backend: backend.name,
            state: "creating",
            temporary: entry.temporary,
            image: "",
            created_at: iso(yield* Clock.currentTimeMillis),
            processes: 0
          }
        }
        const computer = yield* Effect.option(polled.value)
        if (computer._tag === "None") return undefined
        const c = computer.value
        return {
          computer_id: c.id,
          sandbox_id: c.providerId,
          backend: c.backendName,
          state: yield* c.state,
          temporary: c.temporary,
          image: c.image,
          created_at: iso(c.createdAt),
          processes: yield* c.liveProcesses
        }
      })

    const fromProvider = (computer: ProviderComputer): ComputerInfo => ({
      computer_id: computer.id,
      sandbox_id: computer.providerId,
      backend: backend.name,
      state: computer.state,
      temporary: computer.temporary,
      image: computer.image,
      created_at: computer.createdAt,
      processes: 0
    })

    const list = (session: string) => Effect.gen(function*() {
      const visible = [...entries.values()].filter((entry) => accessible(entry, session))
      const attached = (yield* Effect.forEach(visible, info)).filter((i): i is ComputerInfo => i !== undefined)
      const seen = new Set(entries.keys())
      const all = yield* backend.list
      // The provider's creation time is the computer's, not this server's attach time.
      const created = new Map(all.map((c) => [c.id, c.createdAt]))
      // Temporary computers not open here belong to other server instances: not ours to show.
      const kept = all.filter((c) => !c.temporary && !seen.has(c.id))
      return [
        ...attached.map((c) => ({ ...c, created_at: created.get(c.computer_id) ?? c.created_at })),
        ...kept.map(fromProvider)
      ]
    })

    const release = (session: string) =>
      Effect.gen(function*() {
        sessionDefaults.delete(session)
        const orphaned: Array<Entry> = []
        for (const entry of entries.values()) {
          entry.owners.delete(session)
          if (entry.temporary && entry.owners.size === 0) orphaned.push(entry)
        }
        yield* Effect.forEach(orphaned, close, { concurrency: "unbounded", discard: true })
      })

    const canAccess = (session: string, computerId: string) =>
      Effect.sync(() => {
        const entry = entries.get(computerId)
        return entry === undefined ? false : accessible(entry, session)
      })

    return Computers.of({ resolve, create, get, restart, factoryReset, delete: remove, list, release, canAccess })
  })
)
