/**
 * How the conformance suite runs a case: a fresh server (Runtime.layer over the target's backend
 * layer) per case — two in a row are two servers over one provider state — or one kept up beside
 * another, and the cases that need a capability the backend may not declare.
 */
import { Effect, Exit, Layer, Scope } from "effect"
import * as Runtime from "../../src/layers/Runtime.js"
import { Backend, type Capabilities } from "../../src/services/Backend.js"
import { Computers } from "../../src/services/Computers.js"
import { Files } from "../../src/services/Files.js"
import { decoding, Processes } from "../../src/services/Processes.js"
import { Settings, type SettingsShape } from "../../src/services/Settings.js"

export interface ConformanceTarget {
  /** A fresh backend layer (a new server instance over the same provider state). */
  readonly backend: () => Layer.Layer<Backend, unknown>
  readonly settings?: Partial<SettingsShape>
  /** The backend can run here (else: skipped locally, a failure under CI=true). */
  readonly available: boolean
  readonly requirement: string
  /** The computer's filesystem keeps permission bits (not WASM's: any file may be run). */
  readonly fileModes?: boolean
  /** How to start the built CLI as another server over the same provider state (its flags and environment). */
  readonly cli?: { readonly args: ReadonlyArray<string>; readonly env?: Readonly<Record<string, string>> } | undefined
}

export type Services = Processes | Computers | Files | Backend

const serverOf = (target: ConformanceTarget) => Runtime.layer(Settings.make({ killGraceMs: 500, ...target.settings }), target.backend())

/** A server that stays up until `close`: `run` runs more in it. */
export interface KeptServer<A> {
  readonly value: A
  readonly run: <B, E2>(body: Effect.Effect<B, E2, Services>) => Effect.Effect<B, E2>
  readonly close: Effect.Effect<void>
}

/** Runs `body` in a fresh server, which ends with it. */
export const run = <A, E>(target: ConformanceTarget, body: Effect.Effect<A, E, Services>) => body.pipe(Effect.provide(serverOf(target)))

/** Runs `body` in a fresh server that stays up, beside others, until `close`. */
export const keep = <A, E>(target: ConformanceTarget, body: Effect.Effect<A, E, Services>): Effect.Effect<KeptServer<A>, unknown> =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const runtime = yield* Layer.toRuntime(serverOf(target)).pipe(Scope.extend(scope))
    const value = yield* Effect.provide(body, runtime).pipe(Effect.onError(() => Scope.close(scope, Exit.void)))
    return {
      value,
      run: <B, E2>(more: Effect.Effect<B, E2, Services>) => Effect.provide(more, runtime),
      close: Scope.close(scope, Exit.void)
    }
  })

/**
 * A case that needs a capability runs only on backends that declare it — and must then pass: a
 * backend that claims what it does not deliver fails here.
 */
export const needing = <A, E>(
  target: ConformanceTarget,
  capabilities: ReadonlyArray<keyof Capabilities>,
  body: Effect.Effect<A, E, Services>
) =>
  (context: { readonly skip: (note?: string) => void }) =>
    run(target, Effect.gen(function*() {
      const backend = yield* Backend
      const missing = capabilities.filter((capability) => !backend.capabilities[capability])
      if (missing.length > 0) return context.skip(`${backend.name} does not declare ${missing.join(", ")}`)
      return yield* body
    }))

/** The services as a client uses them: inputs as plain values, decoded on the way in. */
export const services = Effect.all({ processes: Effect.map(Processes, decoding), computers: Computers, files: Files })

