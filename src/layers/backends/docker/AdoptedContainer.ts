/**
 * `--docker-container NAME` (process-mcp's DOCKER_CONTAINER with DOCKER_USE_EXISTING=true): an
 * existing container that kilntainers did not create, adopted as a permanent computer. It wraps the
 * Docker backend: the container is found (by its name as a computer id, `metadata.external`) beside
 * our own, its processes run through the agent copied in as for ours (or Engine exec where the agent
 * cannot run), and the working directory is the container's own (its WorkingDir, else /). It is
 * never stopped, restarted, reset or removed: the provider calls refuse, and the kernel refuses
 * those steps before touching its processes (actors/ExternalComputer.ts). Shutdown leaves it running
 * (process-mcp removed it). A stopped adopted container is started when it is used.
 */
import * as Effect from "effect/Effect"
import { computerIdPattern } from "../../../domain/ComputerIds.js"
import { fromLabels } from "../../../domain/ComputerMetadata.js"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Backend, Instance, Query } from "../../../services/Backend.js"
import type { Engine } from "./DockerEngine.js"

/** The computer id of an adopted container: its name as a slug (`my_box` → `my-box`). */
export const computerIdOf = (name: string): string => {
  const slug = name.replace(/^\//, "").toLowerCase().replace(/[^a-z0-9-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 63).replace(/-+$/, "")
  return computerIdPattern.test(slug) ? slug : "adopted"
}

/** The Docker backend with the container `name` adopted; fails when there is no such container, or it is one of ours. */
export const wrap = (inner: Backend["Type"], engine: Engine, name: string): Effect.Effect<Backend["Type"], ProviderError> =>
  Effect.gen(function*() {
    const { docker, call, fail } = engine
    const id = computerIdOf(name)
    const inspect = call(`inspect the container ${name}`, (signal) => docker.getContainer(name).inspect({ abortSignal: signal }))
    const first = yield* inspect.pipe(
      Effect.catchIf((error) => error.reason === "NotFound", () =>
        Effect.fail(fail("adopt the container", "NotFound", `there is no container named ${name} (--docker-container / DOCKER_CONTAINER); create and start it first`)))
    )
    if (fromLabels("dotted", first.Config.Labels)._tag === "Some") {
      return yield* fail("adopt the container", "Invalid", `${name} is a kilntainers computer already; use it by its computer_id instead of --docker-container`)
    }
    const providerId = first.Id
    const home = first.Config.WorkingDir === "" ? "/" : first.Config.WorkingDir
    yield* Effect.logInfo(`${engine.name} backend: adopted the container ${name} (${providerId.slice(0, 12)}) as the permanent computer '${id}'`)

    const instance = Effect.map(
      call(`inspect the container ${name}`, (signal) => docker.getContainer(providerId).inspect({ abortSignal: signal })),
      (info): Instance => ({
        providerId,
        metadata: { id, temporary: false, image: info.Config.Image, created: info.Created, instance: "", external: true },
        state: info.State.Running ? "running" : info.State.Paused ? "paused" : "stopped"
      })
    ).pipe(Effect.catchIf((error) => error.reason === "NotFound", () => Effect.succeed(undefined)))

    const isAdopted = (target: Instance) => target.metadata.external === true && target.providerId === providerId
    const refuse = (what: string) =>
      Effect.fail(fail(
        `${what} computer '${id}'`,
        "Invalid",
        `it is the existing container ${name}, adopted with --docker-container: kilntainers never stops, restarts or removes it`
      ))

    const find = (query: Query) =>
      Effect.gen(function*() {
        const ours = (yield* inner.find(query)).filter((found) => found.metadata.id !== id)
        if ((query.id !== undefined && query.id !== id) || query.temporary === true) return ours
        const adopted = yield* instance
        return adopted === undefined ? ours : [...ours, adopted]
      })

    return {
      ...inner,
      find,
      create: (metadata) =>
        metadata.id === id
          ? Effect.fail(fail("create the container", "Conflict", `'${id}' is the adopted container ${name}`))
          : inner.create(metadata),
      connect: (target) =>
        isAdopted(target) ? Effect.map(inner.connect(target), (connection) => ({ ...connection, home })) : inner.connect(target),
      restart: (target) => (isAdopted(target) ? refuse("restart") : inner.restart(target)),
      remove: (target) => (isAdopted(target) ? refuse("remove") : inner.remove(target))
    } satisfies Backend["Type"]
  })
