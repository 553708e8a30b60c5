/**
 * A computer kilntainers did not create (Docker's `--docker-container`: `metadata.external`): its
 * processes are ours to run, the computer is not ours to restart, reset or remove. The refusal
 * comes before anything is touched, so its processes keep running.
 */
import * as Effect from "effect/Effect"
import { type ProviderError, providerError } from "../domain/Errors.js"
import type { Instance } from "../services/Backend.js"

/** Fails when `instance` is an adopted computer; `what` is the refused step ("delete", "factory reset"). */
export const refuse = (backend: string, instance: Instance | undefined, what: string): Effect.Effect<void, ProviderError> =>
  instance?.metadata.external
    ? Effect.fail(providerError(
      backend,
      `${what} computer '${instance.metadata.id}'`,
      "Invalid",
      `it is the existing container ${instance.providerId.slice(0, 12)}, adopted with --docker-container: kilntainers ` +
        `runs processes in it but never stops, restarts, resets or removes it; do that with the engine itself`
    ))
    : Effect.void
