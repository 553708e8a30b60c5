/**
 * Ports inside a computer, reached from the server without a network in the computer (preview URLs):
 * through its connection's channel (the agent's relay), or `Unsupported` where the backend has none.
 */
import * as Effect from "effect/Effect"
import type { Duplex } from "node:stream"
import { type ProviderError, Unsupported } from "../domain/Errors.js"
import type { Connection } from "../services/Backend.js"

/** A connection to 127.0.0.1:port inside the computer of `target`. */
export const open = (backend: string, target: Connection, port: number): Effect.Effect<Duplex, ProviderError | Unsupported> =>
  target.openPort?.(port) ?? Effect.fail(new Unsupported({ backend, feature: "preview URLs" }))
