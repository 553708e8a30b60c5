/**
 * Images of the Docker backend: present locally, or pulled, with progress on the log and to the MCP
 * client whose call needed the image (when it asked for progress).
 */
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import * as Stream from "effect/Stream"
import type { ProviderError } from "../../../domain/Errors.js"
import { CurrentProgress } from "../../../services/Progress.js"
import { type Engine, engineMessage } from "./DockerEngine.js"

interface PullEvent {
  readonly status?: string
  readonly id?: string
  readonly progress?: string
  readonly error?: string
}

const parse = (line: string): ReadonlyArray<PullEvent> => {
  try {
    const event: unknown = JSON.parse(line)
    return typeof event === "object" && event !== null ? [event as PullEvent] : []
  } catch {
    return []
  }
}

/**
 * The events of a pull, one JSON object a line: the request is an engine call (bounded until the
 * engine answers), the progress that follows is not (a pull takes what it takes). Ending the Stream
 * early (interrupted, or failed at an error event) destroys the response.
 */
const pullEvents = (engine: Engine, image: string): Stream.Stream<PullEvent, string> =>
  Stream.unwrap(
    engine.call("pull the image", (signal) => engine.docker.pull(image, { abortSignal: signal })).pipe(
      Effect.mapError((error) => error.detail),
      Effect.map((response) =>
        Stream.fromAsyncIterable(response as AsyncIterable<Uint8Array>, engineMessage).pipe(
          Stream.decodeText(),
          Stream.splitLines,
          Stream.mapConcat(parse)
        )
      )
    )
  )

/**
 * Pulls an image; each progress event as one line, on the log and to the client that asked for
 * progress. A failure may come inside the stream of a successful response (Podman always reports it
 * so, Docker when the pull fails after it started): the first error event is the pull's failure.
 */
const pull = (engine: Engine, image: string, onProgress: ((line: string) => void) | undefined) =>
  Effect.gen(function*() {
    const reporter = yield* FiberRef.get(CurrentProgress)
    let events = 0
    yield* Stream.runForEach(pullEvents(engine, image), (event) => {
      if (event.error) return Effect.fail(event.error)
      const line = [event.id, event.status, event.progress].filter((part) => part).join(" ")
      if (line === "") return Effect.void
      onProgress?.(`${engine.name}: pulling ${image}: ${line}`)
      return reporter === undefined ? Effect.void : reporter({ progress: ++events, message: `pulling ${image}: ${line}` })
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
