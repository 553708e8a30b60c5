/**
 * Every call of a provider in a `provider.<call>` span (client kind), wrapped once in the kernel
 * (where the registry takes the `Backend`), not in each backend: find, create, start, connect,
 * restart, remove, adopt, suspend, renew. Attributes: the backend, our computer id, the provider's
 * id, and for a failure the provider's reason (`Conflict`, `NotFound`, …). Starting a process is
 * not a span of its own: it is the start of the process's span (a third span per call would cost
 * more than it tells).
 */
import * as Effect from "effect/Effect"
import type { ComputerMetadata } from "../../domain/ComputerMetadata.js"
import type { Backend, Instance, Query } from "../../services/Backend.js"
import { annotate, Attr, type Attributes, span } from "../../services/Spans.js"

const ofInstance = (instance: Instance): Attributes => ({
  [Attr.computerId]: instance.metadata.id,
  [Attr.providerId]: instance.providerId,
  "kilntainers.computer.state": instance.state
})

const ofMetadata = (metadata: ComputerMetadata): Attributes => ({
  [Attr.computerId]: metadata.id,
  [Attr.temporary]: metadata.temporary
})

/** A provider's failure reason, when it has one (ProviderError). */
const reasonOf = (error: unknown) =>
  typeof error === "object" && error !== null && "reason" in error && typeof error.reason === "string" ? error.reason : undefined

/** The backend with every provider call in a span. */
export const tracedBackend = (backend: Backend["Type"]): Backend["Type"] => {
  const call = (name: string, attributes: () => Attributes) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    effect.pipe(
      Effect.tapError((error) => annotate(() => {
        const reason = reasonOf(error)
        return reason === undefined ? {} : { [Attr.providerFailure]: reason }
      })),
      span(`provider.${name}`, { kind: "client", attributes: () => ({ [Attr.backend]: backend.name, ...attributes() }) })
    )
  const after = (result: Instance) => annotate(() => ofInstance(result))

  return {
    ...backend,
    find: (query: Query) =>
      backend.find(query).pipe(
        Effect.tap((found) => annotate(() => ({ "kilntainers.provider.found": found.length }))),
        call("find", () => ({
          ...(query.id === undefined ? {} : { [Attr.computerId]: query.id }),
          ...(query.temporary === undefined ? {} : { [Attr.temporary]: query.temporary })
        }))
      ),
    create: (metadata) => backend.create(metadata).pipe(Effect.tap(after), call("create", () => ofMetadata(metadata))),
    start: (instance) => backend.start(instance).pipe(Effect.tap(after), call("start", () => ofInstance(instance))),
    connect: (instance) => backend.connect(instance).pipe(call("connect", () => ofInstance(instance))),
    restart: (instance) => backend.restart(instance).pipe(Effect.tap(after), call("restart", () => ofInstance(instance))),
    remove: (instance) => backend.remove(instance).pipe(call("remove", () => ofInstance(instance))),
    adopt: backend.adopt === undefined ? undefined : (instance, metadata) =>
      backend.adopt!(instance, metadata).pipe(
        Effect.tap(after),
        call("adopt", () => ({ ...ofInstance(instance), "kilntainers.computer.new_id": metadata.id }))
      ),
    suspend: backend.suspend === undefined ? undefined : (instance) =>
      backend.suspend!(instance).pipe(call("suspend", () => ofInstance(instance))),
    renewal: backend.renewal === undefined ? undefined : {
      ...backend.renewal,
      renew: (instance, until) =>
        backend.renewal!.renew(instance, until).pipe(
          call("renew", () => ({ ...ofInstance(instance), "kilntainers.computer.lease_until": new Date(until).toISOString() }))
        )
    }
  }
}
