/**
 * The checkpoints of one server: who made each (its session), whether other sessions may fork it,
 * the provider's stored copy, and the per-session quota. A checkpoint lives as long as the session
 * that made it (like a temporary computer): it is removed when that session ends, or with the
 * server. The registry (ComputerRegistry.ts) asks it for a checkpoint's copy when it makes a fork.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import { generateComputerId } from "../domain/ComputerIds.js"
import type { Owner } from "../domain/ComputerMetadata.js"
import { AccessDenied, CheckpointNotFound, type ComputerUnavailable, QuotaExceeded, Unsupported } from "../domain/Errors.js"
import type { Backend, Instance } from "../services/Backend.js"
import type { CheckpointInfo, CheckpointRequest } from "../services/Computers.js"

interface Entry {
  readonly info: CheckpointInfo
  readonly session: string
  readonly stored: string
}

/** The actor's hook that runs a capture with its lifecycle held off (ComputerActor.whileRunning). */
interface Capturable {
  readonly id: string
  readonly whileRunning: <A, E>(f: (instance: Instance) => Effect.Effect<A, E>) => Effect.Effect<A, E | ComputerUnavailable>
}

export const make = (backend: Backend["Type"], maxPerSession: number, owner: Owner) =>
  Effect.gen(function*() {
    const entries = new Map<string, Entry>()
    /** Captures under way per session: they count against the quota before they finish. */
    const pending = new Map<string, number>()

    const provider = backend.capabilities.checkpoints ? backend.checkpoints : undefined
    const supported = provider === undefined
      ? Effect.fail(new Unsupported({ backend: backend.name, feature: "checkpoints and forks" }))
      : Effect.succeed(provider)

    const visible = (entry: Entry, session: string) => entry.session === session || entry.info.shared

    const owned = (session: string) => [...entries.values()].filter((entry) => entry.session === session).length

    const take = (session: string, computer: Capturable, request: CheckpointRequest) =>
      Effect.gen(function*() {
        const checkpoints = yield* supported
        const held = owned(session) + (pending.get(session) ?? 0)
        if (held >= maxPerSession) {
          return yield* new QuotaExceeded({
            message: maxPerSession === 0
              ? "checkpoints are off on this server (--max-checkpoints 0)"
              : `this session holds ${held} checkpoints, its limit (--max-checkpoints ${maxPerSession}); delete one first (computer_checkpoint with action=delete)`
          })
        }
        let id = `ckpt-${yield* generateComputerId}`
        while (entries.has(id)) id = `ckpt-${yield* generateComputerId}`
        pending.set(session, (pending.get(session) ?? 0) + 1)
        const captured = yield* computer.whileRunning((instance) => checkpoints.capture(instance, id, owner)).pipe(
          Effect.ensuring(Effect.sync(() => pending.set(session, (pending.get(session) ?? 1) - 1)))
        )
        const info: CheckpointInfo = {
          checkpoint_id: id,
          ...(request.name === undefined || request.name === "" ? {} : { name: request.name }),
          computer_id: computer.id,
          backend: backend.name,
          created_at: new Date(yield* Clock.currentTimeMillis).toISOString(),
          shared: request.shared ?? false,
          note: captured.note
        }
        entries.set(id, { info, session, stored: captured.stored })
        return info
      })

    /** The checkpoint `id` as this session may use it. */
    const lookup = (session: string, id: string) =>
      Effect.gen(function*() {
        const entry = entries.get(id)
        if (entry === undefined) return yield* new CheckpointNotFound({ id })
        if (!visible(entry, session)) {
          return yield* new AccessDenied({
            what: `checkpoint '${id}'`,
            why: "it belongs to another session; sessions can fork it only if it was made with shared=true"
          })
        }
        return entry
      })

    /** The stored copy a fork is made from. */
    const forFork = (session: string, id: string) =>
      Effect.zipRight(supported, Effect.map(lookup(session, id), (entry) => entry.stored))

    const list = (session: string) => Effect.sync(() => [...entries.values()].filter((entry) => visible(entry, session)).map((entry) => entry.info))

    const drop = (entry: Entry) =>
      Effect.suspend(() => {
        entries.delete(entry.info.checkpoint_id)
        return provider === undefined ? Effect.void : provider.remove(entry.stored)
      })

    const remove = (session: string, id: string) =>
      Effect.gen(function*() {
        const entry = yield* lookup(session, id)
        // A shared checkpoint is forked by others, deleted only by its own session.
        if (entry.session !== session) {
          return yield* new AccessDenied({ what: `checkpoint '${id}'`, why: "only the session that made it can delete it" })
        }
        yield* drop(entry)
      })

    const quietly = (entry: Entry) =>
      drop(entry).pipe(Effect.catchAll((error) => Effect.logWarning(`cannot remove checkpoint ${entry.info.checkpoint_id}: ${error.message}`)))

    /** A session ended: its checkpoints go. */
    const release = (session: string) =>
      Effect.forEach([...entries.values()].filter((entry) => entry.session === session), quietly, { discard: true })

    yield* Effect.addFinalizer(() => Effect.forEach([...entries.values()], quietly, { discard: true }))

    return { take, forFork, list, remove, release }
  })
