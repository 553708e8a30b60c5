import { Deferred, Effect, ExecutionStrategy, Exit, Layer, Scope } from "effect"
import * as ComputerActor from "../actors/ComputerActor.js"
import { computerIdPattern, generateComputerId } from "../domain/ComputerIds.js"
import { type BackendError, ComputerNotFound, InvalidInput } from "../domain/Errors.js"
import { Backend } from "../services/Backend.js"
import { type ComputerInfo, type ComputerRequest, Computers } from "../services/Computers.js"
import { Settings } from "../services/Settings.js"

interface Entry {
  readonly id: string
  readonly temporary: boolean
  readonly ready: Deferred.Deferred<ComputerActor.ComputerActor, BackendError>
  readonly scope: Scope.CloseableScope
  readonly owners: Set<string>
}

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

    const create = (id: string, temporary: boolean, session: string) =>
      Effect.gen(function*() {
        const scope = yield* Scope.fork(root, ExecutionStrategy.sequential)
        const ready = yield* Deferred.make<ComputerActor.ComputerActor, BackendError>()
        const entry: Entry = { id, temporary, ready, scope, owners: new Set([session]) }
        entries.set(id, entry)
        const build = backend.open({ id, temporary }).pipe(
          Effect.flatMap((computer) =>
            ComputerActor.make(computer, {
              id,
              temporary,
              backendName: backend.name,
              killGraceMs: settings.killGraceMs
            })
          ),
          Scope.extend(scope)
        )
        yield* build.pipe(
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

    const resolve = (session: string, request: ComputerRequest) =>
      Effect.gen(function*() {
        let id = request.computer_id
        if (id === undefined || id === "") {
          id = sessionDefaults.get(session)
          if (id === undefined) {
            id = yield* generateComputerId
            while (entries.has(id)) id = yield* generateComputerId
            sessionDefaults.set(session, id)
          }
        } else if (!computerIdPattern.test(id)) {
          return yield* new InvalidInput({
            message: `computer_id '${id}' is not valid: use 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit`
          })
        }
        const existing = entries.get(id)
        if (existing) {
          if (request.temporary !== undefined && request.temporary !== existing.temporary) {
            return yield* new InvalidInput({
              message: `computer '${id}' already exists as a ${existing.temporary ? "temporary" : "permanent"} computer; ` +
                `ask for it with temporary=${existing.temporary} or choose another id`
            })
          }
          existing.owners.add(session)
          return yield* Deferred.await(existing.ready)
        }
        const entry = yield* create(id, request.temporary ?? true, session)
        return yield* Deferred.await(entry.ready)
      })

    const get = (id: string) =>
      Effect.suspend(() => {
        const entry = entries.get(id)
        return entry ? Deferred.await(entry.ready).pipe(Effect.mapError(() => new ComputerNotFound({ id }))) : new ComputerNotFound({ id })
      })

    const info = (entry: Entry): Effect.Effect<ComputerInfo | undefined> =>
      Deferred.poll(entry.ready).pipe(
        Effect.flatMap((polled) =>
          polled._tag === "None"
            ? Effect.succeed({
              computer_id: entry.id,
              sandbox_id: "",
              backend: backend.name,
              state: "creating",
              temporary: entry.temporary,
              image: "",
              created_at: new Date().toISOString(),
              processes: 0
            })
            : polled.value.pipe(
              Effect.flatMap((computer) =>
                Effect.all([computer.state, computer.liveProcesses]).pipe(
                  Effect.map(([state, processes]): ComputerInfo => ({
                    computer_id: computer.id,
                    sandbox_id: computer.providerId,
                    backend: computer.backendName,
                    state,
                    temporary: computer.temporary,
                    image: computer.image,
                    created_at: new Date(computer.createdAt).toISOString(),
                    processes
                  }))
                )
              ),
              Effect.orElseSucceed(() => undefined)
            )
        )
      )

    const list = Effect.forEach([...entries.values()], info).pipe(
      Effect.map((infos) => infos.filter((i): i is ComputerInfo => i !== undefined))
    )

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

    return Computers.of({ resolve, get, list, release })
  })
)
