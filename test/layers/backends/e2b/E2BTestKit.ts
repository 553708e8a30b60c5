// What the E2B backend tests share: options pointing at a fake, the provider's calls with a
// scoped sandbox, the kernel over the provider, and readers of process events.
import { Clock, Deferred, Effect, Layer, Redacted, Ref, Stream, TestClock, TestServices } from "effect"
import type { Scope } from "effect"
import type { ComputerMetadata } from "../../../../src/domain/ComputerMetadata.js"
import * as E2BBackend from "../../../../src/layers/backends/e2b/E2BBackend.js"
import * as Runtime from "../../../../src/layers/Runtime.js"
import { Backend, type BackendProcess, type Connection, type ExitInfo, type Instance, type SpawnSpec, ownedEvents } from "../../../../src/services/Backend.js"
import { Computers } from "../../../../src/services/Computers.js"
import { Files } from "../../../../src/services/Files.js"
import { decoding, Processes } from "../../../../src/services/Processes.js"
import { Settings } from "../../../../src/services/Settings.js"
import * as E2BFake from "../../../support/E2BFake.js"

export const run = Math.random().toString(36).slice(2, 8)
let counter = 0
export const computerId = (what: string) => `e${run}-${what}-${counter++}`
export const ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: E2BFake.FAKE_HOME, LANG: "C.UTF-8" }

/** Backend options against `fake`. */
export const options = (fake: E2BFake.E2BFake, overrides: Partial<E2BBackend.E2BBackendOptions> = {}): E2BBackend.E2BBackendOptions => ({
  apiKey: Redacted.make(fake.apiKey),
  template: "base",
  sandboxTimeoutSec: 120,
  metadata: { suite: `e2b-test-${run}` },
  envs: { FROM_SANDBOX: "yes" },
  apiUrl: fake.url,
  sandboxUrl: fake.url,
  domain: undefined,
  home: E2BFake.FAKE_HOME,
  requestTimeoutMs: 10_000,
  ...overrides
})

// ---- the provider's own calls ---------------------------------------------------------------

/** The metadata the kernel would give a new computer. */
export const metadataFor = (id: string, temporary: boolean, image = "base") =>
  Effect.map(Clock.currentTimeMillis, (now): ComputerMetadata => ({
    id,
    temporary,
    image,
    created: new Date(now).toISOString(),
    instance: `test-${run}`,
    nonce: Math.random().toString(36).slice(2)
  }))

export interface Opened {
  readonly instance: Instance
  readonly connection: Connection
}

/** A new sandbox, connected, removed with the scope (as the kernel would). */
export const opened = (id: string, temporary = true): Effect.Effect<Opened, unknown, Backend | Scope.Scope> =>
  Effect.gen(function*() {
    const backend = yield* Backend
    const instance = yield* Effect.acquireRelease(
      Effect.flatMap(metadataFor(id, temporary, backend.image), backend.create),
      (created) => Effect.ignore(backend.remove(created))
    )
    const connection = yield* backend.connect(instance)
    return { instance, connection }
  })

export interface Result {
  readonly stdout: Uint8Array
  readonly stderr: string
  readonly exit: ExitInfo | undefined
}

export const collect = (process: BackendProcess) =>
  ownedEvents(process).pipe(
    Stream.runFold({ stdout: new Uint8Array(0), stderr: "", exit: undefined } as Result, (acc, event) =>
      event._tag === "Exit"
        ? { ...acc, exit: event.exit }
        : event._tag === "Stdout"
        ? { ...acc, stdout: Buffer.concat([acc.stdout, event.data]) }
        : { ...acc, stderr: acc.stderr + Buffer.from(event.data).toString() })
  )

export const spec = (argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}): SpawnSpec => ({
  argv,
  cwd: E2BFake.FAKE_HOME,
  env: ENV,
  ...extra
})

export const exec = (connection: Connection, argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}) =>
  Effect.scoped(Effect.flatMap(connection.spawn(spec(argv, extra)), collect))

export const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8")

/** How many processes of the sandbox run exactly `args`. */
export const count = (connection: Connection, args: string) =>
  exec(connection, ["sh", "-c", `ps -eo args | grep -c '^${args}$' || true`]).pipe(Effect.map((r) => text(r.stdout).trim()))

