/**
 * The computer image as the Docker backend's default (`--image kilntainers-computer:bookworm`): used
 * as the engine has it, or built from the recipe shipped with the package (`images/computer`) the
 * first time a computer needs it. The engine keeps what it built, so that happens once per engine;
 * an image already there is never rebuilt behind the user's back (another version's server may share
 * the engine): `kilntainers image build` brings it up to date.
 *
 * One build at a time, whoever asks: callers that arrive while it runs wait for it and hear its steps
 * as progress, and every second its latest step with the time so far (a step such as apt's install
 * runs for minutes, and clients reset their request timeout on progress). A call whose client hears
 * no progress waits at most its budget (CurrentCallBudget, --max-call-ms) and is told the build goes
 * on. With a scope (the backend's layer), the build runs in it, so a cancelled or answered tool call
 * does not throw away minutes of work; a failed build is forgotten, and the next computer tries again.
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as FiberRef from "effect/FiberRef"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import * as SubscriptionRef from "effect/SubscriptionRef"
import type { ProviderError } from "../../../domain/Errors.js"
import * as Progress from "../../../services/Progress.js"
import { type Engine } from "./DockerEngine.js"
import * as DockerImage from "./DockerImage.js"
import * as DockerImageBuild from "./DockerImageBuild.js"

export interface ComputerImageOptions {
  /** The image's name. */
  readonly tag: string
  /** The recipe's BASE: pulled when the engine lacks it (DockerImage.ensure). */
  readonly base: string
  /** The recipe's directory; undefined when the installation has none (then a missing image is an error). */
  readonly recipe: string | undefined
  /** The build's steps, one line at a time (the server's stderr). */
  readonly onProgress?: ((line: string) => void) | undefined
}

export interface ComputerImage {
  /** Succeeds once the engine has the image: at once when it had it, else after building it. */
  readonly ready: Effect.Effect<void, ProviderError>
}

/** A step of the build as Docker (`Step 3/7 : RUN …`) or Podman/buildah (`STEP 3/7: RUN …`) says it. */
const step = /^(?:Step|STEP) \d+\/\d+ ?:/

const seconds = (millis: number) => `${Math.round(millis / 1000)} s`

