/**
 * Builds an image from a recipe directory (a Dockerfile and what it copies) on the engine, through
 * the Engine API's build endpoint — the same call on Docker and on Podman's Docker-compatible socket.
 * The recipe is sent as a tar context; the engine's build output comes back line by line for the
 * caller to show; the image is labelled with a hash of the recipe, so anyone can tell which recipe an
 * image was built from. Interrupting the build drops the request, and the engine cancels the build.
 *
 * The base image (the recipe's `ARG BASE`) must already be on the engine: it is checked first, so a
 * missing base is a clear message instead of a failed pull from a registry the engine cannot reach.
 */
import { NodeStream } from "@effect/platform-node"
import { Effect, Option, Stream } from "effect"
import { createHash } from "node:crypto"
import { readdirSync, readFileSync } from "node:fs"
import { join, relative } from "node:path"
import type { Readable } from "node:stream"
import type { ProviderError } from "../../../domain/Errors.js"
import { type Engine, engineMessage } from "./DockerEngine.js"

export interface BuildRequest {
  /** The recipe: a directory with a Dockerfile. */
  readonly recipe: string
  /** The image's name, such as `kilntainers-computer:bookworm`. */
  readonly tag: string
  /** The recipe's `BASE` build argument: an image already on the engine. */
  readonly base: string
  /** Each line of the engine's build output. */
  readonly onProgress: (line: string) => Effect.Effect<void>
}

export interface Built {
  readonly tag: string
  /** The image's id on the engine. */
  readonly id: string
  /** The hash of the recipe it was built from (its `kilntainers-image.recipe` label). */
  readonly recipe: string
}

/** The label that records the recipe's hash. */
export const RECIPE_LABEL = "kilntainers-image.recipe"

/** Every file of the recipe, relative to it, in a stable order. */
const recipeFiles = (dir: string): Array<string> => {
  const files: Array<string> = []
  const walk = (at: string) => {
    for (const entry of readdirSync(at, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = join(at, entry.name)
      if (entry.isDirectory()) walk(path)
      else if (entry.isFile()) files.push(relative(dir, path))
    }
  }
  walk(dir)
  return files
}

/** A short hash of the recipe's files (names and contents): the same recipe, the same hash. */
export const recipeHash = (dir: string, files: ReadonlyArray<string> = recipeFiles(dir)): string => {
  const hash = createHash("sha256")
  for (const file of files) hash.update(file).update("\0").update(readFileSync(join(dir, file))).update("\0")
  return hash.digest("hex").slice(0, 16)
}

/** One JSON message of the build stream. */
interface BuildMessage {
  readonly stream?: string
  readonly status?: string
  readonly error?: string
  readonly errorDetail?: { readonly message?: string }
}

const parse = (line: string): Option.Option<BuildMessage> => {
  if (line.trim() === "") return Option.none()
  try {
    const value: unknown = JSON.parse(line)
    return typeof value === "object" && value !== null ? Option.some(value as BuildMessage) : Option.none()
  } catch {
    // Not JSON: an engine that streams plain text.
    return Option.some({ stream: line })
  }
}

/** Fails with the base's absence said plainly, and how to get it. */
const requireBase = (engine: Engine, base: string) =>
  engine.call("inspect the base image", () => engine.docker.getImage(base).inspect()).pipe(
    Effect.asVoid,
    Effect.catchIf(
      (error) => error.reason === "NotFound",
      () =>
        Effect.fail(engine.fail(
          "build the image",
          "NotFound",
          `its base image '${base}' is not on the ${engine.name} engine at ${engine.where}. ` +
            `Where a registry is reachable: \`${engine.name} pull ${base}\`. Without one, make a Debian locally ` +
            `with scripts/docker-test-image.sh${engine.name === "podman" ? " --engine podman" : ""} from a clone of ` +
            `kilntainers (debootstrap from Debian's mirror) and pass --base kilntainers-test:bookworm`
        ))
    )
  )

/** Builds the recipe into `tag` on the engine; the build's output goes to `onProgress`. */
export const build = (engine: Engine, request: BuildRequest): Effect.Effect<Built, ProviderError> =>
  Effect.gen(function*() {
    const files = yield* Effect.try({
      try: () => recipeFiles(request.recipe),
      catch: (error) => engine.fail("read the recipe", "Invalid", `${request.recipe}: ${engineMessage(error)}`, error)
    })
    if (!files.includes("Dockerfile")) {
      return yield* engine.fail("read the recipe", "Invalid", `${request.recipe} has no Dockerfile`)
    }
    const recipe = recipeHash(request.recipe, files)
    yield* requireBase(engine, request.base)

    // The engine's `stream` pieces are not lines: a line may come in parts, or many in one piece.
    let pending = ""
    const show = (text: string) => {
      const lines = (pending + text).split(/\r?\n/)
      pending = lines.pop() ?? ""
      return Effect.forEach(lines.filter((line) => line.trim() !== ""), request.onProgress, { discard: true })
    }
    const output = Stream.unwrapScoped(
      Effect.tryPromise({
        try: (signal) =>
          engine.docker.buildImage({ context: request.recipe, src: files }, {
            t: request.tag,
            buildargs: { BASE: request.base },
            labels: { [RECIPE_LABEL]: recipe, "kilntainers-image.base": request.base },
            rm: true,
            forcerm: true,
            abortSignal: signal
          }) as Promise<Readable>,
        catch: (error) => engine.fail("build the image", "Failed", engineMessage(error), error)
      }).pipe(
        Effect.map((readable) =>
          NodeStream.fromReadable(() => readable, (cause) => engine.fail("build the image", "Unavailable", String(cause), cause))
        )
      )
    )
    yield* output.pipe(
      Stream.decodeText(),
      Stream.splitLines,
      Stream.filterMap(parse),
      Stream.runForEach((message) => {
        if (message.error !== undefined || message.errorDetail?.message !== undefined) {
          return Effect.fail(engine.fail("build the image", "Failed", (message.errorDetail?.message ?? message.error ?? "").trim()))
        }
        if (message.stream !== undefined) return show(message.stream)
        if (message.status !== undefined) return show(`${message.status}\n`)
        return Effect.void
      })
    )
    if (pending.trim() !== "") yield* request.onProgress(pending)
    // The stream says how the build went on Docker and on Podman alike only through its end: the
    // image under its tag, with this recipe's label, is the proof.
    const image = yield* engine.call("inspect the built image", () => engine.docker.getImage(request.tag).inspect())
    if (image.Config?.Labels?.[RECIPE_LABEL] !== recipe) {
      return yield* engine.fail("build the image", "Failed", `the engine's ${request.tag} is not the image just built (its recipe label differs)`)
    }
    return { tag: request.tag, id: image.Id, recipe }
  })
