/**
 * Ports inside a computer, reached from the server without a network in the computer (preview URLs):
 * through its connection's channel (the agent's relay), or `Unsupported` where the backend has none;
 * or, on a cloud, the provider's own public URL of the port.
 */
import * as Effect from "effect/Effect"
import type { Duplex } from "node:stream"
import { type InvalidInput, type ProviderError, Unsupported } from "../domain/Errors.js"
import type { Connection } from "../services/Backend.js"

/** A connection to 127.0.0.1:port inside the computer of `target`. */
export const open = (backend: string, target: Connection, port: number): Effect.Effect<Duplex, ProviderError | Unsupported> =>
  target.openPort?.(port) ?? Effect.fail(new Unsupported({ backend, feature: "preview URLs" }))

/** The provider's own URL of 127.0.0.1:port inside the computer, or undefined where the backend proxies instead. */
export const publicUrl = (target: Connection, port: number): Effect.Effect<string | undefined, ProviderError | InvalidInput> =>
  target.publicUrl?.(port) ?? Effect.succeed(undefined)
