/**
 * A computer of any backend made with the provider's own calls (create, connect, remove), without
 * the kernel: for tests whose point is the provider or the agent inside it. Lifecycles are the
 * kernel's: test them through Runtime.layer.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import type { ComputerMetadata } from "../../src/domain/ComputerMetadata.js"
import type { Backend, Connection, Instance } from "../../src/services/Backend.js"

/** What the kernel would record for a new computer of a test server. */
export const metadata = (id: string, temporary = true, image = "host", instance = "test-server"): ComputerMetadata => ({
  id,
  temporary,
  image,
  created: new Date().toISOString(),
  instance
})

/** A computer of `backend`, created and connected for the Scope; a temporary one is removed after. */
export const open = (
  backend: Backend["Type"],
  id: string,
  temporary = true
): Effect.Effect<{ readonly instance: Instance; readonly connection: Connection }, unknown, Scope.Scope> =>
  Effect.gen(function*() {
    const instance = yield* Effect.acquireRelease(
      backend.create(metadata(id, temporary, backend.image)),
      (made) => (temporary ? Effect.ignore(backend.remove(made)) : Effect.void)
    )
    const connection = yield* backend.connect(instance)
    return { instance, connection }
  })
