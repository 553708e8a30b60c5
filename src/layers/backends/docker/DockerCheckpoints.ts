/**
 * Checkpoints on Docker and Podman: a computer's container committed to a local image
 * (`kilntainers-checkpoint:<id>`, labelled `kilntainers.checkpoint=<id>`), a fork created from that
 * image with the computer's usual settings, and the image removed with the checkpoint (untagged
 * while forks still use it; pruned at a later removal once none does).
 *
 * The engine pauses the container while it commits (`pause=true`), so the copy is consistent; what
 * is captured is the container's filesystem: not its running processes, and not the contents of
 * volumes or bind mounts (the user's --mount directories), which a fork mounts afresh.
 *
 * Each image also carries the server that took it (`kilntainers.checkpoint.owner-*`: host, pid,
 * process start), so that a later server removes the images of one that crashed (`sweep`): only
 * images with our label and a complete owner whose process is gone, at most MAX_SWEEP per pass.
 */
import * as Effect from "effect/Effect"
import type { ComputerMetadata, Owner } from "../../../domain/ComputerMetadata.js"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Checkpointing, Instance } from "../../../services/Backend.js"
import type { Engine } from "./DockerEngine.js"

/** The repository of checkpoint images (local only: never pushed). */
export const REPOSITORY = "kilntainers-checkpoint"
/** The label every checkpoint image carries, its value the checkpoint's id. */
export const LABEL = "kilntainers.checkpoint"
/** The owner's labels: the server process that took the checkpoint. */
export const OWNER_LABELS = { host: `${LABEL}.owner-host`, pid: `${LABEL}.owner-pid`, start: `${LABEL}.owner-start` } as const
/** Images one sweep removes at most (the rest wait for the next server's start). */
export const MAX_SWEEP = 100

/** The owner an image's labels name, when they name one completely. */
export const ownerOf = (labels: Readonly<Record<string, string>> | null | undefined): Owner | undefined => {
  const host = labels?.[OWNER_LABELS.host]
  const pid = Number(labels?.[OWNER_LABELS.pid])
  const start = labels?.[OWNER_LABELS.start]
  return host === undefined || start === undefined || !Number.isInteger(pid) || pid < 1 ? undefined : { host, pid, start }
}

export const make = (
  engine: Engine,
  create: (metadata: ComputerMetadata, image: string) => Effect.Effect<Instance, ProviderError>
): Checkpointing => {
  const { docker, call } = engine

  const capture = (instance: Instance, id: string, owner: Owner) =>
    call("commit the container", (signal) =>
      docker.getContainer(instance.providerId).commit({
        // dockerode would put every option in the query; the labels belong in the body.
        _query: { container: instance.providerId, repo: REPOSITORY, tag: id, pause: true, comment: `kilntainers checkpoint ${id}` },
        _body: { Labels: { [LABEL]: id, [OWNER_LABELS.host]: owner.host, [OWNER_LABELS.pid]: String(owner.pid), [OWNER_LABELS.start]: owner.start } },
        abortSignal: signal
      })).pipe(
        Effect.map(() => ({
          // The tag, not the image id: an image in use by a fork can be untagged, never deleted.
          stored: `${REPOSITORY}:${id}`,
          note: `the container's filesystem, paused while ${engine.name} committed it; running processes and mounted volumes are not captured`
        }))
      )

  const remove = (stored: string) =>
    // Forced: the tag goes now; while forks still run on the image it stays, untagged, until the
    // next removal's prune (a prune removes only images no container uses).
    call("remove the checkpoint image", (signal) => docker.getImage(stored).remove({ force: true, abortSignal: signal })).pipe(
      Effect.asVoid,
      Effect.catchIf((error) => error.reason === "NotFound", () => Effect.void),
      Effect.zipRight(
        call("prune untagged checkpoint images", (signal) =>
          docker.pruneImages({ filters: { dangling: ["true"], label: [LABEL] }, abortSignal: signal } as Parameters<typeof docker.pruneImages>[0])).pipe(
            Effect.catchAll((error) => Effect.logWarning(`${engine.name} backend: cannot prune checkpoint images: ${error.message}`))
          )
      ),
      Effect.asVoid
    )

  const sweep = (alive: (owner: Owner) => boolean) =>
    call("list checkpoint images", (signal) => docker.listImages({ filters: { label: [LABEL] }, abortSignal: signal } as Parameters<typeof docker.listImages>[0])).pipe(
      Effect.map((images) =>
        images.flatMap((image) => {
          const owner = ownerOf(image.Labels)
          const id = image.Labels?.[LABEL]
          // Without a complete owner (an older server's image) it is left: its server may still run.
          return owner === undefined || id === undefined || alive(owner) ? [] : [`${REPOSITORY}:${id}`]
        }).slice(0, MAX_SWEEP)
      ),
      Effect.flatMap((leftovers) =>
        Effect.forEach(leftovers, (stored) =>
          remove(stored).pipe(
            Effect.as(1),
            Effect.catchAll((error) => Effect.as(Effect.logWarning(`${engine.name} backend: cannot remove leftover checkpoint ${stored}: ${error.message}`), 0))
          ))
      ),
      Effect.map((removed) => removed.reduce((a, b) => a + b, 0))
    )

  return { capture, restore: (stored, metadata) => create(metadata, stored), remove, sweep }
}