/** Reads events until `pattern` shows up in stdout; gives the fiber that keeps reading. */
export const waitFor = (process: BackendProcess, pattern: RegExp) =>
  Effect.gen(function*() {
    const seen = yield* Deferred.make<void>()
    const output = yield* Ref.make("")
    const exit = yield* Deferred.make<ExitInfo>()
    const fiber = yield* ownedEvents(process).pipe(
      Stream.runForEach((event) =>
        event._tag === "Exit"
          ? Deferred.succeed(exit, event.exit)
          : Ref.updateAndGet(output, (o) => o + Buffer.from(event.data).toString()).pipe(
            Effect.flatMap((o) => (pattern.test(o) ? Deferred.succeed(seen, undefined) : Effect.void))
          )
      ),
      Effect.fork
    )
    yield* Deferred.await(seen).pipe(Effect.timeout("20 seconds"))
    return { fiber, output, exit }
  })

// ---- through the kernel ---------------------------------------------------------------------

export type Kernel = Processes | Computers | Files | Backend

/** The runtime over the E2B backend, as a server builds it (one server instance per layer). */
export const kernel = (fake: E2BFake.E2BFake, overrides: Partial<E2BBackend.E2BBackendOptions> = {}) =>
  Runtime.layer(Settings.make({ killGraceMs: 500 }), E2BBackend.layer(options(fake, overrides)), `test-${run}-${counter++}`)

/** The services as a client uses them: process inputs as plain values, decoded on the way in. */
export const services = Effect.all({ processes: Effect.map(Processes, decoding), computers: Computers, files: Files, backend: Backend })

/** Runs `body` against a fresh server over the fake; the server shuts down after. */
export const withKernel = <A, E>(
  fake: E2BFake.E2BFake,
  body: Effect.Effect<A, E, Kernel>,
  overrides: Partial<E2BBackend.E2BBackendOptions> = {}
) => Effect.scoped(Effect.provide(body, kernel(fake, overrides)))

/** Polls until `condition` holds (the fake runs on wall-clock time), at most `seconds`. */
export const eventually = <E, R>(condition: Effect.Effect<boolean, E, R>, seconds = 20) =>
  Effect.gen(function*() {
    for (let i = 0; i < seconds * 10; i++) {
      if (yield* condition) return
      yield* Effect.sleep("100 millis")
    }
    return yield* Effect.dieMessage(`condition not reached in ${seconds} s`)
  })

/** Builds just the provider layer (startup checks). */
export const buildBackend = (fake: E2BFake.E2BFake, overrides: Partial<E2BBackend.E2BBackendOptions> = {}) =>
  Effect.scoped(Layer.build(E2BBackend.layer(options(fake, overrides))))

// ---- time, with the fake on a manual clock ----------------------------------------------------

/**
 * Lets the HTTP calls a step of time started reach the fake and be answered: no control-plane
 * request in progress and none new for a few milliseconds (bounded: real I/O, not the clock under
 * test).
 */
export const settled = (fake: E2BFake.E2BFake) =>
  Effect.gen(function*() {
    let seen = -1
    for (let i = 0; i < 500; i++) {
      const now = fake.requests.length
      if (fake.inFlight() === 0 && now === seen) return
      seen = now
      yield* TestServices.provideLive(Effect.sleep("15 millis"))
    }
  })

/** Sets the kernel's TestClock to the fake's manual time (a fake outlives a test's TestClock). */
export const alignClocks = (fake: E2BFake.E2BFake) => Effect.suspend(() => TestClock.setTime(fake.now()))

/**
 * Moves time on for the kernel (TestClock) and the fake (`manualClock`) together, `stepMs` at a
 * time; after each step, the calls it started are answered before the next.
 */
export const advance = (fake: E2BFake.E2BFake, ms: number, stepMs = 100) =>
  Effect.gen(function*() {
    for (let moved = 0; moved < ms; moved += stepMs) {
      yield* TestClock.adjust(stepMs)
      yield* settled(fake)
      yield* Effect.promise(() => fake.advance(stepMs))
      yield* settled(fake)
    }
  })
