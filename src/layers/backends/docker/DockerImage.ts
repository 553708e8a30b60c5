/**
 * Images of the Docker backend: present locally, or pulled, with progress on the log and to the MCP
 * client whose call needed the image (when it asked for progress).
 */
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as Runtime from "effect/Runtime"
import type { ProviderError } from "../../../domain/Errors.js"
import { CurrentProgress } from "../../../services/Progress.js"
import { type Engine, engineMessage } from "./DockerEngine.js"

interface PullEvent {
  readonly status?: string
  readonly id?: string
  readonly progress?: string
  readonly error?: string
}

/**
 * Pulls an image; each progress event as one line. Interruptible: the pull's stream is dropped. A
 * failure may come inside the stream of a successful response (Podman always reports it so, Docker
 * when the pull fails after it started): the first error event is the pull's failure.
 */
const pullWith = (engine: Engine, image: string, progress: (line: string) => void) =>
  Effect.async<void, string>((resume) => {
    let stream: NodeJS.ReadableStream | undefined
    let done = false
    let failed: string | undefined
    const finish = (error: string | undefined) => {
      if (done) return
      done = true
      resume(error === undefined ? Effect.void : Effect.fail(error))
    }
    engine.docker.pull(image, {}, (error: unknown, output: NodeJS.ReadableStream | undefined) => {
      if (error || output === undefined) return finish(engineMessage(error))
      stream = output
      engine.docker.modem.followProgress(
        output,
        (error: Error | null) => finish(error ? error.message : failed),
        (event: PullEvent) => {
          if (event.error) {
            failed ??= event.error
            return
          }
          const line = [event.id, event.status, event.progress].filter((part) => part).join(" ")
          if (line !== "") progress(line)
        }
      )
    })
    return Effect.sync(() => {
      done = true
      ;(stream as { destroy?: () => void } | undefined)?.destroy?.()
    })
  })

const pull = (engine: Engine, image: string, onProgress: ((line: string) => void) | undefined) =>
  Effect.gen(function*() {
    const reporter = yield* FiberRef.get(CurrentProgress)
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    let events = 0
    return yield* pullWith(engine, image, (line) => {
      onProgress?.(`${engine.name}: pulling ${image}: ${line}`)
      if (reporter) runFork(reporter({ progress: ++events, message: `pulling ${image}: ${line}` }))
    })
  })

/** Makes sure the image is present on the engine, pulling it when missing. */
export const ensure = (
  engine: Engine,
  image: string,
  onProgress?: ((line: string) => void) | undefined
): Effect.Effect<void, ProviderError> =>
  Effect.gen(function*() {
    const present = yield* engine.call("inspect the image", () => engine.docker.getImage(image).inspect()).pipe(
      Effect.as(true),
      Effect.catchIf((error) => error.reason === "NotFound", () => Effect.succeed(false))
    )
    if (present) return
    yield* Effect.logInfo(`${engine.name} backend: image ${image} is not present locally; pulling it`)
    yield* pull(engine, image, onProgress).pipe(
      Effect.mapError((said) =>
        engine.fail(
          "get the image",
          "Invalid",
          `the image '${image}' is not present on the ${engine.name} engine at ${engine.where} and pulling it failed: ${said}`
        )
      )
    )
  })
