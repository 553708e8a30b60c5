/**
 * `kilntainers image build`: builds the computer image (the recipe in `images/computer/`, shipped
 * with the package) on the user's engine — Docker or Podman, found with the same `--engine` and
 * `--docker-host` (and their `KILNTAINERS_*` variables) as the server's docker backend. The engine's
 * build output goes to stderr; the image's tag is the one line on stdout, for scripts
 * (`--image "$(kilntainers image build)"`).
 */
import * as Command from "@effect/cli/Command"
import { Console, Effect, Either } from "effect"
import { COMPUTER_IMAGE, DEFAULT_BASE, recipeDirectory } from "../layers/backends/docker/ComputerRecipe.js"
import { type Spelling, spellingOf } from "./ArgvPrePass.js"
import { ConfigRefused } from "./CliError.js"
import * as Flag from "./Flag.js"
import { dockerFlags } from "./flags/ContainerFlags.js"
import type * as Help from "./Help.js"
import { resolve, tableOptions } from "./ResolvedFlags.js"

export { COMPUTER_IMAGE, DEFAULT_BASE, recipeDirectory }

const group = "image build options" as const

/** Only the command line gives these (no variables: a build is asked for, not configured). */
const commandLineOnly = <A>(flag: Flag.Flag<A>): Flag.Flag<A> => ({ ...flag, variables: [] })

export const imageFlags = {
  engine: { ...dockerFlags.engine, group, backends: undefined, help: "Container engine to build on (also KILNTAINERS_ENGINE)" },
  dockerHost: {
    ...dockerFlags.dockerHost,
    group,
    backends: undefined,
    help: "Engine address, unix://, tcp:// or ssh:// (also KILNTAINERS_DOCKER_HOST)"
  },
  tag: commandLineOnly(Flag.text("tag", { group, metavar: "TAG", default: COMPUTER_IMAGE, help: "Name of the image built" })),
  base: commandLineOnly(Flag.text("base", {
    group,
    metavar: "IMAGE",
    default: DEFAULT_BASE,
    help: "Debian image to build on; it must be on the engine already"
  }))
}

const help: Help.Action & Spelling = {
  invocation: "-h, --help",
  help: "Show this help and exit",
  name: "help",
  takesValue: false,
  repeatable: false,
  negatable: false
}

/** How `kilntainers image build`'s words are written, for the pre-pass. */
export const spellings: ReadonlyArray<Spelling> = [help, ...Object.values(imageFlags).map(spellingOf)]

export const page: Help.Page = {
  usage: ["usage: kilntainers image build [-h] [--engine ENGINE] [--docker-host URL] [--tag TAG] [--base IMAGE]"],
  description: "Builds the computer image on the engine: Debian with git, curl, python3 and pip, node and npm, " +
    "build-essential, vim, less, procps, jq, unzip, and a non-root user agent (uid 1000, home /home/agent). " +
    `The docker backend's default --image, ${COMPUTER_IMAGE}, is built so on first use when the engine lacks it; ` +
    "this rebuilds it, or builds it under another --tag for --image TAG.",
  actions: [help],
  flags: Object.values(imageFlags),
  footer: "The engine's build output goes to stderr; the image's name is printed on stdout once it is built. " +
    "The build downloads Debian packages: the engine needs to reach Debian's mirror. Without a registry, " +
    "scripts/docker-test-image.sh in a clone makes a Debian base locally: --base kilntainers-test:bookworm."
}

/** `kilntainers image build`. */
export const build = Command.make("build", { flags: tableOptions(imageFlags) }, (input) =>
  Effect.gen(function*() {
    const { values } = yield* resolve(imageFlags, input.flags)
    const recipe = recipeDirectory()
    if (recipe === undefined) {
      return yield* new ConfigRefused({ message: "the computer image's recipe (images/computer/Dockerfile) is not in this installation" })
    }
    const [DockerEngine, DockerImageBuild] = yield* Effect.promise(() =>
      Promise.all([import("../layers/backends/docker/DockerEngine.js"), import("../layers/backends/docker/DockerImageBuild.js")])
    )
    const address = { engine: values.engine, dockerHost: values.dockerHost }
    const connection = DockerEngine.connectionOptions(address)
    if (Either.isLeft(connection)) return yield* new ConfigRefused({ message: `--docker-host: ${connection.left}` })
    const engine = yield* DockerEngine.make(address)
    yield* DockerEngine.reachable(engine)
    yield* Console.error(`kilntainers: building ${values.tag} on the ${engine.name} engine at ${engine.where} from ${recipe}, on ${values.base}`)
    const built = yield* DockerImageBuild.build(engine, {
      recipe,
      tag: values.tag,
      base: values.base,
      onProgress: (line) => Console.error(line)
    })
    yield* Console.error(`kilntainers: built ${built.tag} (${built.id.replace(/^sha256:/, "").slice(0, 12)}, recipe ${built.recipe})`)
    yield* Console.log(built.tag)
  }))

/** `kilntainers image`: its one verb, `build`. */
export const image = Command.make("image").pipe(Command.withSubcommands([build]))
