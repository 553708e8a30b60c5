/**
 * The sweep of checkpoints that crashed servers left behind. A checkpoint lives no longer than the
 * server that took it (CheckpointStore.ts removes its own at exit); a server killed with SIGKILL
 * or by a crash cannot, so the next server on the same host removes the copies whose recorded
 * owner process is gone (Checkpointing.sweep: host directories, Docker/Podman images). Once at
 * start, in the background: never on the path to the first answer.
 */
import * as Effect from "effect/Effect"
import type { Backend } from "../services/Backend.js"
import type { ServerIdentity } from "../services/ServerIdentity.js"

export const run = (backend: Backend["Type"], server: ServerIdentity["Type"]) => {
  const sweep = backend.checkpoints?.sweep
  return sweep === undefined ? Effect.void : sweep(server.alive).pipe(
    Effect.tap((removed) =>
      removed === 0 ? Effect.void : Effect.logInfo(`${backend.name} backend: removed ${removed} checkpoint(s) left by servers that are gone`)
    ),
    Effect.catchAll((error) => Effect.logWarning(`${backend.name} backend: cannot sweep leftover checkpoints: ${error.message}`)),
    Effect.asVoid
  )
}
