/**
 * The metadata a new computer is created with: who made it (this server instance and its owner),
 * when, a nonce that finds it again when the provider's answer to the create was lost, and the
 * lease's first expiry where the backend renews one.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Random from "effect/Random"
import type { ComputerMetadata } from "../domain/ComputerMetadata.js"
import type { Backend, Instance } from "../services/Backend.js"
import type { ComputerActorOptions } from "./ComputerActorApi.js"

export const iso = (millis: number) => new Date(millis).toISOString()

/** A fresh random nonce: finds a computer whose create answer was lost. */
const nonce = Effect.map(Random.nextIntBetween(0, 0x7fffffff), (n) => n.toString(36))

/** `previous` is the computer a factory reset replaces (its image is kept); `pooled`: made for the warm pool. */
export const newMetadata = (
  backend: Backend["Type"],
  options: ComputerActorOptions,
  id: string,
  previous: Instance | undefined,
  pooled: boolean
): Effect.Effect<ComputerMetadata> =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    return {
      id,
      temporary: options.temporary,
      image: previous?.metadata.image ?? backend.image,
      created: iso(now),
      instance: options.server.instanceId,
      owner: options.server.owner,
      nonce: yield* nonce,
      ...(backend.renewal === undefined ? {} : { expires: iso(now + backend.renewal.leaseMs) }),
      ...(pooled && previous === undefined ? { pooled: true } : {})
    }
  })