/** The computer image on an engine; `scope` keeps its build alive past the call that started it. */
export const make = (
  engine: Engine,
  options: ComputerImageOptions,
  scope?: Scope.Scope | undefined
): Effect.Effect<ComputerImage> =>
  Effect.gen(function*() {
    const present = yield* Ref.make(false)
    /** The build in flight, if any: callers meanwhile wait for the same one. */
    const building = yield* Ref.make<Option.Option<Deferred.Deferred<void, ProviderError>>>(Option.none())
    /** Its latest step, for the progress of every caller waiting. */
    const latest = yield* SubscriptionRef.make("")
    /** When the build in flight began (for "so far"). */
    const began = yield* Ref.make(0)
    const elapsed = Effect.zipWith(Clock.currentTimeMillis, Ref.get(began), (now, start) => seconds(now - start))

    const say = (line: string) => {
      options.onProgress?.(`${engine.name}: ${line}`)
      return SubscriptionRef.set(latest, line)
    }

    const inspect = engine.call("inspect the image", () => engine.docker.getImage(options.tag).inspect()).pipe(
      Effect.map(Option.some),
      Effect.catchIf((error) => error.reason === "NotFound", () => Effect.succeed(Option.none()))
    )

    const build = (recipe: string) =>
      Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        yield* Ref.set(began, started)
        yield* DockerImage.ensure(engine, options.base, options.onProgress)
        yield* say(`building ${options.tag}, the computer image (once; the engine keeps it) from ${recipe} on ${options.base}`)
        yield* Effect.logInfo(`${engine.name} backend: ${options.tag} is not on the engine: building it from ${recipe} (once)`)
        const built = yield* DockerImageBuild.build(engine, {
          recipe,
          tag: options.tag,
          base: options.base,
          onProgress: (line) => step.test(line) ? say(`building ${options.tag}: ${line}`) : Effect.logDebug(line)
        })
        const took = (yield* Clock.currentTimeMillis) - started
        yield* say(`built ${options.tag} in ${seconds(took)}`)
        yield* Effect.logInfo(`${engine.name} backend: built ${built.tag} (recipe ${built.recipe}) in ${seconds(took)}`)
      }).pipe(
        Effect.mapError((error) =>
          engine.fail(
            "build the computer image",
            error.reason,
            `${options.tag} is not on the ${engine.name} engine and building it failed: ${error.detail}. ` +
              `Build it with \`kilntainers image build\` (--base IMAGE for another Debian), or choose an image with --image`,
            error.cause
          )
        )
      )

    /** Present already, or built now: what one build does, start to end. */
    const obtain = Effect.gen(function*() {
      const image = yield* inspect
      if (Option.isSome(image)) {
        const label = image.value.Config?.Labels?.[DockerImageBuild.RECIPE_LABEL]
        const shipped = options.recipe === undefined ? undefined : DockerImageBuild.recipeHash(options.recipe)
        if (shipped !== undefined && label !== shipped) {
          yield* Effect.logInfo(
            `${engine.name} backend: ${options.tag} on the engine was built from ${label === undefined ? "another recipe" : `recipe ${label}`}, ` +
              `not this version's (${shipped}); it is used as it is — \`kilntainers image build\` rebuilds it`
          )
        }
        return
      }
      if (options.recipe === undefined) {
        return yield* engine.fail(
          "get the computer image",
          "NotFound",
          `${options.tag} is not on the ${engine.name} engine, and its recipe (images/computer) is not in this installation: ` +
            `choose an image with --image`
        )
      }
      yield* build(options.recipe)
    })

    /** What a caller out of budget is told: the build goes on, and to call again. */
    const stillBuilding = Effect.zipWith(elapsed, SubscriptionRef.get(latest), (took, line) => {
      const at = /(?:Step|STEP) \d+\/\d+/.exec(line)?.[0]
      return engine.fail(
        "create the computer",
        "Unavailable",
        `its image ${options.tag} is being built, the first time on this engine (once; the engine keeps it): ` +
          `${took} so far${at === undefined ? "" : `, at ${at}`}, and the build goes on. ` +
          "Call again in a minute or two (`kilntainers image build` builds it ahead of time)"
      )
    })

    /** Joins the build in flight, or starts it (in `scope` when given); a failure clears the way for the next try. */
    const join = Effect.gen(function*() {
      const mine = yield* Deferred.make<void, ProviderError>()
      const current = yield* Ref.modify(building, (inFlight) =>
        Option.isSome(inFlight) ? [inFlight.value, inFlight] as const : [mine, Option.some(mine)] as const)
      if (current === mine) {
        const run = obtain.pipe(
          Effect.onExit((exit) =>
            Effect.all([
              Exit.isSuccess(exit) ? Ref.set(present, true) : Effect.void,
              Ref.set(building, Option.none()),
              // Waiters get a failure they can report, never the builder's interruption.
              Deferred.done(
                mine,
                Exit.isInterrupted(exit) ? Exit.fail(engine.fail("build the computer image", "Failed", "the build was interrupted")) : exit
              )
            ], { discard: true })
          )
        )
        yield* scope === undefined ? Effect.fork(run) : Effect.forkIn(run, scope)
      }
      // The build's steps reach this caller's client while it waits (when it asked for progress),
      // and every second the latest one with the time so far.
      let sent = 0
      const tell = (line: string) => line === "" ? Effect.void : Progress.report(line, ++sent)
      const steps = latest.changes.pipe(Stream.runForEach(tell))
      const heartbeat = Effect.sleep("1 second").pipe(
        Effect.zipRight(Effect.zip(SubscriptionRef.get(latest), elapsed)),
        Effect.flatMap(([line, took]) => tell(line === "" ? "" : `${line} (${took} so far)`)),
        Effect.forever
      )
      const reports = Effect.zipRight(Effect.all([steps, heartbeat], { concurrency: 2, discard: true }), Effect.never)
      // A caller that hears no progress is answered within its budget; the build goes on without it.
      const budget = yield* FiberRef.get(Progress.CurrentCallBudget)
      const done = budget === undefined
        ? Deferred.await(current)
        : Effect.raceFirst(Deferred.await(current), Effect.zipRight(Effect.sleep(budget), Effect.flatMap(stillBuilding, Effect.fail)))
      return yield* Effect.raceFirst(done, reports)
    })

    const ready = Effect.flatMap(Ref.get(present), (yes) => yes ? Effect.void : join)
    return { ready }
  })
