import type { Scope } from "effect"
import { Chunk, Clock, Deferred, Duration, Effect, Exit, FiberMap, Stream } from "effect"
import { BackendError, type SpawnFailed, type Unsupported } from "../domain/Errors.js"
import type { BackendComputer, ExitInfo, SpawnSpec } from "../services/Backend.js"
import * as ProcessActor from "./ProcessActor.js"

export type ComputerState = "running" | "restarting" | "resetting" | "deleting" | "lost" | "closing" | "closed"

export interface ProcessRequest {
  readonly id: string
  readonly command: string
  readonly spec: SpawnSpec
  readonly headBytes: number
  readonly tailBytes: number
  readonly mailboxCapacity: number
  readonly onExit: (actor: ProcessActor.ProcessActor) => Effect.Effect<void>
}

/** The whole result of a short helper command (file transfer), not listed as a process. */
export interface RunResult {
  readonly exit: ExitInfo
  readonly stdout: Uint8Array
  readonly stderr: string
  /** stdout went past the limit asked for. */
  readonly overflow: boolean
}

/** A computer as an actor: its backend handle, its lifecycle, its owners and its processes. */
export interface ComputerActor {
  readonly id: string
  readonly temporary: boolean
  readonly backendName: string
  readonly providerId: string
  readonly home: string
  readonly image: string
  readonly createdAt: number
  readonly state: Effect.Effect<ComputerState>
  /** Starts a process owned by this computer (not by the caller); returns once it runs. */
  readonly spawn: (request: ProcessRequest) => Effect.Effect<ProcessActor.ProcessActor, SpawnFailed | BackendError>
  /** Runs a helper command to completion, stdin given, stdout kept up to `maxBytes`. */
  readonly run: (spec: SpawnSpec, stdin: Uint8Array | undefined, maxBytes: number) => Effect.Effect<RunResult, SpawnFailed | BackendError>
  readonly liveProcesses: Effect.Effect<number>
  /** Ends every process (SIGTERM, a grace, then kill), then restarts keeping the writable state. */
  readonly restart: Effect.Effect<void, BackendError | Unsupported>
  /** Ends every process, then recreates the computer from its base image. */
  readonly factoryReset: Effect.Effect<void, BackendError | Unsupported>
  /** Ends every process and removes the computer for good. */
  readonly destroy: Effect.Effect<void, BackendError>
}

export interface ComputerActorOptions {
  readonly id: string
  readonly temporary: boolean
  readonly backendName: string
  readonly killGraceMs: number
}

/**
 * Runs a computer in the given Scope. Each process runs as a fiber of the computer's FiberMap, so
 * it belongs to the computer, never to the request that started it. Lifecycle operations are
 * serialised by a one-permit semaphore; processes end first (ps says why), then the backend acts.
 */
export const make = (
  backend: BackendComputer,
  options: ComputerActorOptions
): Effect.Effect<ComputerActor, never, Scope.Scope> =>
  Effect.gen(function*() {
    const createdAt = yield* Clock.currentTimeMillis
    let state: ComputerState = "running"
    let lostReason: string | undefined
    const live = new Map<string, ProcessActor.ProcessActor>()
    const supervisor = yield* FiberMap.make<string>()
    const lifecycle = yield* Effect.makeSemaphore(1)

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
        yield* FiberMap.clear(supervisor)
      })

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        if (state !== "lost") state = "closing"
        yield* endProcesses(`computer ${options.id} closed`)
        state = "closed"
      })
    )

    yield* backend.lost.pipe(
      Effect.flatMap((why) =>
        Effect.gen(function*() {
          if (state === "closing" || state === "closed" || state === "deleting") return
          lostReason = why
          state = "lost"
          yield* Effect.logWarning(`computer ${options.id} was lost: ${why}`)
          yield* Effect.forEach([...live.values()], (actor) => actor.noteReason(`computer lost: ${why}`), { discard: true })
          yield* FiberMap.clear(supervisor)
        })
      ),
      Effect.forkScoped
    )

    const usable = Effect.suspend(() =>
      state === "running"
        ? Effect.void
        : new BackendError({
          backend: options.backendName,
          reason: state === "lost"
            ? `computer ${options.id} was lost (${lostReason}); restart or delete it`
            : `computer ${options.id} is ${state}`
        })
    )

    const spawn = (request: ProcessRequest) =>
      Effect.gen(function*() {
        yield* usable
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

    const run = (spec: SpawnSpec, stdin: Uint8Array | undefined, maxBytes: number) =>
      Effect.scoped(Effect.gen(function*() {
        yield* usable
        const process = yield* backend.spawn(spec)
        if (stdin && stdin.length > 0) yield* process.write(stdin)
        yield* process.closeStdin
        const out: Array<Uint8Array> = []
        let outBytes = 0
        let overflow = false
        let err = ""
        const decoder = new TextDecoder()
        let exit: ExitInfo = { exitCode: null, signal: "SIGKILL" }
        yield* process.events.pipe(
          Stream.runForEachChunk((events) =>
            Effect.sync(() => {
              for (const event of Chunk.toReadonlyArray(events)) {
                if (event._tag === "Stdout") {
                  const room = maxBytes - outBytes
                  if (event.data.length > room) overflow = true
                  const kept = event.data.subarray(0, Math.max(room, 0))
                  if (kept.length > 0) out.push(Uint8Array.from(kept))
                  outBytes += kept.length
                } else if (event._tag === "Stderr") {
                  if (err.length < 64 * 1024) err += decoder.decode(event.data, { stream: true })
                } else {
                  exit = event.exit
                }
              }
            })
          )
        )
        const stdout = new Uint8Array(outBytes)
        let offset = 0
        for (const piece of out) {
          stdout.set(piece, offset)
          offset += piece.length
        }
        return { exit, stdout, stderr: err, overflow }
      }))

    const lifecycleStep = <E>(
      during: ComputerState,
      after: ComputerState,
      what: string,
      done: string,
      act: Effect.Effect<void, E>
    ): Effect.Effect<void, E> =>
      lifecycle.withPermits(1)(
        Effect.gen(function*() {
          state = during
          yield* endProcesses(`computer ${options.id} ${done}`)
          yield* act.pipe(Effect.onExit((exit) =>
            Effect.sync(() => {
              state = Exit.isSuccess(exit) ? after : "lost"
              lostReason = Exit.isSuccess(exit) ? undefined : `${what} failed`
            })
          ))
        })
      )

    return {
      id: options.id,
      temporary: options.temporary,
      backendName: options.backendName,
      providerId: backend.providerId,
      home: backend.home,
      image: backend.image ?? options.backendName,
      createdAt,
      state: Effect.sync(() => state),
      spawn,
      run,
      liveProcesses: Effect.suspend(() => Effect.forEach([...live.values()], (actor) => actor.status)).pipe(
        Effect.map((statuses) => statuses.filter((status) => status === "running").length)
      ),
      restart: lifecycleStep("restarting", "running", "restart", "restarted", backend.restart),
      factoryReset: lifecycleStep("resetting", "running", "factory reset", "factory reset", backend.factoryReset),
      destroy: lifecycleStep("deleting", "closed", "delete", "deleted", backend.destroy)
    }
  })
