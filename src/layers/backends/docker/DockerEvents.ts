/**
 * A container that goes away other than through the kernel: removed or stopped from outside
 * (`docker rm -f`, `docker stop`, the engine restarted, an OOM kill of PID 1). One connection follows
 * the engine's event stream for its container (`die`/`destroy`), read with back-pressure through
 * NodeStream, and checks each event against the container's state before it calls the computer
 * lost: an event only says that something happened, the state says what is true now.
 */
import { NodeStream } from "@effect/platform-node"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Stream from "effect/Stream"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Containers } from "./DockerContainers.js"
import type { Engine } from "./DockerEngine.js"

/** The engine reports `die` before `destroy`: a moment later the state tells a removal from a stop. */
const SETTLE = Duration.millis(200)
/** Before following the events again when their stream ended (engine restarted, connection dropped). */
const RESUBSCRIBE = Duration.seconds(1)

interface EngineEvent {
  readonly Action?: string
  readonly status?: string
  readonly time?: number
}

const parse = (line: string): Option.Option<EngineEvent> => {
  if (line.trim() === "") return Option.none()
  try {
    return Option.some(JSON.parse(line) as EngineEvent)
  } catch {
    return Option.none()
  }
}

/**
 * Why the container is no longer usable, or none while it runs. `name` is how messages call it.
 * A failed inspect (the engine does not answer) says nothing: the computer is not called lost for it.
 */
export const diagnose = (containers: Containers, providerId: string, name: string): Effect.Effect<Option.Option<string>> =>
  containers.inspectState(providerId).pipe(
    Effect.map(Option.match({
      onNone: () => Option.some(`its container ${name} was removed outside kilntainers`),
      onSome: (state) =>
        state.removing
          ? Option.some(`its container ${name} was removed outside kilntainers`)
          : state.running
          ? Option.none()
          : Option.some(`its container ${name} was stopped outside kilntainers (exit code ${state.exitCode})`)
    })),
    Effect.orElseSucceed(() => Option.none())
  )

/**
 * The actions that may mean the container ended: Docker's `die` and `destroy`; Podman reports `die`
 * and `remove`. They are picked out here rather than by the engine's `event` filter, which Podman
 * matches against its own names (`died`), so that Docker's names select nothing there.
 */
const ENDINGS = new Set(["die", "destroy", "remove"])

/** The container's die/destroy events since `since` (epoch seconds; earlier ones are replayed). */
const events = (engine: Engine, providerId: string, since: number): Stream.Stream<EngineEvent, ProviderError> =>
  Stream.unwrapScoped(
    engine.call("follow the engine's events", (signal) =>
      engine.docker.getEvents({
        since,
        filters: { type: ["container"], container: [providerId] },
        abortSignal: signal
      })).pipe(
        Effect.map((readable) =>
          NodeStream.fromReadable(() => readable, (cause) => engine.fail("follow the engine's events", "Unavailable", String(cause), cause))
        )
      )
  ).pipe(
    Stream.decodeText(),
    Stream.splitLines,
    Stream.filterMap(parse),
    Stream.filter((event) => ENDINGS.has(event.Action ?? event.status ?? ""))
  )

/**
 * Completes with a sentence when the container was removed or stopped from outside since `from`
 * (epoch millis; earlier events are replayed). Runs until then (interrupt it to stop watching); a
 * dropped event stream is followed again, replaying from the last event seen, and the state is
 * checked in between so nothing is missed.
 */
export const watch = (
  engine: Engine,
  containers: Containers,
  providerId: string,
  name: string,
  from: number
): Effect.Effect<string> =>
  Effect.gen(function*() {
    let since = Math.floor(from / 1000)
    for (;;) {
      const found = yield* events(engine, providerId, since).pipe(
        Stream.tap((event) => Effect.sync(() => {
          if (typeof event.time === "number") since = Math.max(since, event.time)
        })),
        Stream.mapEffect(() => Effect.zipRight(Effect.sleep(SETTLE), diagnose(containers, providerId, name))),
        Stream.filterMap((reason) => reason),
        Stream.runHead,
        Effect.orElseSucceed(() => Option.none<string>())
      )
      if (Option.isSome(found)) return found.value
      const now = yield* diagnose(containers, providerId, name)
      if (Option.isSome(now)) return now.value
      yield* Effect.sleep(RESUBSCRIBE)
    }
  })
