/**
 * What the Fly backend's tests share: a fake per block, options for it, the provider alone (for
 * its own calls: labels, errors, limits, the fake's contract) or the runtime over it (for
 * lifecycle behaviour, which the kernel owns), and a process's events collected.
 */
import { assert } from "@effect/vitest"
import { Chunk, Effect, Layer, Redacted, Stream } from "effect"
import type { Scope } from "effect"
import { afterAll, afterEach, beforeAll } from "vitest"
import type { ComputerMetadata } from "../../../../src/domain/ComputerMetadata.js"
import type { FlyBackendOptions } from "../../../../src/layers/backends/fly/FlyBackend.js"
import * as FlyBackend from "../../../../src/layers/backends/fly/FlyBackend.js"
import * as Runtime from "../../../../src/layers/Runtime.js"
import { type BackendProcess, type ProcessEvent, ownedEvents } from "../../../../src/services/Backend.js"
import { Backend } from "../../../../src/services/Backend.js"
import { Computers } from "../../../../src/services/Computers.js"
import { Processes } from "../../../../src/services/Processes.js"
import { Settings } from "../../../../src/services/Settings.js"
import type { FlyFake } from "../../../support/FlyFake.js"
import { startFlyFake } from "../../../support/FlyFake.js"

export const TOKEN = "fo1_super-secret-test-token-0123456789"
export const APP = "kt-test"
let servers = 0

export const options = (fakeUrl: string, over: Partial<FlyBackendOptions> = {}): FlyBackendOptions => ({
  app: APP,
  token: Redacted.make(TOKEN),
  image: FlyBackend.DEFAULT_IMAGE,
  region: "fra",
  cpuKind: "shared",
  cpus: 1,
  memoryMb: 512,
  rootfsSizeGb: undefined,
  apiUrl: fakeUrl,
  network: false,
  ...over,
  tuning: { watchIntervalMs: 200, retryBaseMs: 50, ...over.tuning }
})

/** The provider alone, in a scope. */
export const withBackend = <A, E>(
  opts: FlyBackendOptions,
  body: (backend: Backend["Type"]) => Effect.Effect<A, E, Scope.Scope>
) => Effect.scoped(Effect.flatMap(Backend, body)).pipe(Effect.provide(FlyBackend.layer(opts)))

/** What the kernel would record on a new computer of this server. */
export const metadata = (id: string, temporary: boolean, instance = `test-${process.pid}`): ComputerMetadata => ({
  id,
  temporary,
  image: FlyBackend.DEFAULT_IMAGE,
  created: new Date().toISOString(),
  instance,
  expires: new Date(Date.now() + 600_000).toISOString()
})

/**
 * A new machine and a connection to it, as the kernel would make them; a temporary one is removed
 * when the scope closes (after the connection).
 */
export const open = (backend: Backend["Type"], id: string, temporary = true) =>
  Effect.gen(function*() {
    const instance = yield* backend.create(metadata(id, temporary))
    if (temporary) yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
    const connection = yield* backend.connect(instance)
    return { instance, connection, machineId: instance.providerId }
  })

/** One server: the runtime over the Fly backend (a fresh server instance each time). */
export const withKernel = <A, E>(
  opts: FlyBackendOptions,
  body: (services: { readonly processes: Processes["Type"]; readonly computers: Computers["Type"] }) => Effect.Effect<A, E, Scope.Scope>
) =>
  Effect.scoped(Effect.gen(function*() {
    const context = yield* Layer.build(Runtime.layer(Settings.make({ killGraceMs: 500 }), FlyBackend.layer(opts), `fly-test-${process.pid}-${++servers}`))
    return yield* body({ processes: yield* Effect.provide(Processes, context), computers: yield* Effect.provide(Computers, context) })
  }))

export const spec = (argv: ReadonlyArray<string>) => ({ argv, cwd: FlyBackend.HOME, env: { PATH: "/usr/bin:/bin", HOME: FlyBackend.HOME } })

export const collect = (process: BackendProcess) =>
  ownedEvents(process).pipe(
    // Event data are views valid until the next pull: copied as they come.
    Stream.map((event): ProcessEvent => (event._tag === "Exit" ? event : { _tag: event._tag, data: Uint8Array.from(event.data) })),
    Stream.runCollect,
    Effect.map((chunk) => {
      const events = Chunk.toReadonlyArray(chunk)
      const text = (tag: "Stdout" | "Stderr") =>
        Buffer.concat(events.flatMap((event: ProcessEvent) => (event._tag === tag ? [event.data] : []))).toString("utf8")
      const exits = events.flatMap((event) => (event._tag === "Exit" ? [event.exit] : []))
      return { stdout: text("Stdout"), stderr: text("Stderr"), exits, last: events[events.length - 1] }
    })
  )

/** A raw POST to the fake (a client other than the backend). */
export const post = async (url: string, path: string, body: unknown) => {
  const response = await fetch(`${url}/v1/apps/${APP}/machines${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify(body)
  })
  return (await response.json()) as { id: string }
}

/**
 * One fake for a describe block, at Fly's documented limits; after each test nothing broke Fly's
 * contract and the fake's knobs are back to their defaults.
 */
export const useFake = () => {
  const holder: { fake: FlyFake } = { fake: undefined as unknown as FlyFake }
  beforeAll(async () => {
    holder.fake = await startFlyFake({ token: TOKEN, app: APP })
  })
  afterAll(async () => {
    await holder.fake?.close()
  })
  afterEach(() => {
    const fake = holder.fake
    const violations = fake.violations.splice(0)
    fake.rateLimit = { perSecond: 1, burst: 3 }
    fake.retryAfter = "alternate"
    fake.execChildren = "killed"
    fake.bootDelayMs = 0
    fake.stopDelayMs = 300
    fake.clearFaults()
    assert.deepStrictEqual(violations, [], "everything asked and answered followed Fly's published contract")
  })
  return () => holder.fake
}
