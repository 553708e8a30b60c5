import { Clock, Deferred, Effect, Layer, Mailbox, Option } from "effect"
import type { ComputerMetadata } from "../../src/domain/ComputerMetadata.js"
import { providerError, SpawnFailed, Unsupported } from "../../src/domain/Errors.js"
import {
  Backend,
  type BackendProcess,
  type Capabilities,
  type Instance,
  type ProcessEvent,
  type Renewal,
  type SpawnSpec
} from "../../src/services/Backend.js"

/** A process of the scripted backend, steered by the test. */
export interface ScriptedProcess {
  readonly spec: SpawnSpec
  readonly generation: number
  readonly signals: Array<string>
  readonly writes: Array<Uint8Array>
  readonly emit: (event: ProcessEvent) => Effect.Effect<void>
  readonly end: Effect.Effect<void>
}

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
}

const encoder = new TextEncoder()

/**
 * A fake provider for kernel tests: computers live in a map the test can read and change (as if
 * from outside), every call is logged, and processes are steered by their command (argv[2] of
 * `sh -c`): `fail-fast` writes to stderr and exits 1 at once; `hang-stdin` never finishes a write;
 * `missing` fails to spawn; `echo-stdin` writes back what it reads; anything else runs until
 * signalled (then exits with that signal).
 */
export const make = (options: ScriptedOptions = {}) => Effect.gen(function*() {
  const spawned: Array<ScriptedProcess> = []
  const calls: Array<string> = []
  const computers = new Map<string, ScriptedComputer>()
  const failNext = new Map<string, string>()
  const createGate = yield* Deferred.make<void>()
  if (!options.gateCreate) yield* Deferred.succeed(createGate, undefined)
  let counter = 0

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
      const mailbox = yield* Mailbox.make<ProcessEvent>()
      const scripted: ScriptedProcess = {
        spec,
        generation,
        signals: [],
        writes: [],
        emit: (event) => Effect.asVoid(mailbox.offer(event)),
        end: Effect.asVoid(mailbox.end)
      }
      spawned.push(scripted)
      if (command === "fail-fast") {
        yield* scripted.emit({ _tag: "Stderr", data: encoder.encode("boom\n") })
        yield* scripted.emit({ _tag: "Exit", exit: { exitCode: 1, signal: null } })
        yield* scripted.end
      }
      // Closing the process's scope kills it, as every backend does.
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          yield* scripted.emit({ _tag: "Exit", exit: { exitCode: null, signal: "SIGKILL" } })
          yield* scripted.end
        })
      )
      const never = yield* Deferred.make<void>()
      const process: BackendProcess = {
        pid: spawned.length,
        events: Mailbox.toStream(mailbox),
        write: (data) =>
          command === "hang-stdin"
            ? Deferred.await(never)
            : Effect.sync(() => void scripted.writes.push(data)).pipe(
              // `echo-stdin` answers every write with it, like a terminal's echo or a REPL.
              Effect.zipRight(command === "echo-stdin" ? scripted.emit({ _tag: "Stdout", data: Uint8Array.from(data) }) : Effect.void)
            ),
        closeStdin: Effect.void,
        signal: (signal) =>
          Effect.gen(function*() {
            scripted.signals.push(signal)
            calls.push(`signal ${signal}`)
            yield* scripted.emit({ _tag: "Exit", exit: { exitCode: null, signal } })
            yield* scripted.end
          }),
        resize: () => Effect.void
      }
      return process
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
    files: false,
    networkControl: false,
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
        const computer = yield* live(instance)
        const generation = ++computer.connections
        const lost = yield* Deferred.make<string>()
        computer.lose = (reason) => Deferred.succeed(lost, reason).pipe(Effect.asVoid)
        yield* Effect.addFinalizer(() => Effect.sync(() => calls.push(`disconnect ${instance.metadata.id}`)))
        return { home: "/home/agent", spawn: spawnIn(generation), lost: Deferred.await(lost) }
      }),
    restart: (instance) =>
      Effect.gen(function*() {
        calls.push(`restart ${instance.metadata.id}`)
        if (!capabilities.restart) return yield* new Unsupported({ backend: "scripted", feature: "restart" })
        yield* failIfAsked("restart")
        return (yield* live(instance)).instance
      }),
    remove: (instance) =>
      Effect.sync(() => {
        calls.push(`remove ${instance.metadata.id}`)
        computers.delete(instance.providerId)
      }),
    adopt: options.noAdopt ? undefined : (instance, metadata) =>
      Effect.gen(function*() {
        calls.push(`adopt ${instance.metadata.id} as ${metadata.id}`)
        const computer = yield* live(instance)
        computer.instance = { ...computer.instance, metadata: { ...metadata, pooled: true } }
        return computer.instance
      }),
    suspend: (instance) => Effect.sync(() => void calls.push(`suspend ${instance.metadata.id}`)),
    renewal: options.renewal === undefined ? undefined : {
      ...options.renewal,
      renew: (instance, until) =>
        Effect.sync(() => {
          calls.push(`renew ${instance.metadata.id} ${new Date(until).toISOString()}`)
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
    failNext: (operation: "create" | "connect" | "restart", detail: string) => Effect.sync(() => void failNext.set(operation, detail)),
    openCreate: Deferred.succeed(createGate, undefined)
  } as const
})
