import type { Scope } from "effect"
import { Clock, Deferred, Duration, Effect, Exit, FiberMap } from "effect"
import type { BackendError, SpawnFailed } from "../domain/Errors.js"
import type { BackendComputer, SpawnSpec } from "../services/Backend.js"
import * as ProcessActor from "./ProcessActor.js"

export type ComputerState = "running" | "closing" | "closed"

export interface ProcessRequest {
  readonly id: string
  readonly command: string
  readonly spec: SpawnSpec
  readonly headBytes: number
  readonly tailBytes: number
  readonly mailboxCapacity: number
  readonly onExit: (actor: ProcessActor.ProcessActor) => Effect.Effect<void>
}

/** A computer as an actor: its backend handle, its owners and its processes. */
export interface ComputerActor {
  readonly id: string
  readonly temporary: boolean
  readonly backendName: string
  readonly providerId: string
  readonly home: string
  readonly image: string
  readonly createdAt: number
  readonly state: Effect.Effect<ComputerState>
  readonly owners: Set<string>
  /** Starts a process owned by this computer (not by the caller); returns once it runs. */
  readonly spawn: (request: ProcessRequest) => Effect.Effect<ProcessActor.ProcessActor, SpawnFailed | BackendError>
  readonly liveProcesses: Effect.Effect<number>
}

export interface ComputerActorOptions {
  readonly id: string
  readonly temporary: boolean
  readonly backendName: string
  readonly killGraceMs: number
}

/**
 * Runs a computer in the given Scope. Each process runs as a fiber of the computer's FiberMap, so
 * it belongs to the computer, never to the request that started it. Closing the Scope asks every
 * live process to stop (SIGTERM), waits a bounded grace, then interrupts them (the backend kills
 * what is left) and closes the backend computer.
 */
export const make = (
  backend: BackendComputer,
  options: ComputerActorOptions
): Effect.Effect<ComputerActor, never, Scope.Scope> =>
  Effect.gen(function*() {
    const createdAt = yield* Clock.currentTimeMillis
    let state: ComputerState = "running"
    const live = new Map<string, ProcessActor.ProcessActor>()
    const supervisor = yield* FiberMap.make<string>()

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        state = "closing"
        const actors = [...live.values()]
        // Bounded: a process that ignores SIGTERM (or an actor that cannot take the message) is
        // killed when the supervisor closes right after.
        yield* Effect.forEach(actors, (actor) =>
          actor.noteReason(`computer ${options.id} closed`).pipe(
            Effect.zipRight(actor.signal("SIGTERM")),
            Effect.ignore,
            Effect.zipRight(actor.exited)
          ), { concurrency: "unbounded", discard: true }).pipe(
            Effect.timeout(Duration.millis(options.killGraceMs)),
            Effect.interruptible,
            Effect.ignore
          )
        state = "closed"
      })
    )

    const spawn = (request: ProcessRequest) =>
      Effect.gen(function*() {
        const started = yield* Deferred.make<ProcessActor.ProcessActor, SpawnFailed | BackendError>()
        const lifetime = Effect.gen(function*() {
          const process = yield* backend.spawn(request.spec)
          const actor = yield* ProcessActor.make(process, {
            id: request.id,
            computerId: options.id,
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
          yield* actor.closed
        }).pipe(
          Effect.scoped,
          Effect.onExit((exit) =>
            Effect.zipRight(
              Effect.sync(() => live.delete(request.id)),
              Exit.isFailure(exit) ? Deferred.failCause(started, exit.cause) : Effect.void
            )
          )
        )
        yield* FiberMap.run(supervisor, request.id, lifetime)
        return yield* Deferred.await(started)
      })

    return {
      id: options.id,
      temporary: options.temporary,
      backendName: options.backendName,
      providerId: backend.providerId,
      home: backend.home,
      image: backend.image ?? options.backendName,
      createdAt,
      state: Effect.sync(() => state),
      owners: new Set<string>(),
      spawn,
      liveProcesses: Effect.forEach([...live.values()], (actor) => actor.status).pipe(
        Effect.map((statuses) => statuses.filter((status) => status === "running").length)
      )
    }
  })
