/**
 * The `kilntainers` command line on @effect/cli: `kilntainers` serves (ServeCommand.ts),
 * `kilntainers image build` builds the computer image (ImageCommand.ts). argv goes through the
 * pre-pass (ArgvPrePass.ts), then @effect/cli parses it against the commands and runs the chosen
 * one. Errors are one line on stderr in Kilntainers' shape (`kilntainers: error: … (see
 * 'kilntainers --help')`), exit code 2 for a command line that cannot be read and 1 for a
 * configuration that is refused or a server that cannot start.
 *
 * This runs the commands itself rather than through `Command.run` (CliApp), which prints its
 * errors as multi-line documents, its own help page, and takes a `--log-level` that comes first
 * on the line as its built-in (ours is an option of the server).
 */
import * as CliConfig from "@effect/cli/CliConfig"
import * as Command from "@effect/cli/Command"
import type * as CommandDirective from "@effect/cli/CommandDirective"
import * as Descriptor from "@effect/cli/CommandDescriptor"
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import * as FileSystem from "@effect/platform/FileSystem"
import * as Path from "@effect/platform/Path"
import * as Terminal from "@effect/platform/Terminal"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as NodePath from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { prepare } from "./ArgvPrePass.js"
import { type ConfigRefused, UsageError } from "./CliError.js"
import { flagTable } from "./FlagTable.js"
import * as FlagOptions from "./FlagOptions.js"
import * as Help from "./Help.js"
import * as ImageCommand from "./ImageCommand.js"
import { resolveFlags, type ResolvedFlags } from "./ResolvedFlags.js"
import * as ServeCommand from "./ServeCommand.js"

const config = CliConfig.make({ isCaseSensitive: true, showBuiltIns: false })

const neverPrompts = Effect.dieMessage("kilntainers never prompts")

/**
 * What @effect/cli's parser asks for, as plain services (building a Layer costs a start some 30 ms
 * of CPU). It never touches files or a terminal here (no file options, no prompts), and NodeContext's
 * Terminal would open a readline on stdin, which is the MCP channel.
 */
const parserContext = Context.make(FileSystem.FileSystem, FileSystem.makeNoop({})).pipe(
  Context.add(
    Path.Path,
    Path.Path.of({
      [Path.TypeId]: Path.TypeId,
      ...NodePath,
      fromFileUrl: (url) => Effect.sync(() => fileURLToPath(url)),
      toFileUrl: (path) => Effect.sync(() => pathToFileURL(path))
    })
  ),
  Context.add(
    Terminal.Terminal,
    Terminal.Terminal.of({
      columns: Effect.succeed(100),
      rows: Effect.succeed(30),
      isTTY: Effect.succeed(false),
      readInput: neverPrompts,
      readLine: neverPrompts,
      display: () => neverPrompts
    })
  )
)

const root = (width: number) => ServeCommand.make(width).pipe(Command.withSubcommands([ImageCommand.image]))

/** The command that `argv` names: its words before the options, its spellings and its help. */
const addressed = (argv: ReadonlyArray<string>) =>
  argv[0] === "image"
    ? { path: argv[1] === "build" ? ["image", "build"] : ["image"], spellings: ImageCommand.spellings, page: ImageCommand.page }
    : { path: [], spellings: ServeCommand.spellings, page: ServeCommand.page }

/** A ValidationError's document as one line. */
const oneLine = (doc: HelpDoc.HelpDoc) =>
  HelpDoc.toAnsiText(doc).replace(/\u001b\[[0-9;]*m/g, "").split("\n").map((line) => line.trim()).filter((line) => line !== "").join(" ")

/** The words for @effect/cli: the command's, then its options through the pre-pass. */
const wordsOf = (argv: ReadonlyArray<string>): Either.Either<ReadonlyArray<string>, UsageError> => {
  const { path, spellings } = addressed(argv)
  if (path.length === 1) {
    // `kilntainers image [--help]` answers with its help; @effect/cli would name the wrong command's verbs.
    const verb = argv[1]
    return verb === undefined || verb === "-h" || verb === "--help"
      ? Either.right(argv)
      : Either.left(new UsageError({ message: `unknown command: kilntainers image ${verb} (the one there is: kilntainers image build)` }))
  }
  return Either.map(prepare(argv.slice(path.length), spellings), (words) => [...path, ...words])
}

/** Parses the words against the commands. @effect/cli's own errors are usage errors. */
const parse = <A>(descriptor: Descriptor.Command<A>, words: ReadonlyArray<string>) =>
  Descriptor.parse(descriptor, ["kilntainers", ...words], config).pipe(
    Effect.mapError((error) =>
      ValidationError.isHelpRequested(error) ? error : new UsageError({ message: oneLine(error.error) })
    ),
    Effect.provide(parserContext)
  )

/**
 * The words parsed into what to run. @effect/cli reads a `--log-level` that comes first on the
 * line as its built-in: then the line is read again without it, and the pair by our own option.
 */
const directiveOf = <A extends { readonly flags: object }>(descriptor: Descriptor.Command<A>, words: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const first = yield* parse(descriptor, words)
    if (first._tag !== "BuiltIn" || first.option._tag !== "SetLogLevel") return first
    const directive = yield* parse(descriptor, words.slice(2))
    if (directive._tag !== "UserDefined") return directive
    const [, , logLevel] = yield* Options.processCommandLine(FlagOptions.options(flagTable.logLevel), words.slice(0, 2), config).pipe(
      Effect.mapError((error) => new UsageError({ message: oneLine(error.error) })),
      Effect.provide(parserContext)
    )
    return { ...directive, value: { ...directive.value, flags: { ...directive.value.flags, logLevel } } }
  })

const builtIn = (directive: CommandDirective.BuiltIn, page: Help.Page, width: number, command: ReturnType<typeof root>) => {
  switch (directive.option._tag) {
    case "ShowHelp":
      return Console.log(Help.render(page, { all: false, width }).trimEnd())
    case "ShowVersion":
      return Effect.promise(() => import("../layers/mcp/McpServer.js")).pipe(
        Effect.flatMap(({ serverInfo }) => Console.log(`kilntainers ${serverInfo.version}`))
      )
    case "ShowCompletions": {
      const shell = directive.option.shellType
      const script = shell === "bash"
        ? Command.getBashCompletions(command, "kilntainers")
        : shell === "zsh"
        ? Command.getZshCompletions(command, "kilntainers")
        : Command.getFishCompletions(command, "kilntainers")
      return script.pipe(Effect.flatMap((lines) => Console.log(lines.join("\n"))))
    }
    case "SetLogLevel":
    case "ShowWizard":
      return Effect.die(`unexpected built-in ${directive.option._tag}`)
  }
}

const run = (argv: ReadonlyArray<string>, width: number) =>
  Effect.gen(function*() {
    const { page } = addressed(argv)
    const words = yield* wordsOf(argv)
    const command = root(width)
    const directive = yield* directiveOf(command.descriptor, words)
    if (directive._tag === "BuiltIn") return yield* builtIn(directive, page, width, command)
    if (directive.leftover.length > 0) return yield* new UsageError({ message: `unrecognized arguments: ${directive.leftover.join(" ")}` })
    return yield* command.transform(command.handler(directive.value), directive.value)
  }).pipe(
    // A command without a handler of its own (`kilntainers image`) answers with its help.
    Effect.catchIf(
      (error): error is ValidationError.HelpRequested => ValidationError.isValidationError(error) && ValidationError.isHelpRequested(error),
      () => Console.log(Help.render(addressed(argv).page, { all: false, width }).trimEnd())
    )
  )

const describe = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error && typeof error.message === "string" && error.message !== ""
    ? error.message
    : typeof error === "object" && error !== null && "_tag" in error
    ? String(error._tag)
    : String(error)

const errorLine = (message: string) => Console.error(`kilntainers: error: ${message}`)

/**
 * Runs the command with `argv` (without node and the script); `width` is the help's line length.
 * Never fails: every failure is reported on stderr and becomes the exit code.
 */
export const main = (argv: ReadonlyArray<string>, width = 100): Effect.Effect<number> => {
  const pointer = argv[0] === "image" ? "see 'kilntainers image --help'" : "see 'kilntainers --help'"
  return run(argv, width).pipe(
    Effect.as(0),
    Effect.catchTags({
      UsageError: (error: UsageError) => errorLine(`${error.message} (${pointer})`).pipe(Effect.as(2)),
      ConfigRefused: (error) => errorLine(`${error.message} (${pointer})`).pipe(Effect.as(1))
    }),
    Effect.catchAllCause((cause) => {
      if (Cause.isInterruptedOnly(cause)) return Effect.succeed(130)
      const failure = Cause.failureOption(cause)
      const message = Option.isSome(failure)
        ? describe(failure.value)
        : `internal error: ${describe(Cause.squash(cause))} (--log-level debug shows the details)`
      return errorLine(message).pipe(Effect.as(1))
    })
  )
}

/** The server's flags as `kilntainers ARGV` reads them (for tests and tools that configure in process). */
export const readFlags = (argv: ReadonlyArray<string>): Effect.Effect<ResolvedFlags, UsageError | ConfigRefused> =>
  Effect.gen(function*() {
    const words = yield* prepare(argv, ServeCommand.spellings)
    const directive = yield* directiveOf(ServeCommand.make(100).descriptor, words).pipe(
      Effect.catchTag("HelpRequested", () => new UsageError({ message: "no command was named" }))
    )
    if (directive._tag !== "UserDefined") return yield* new UsageError({ message: `'${argv.join(" ")}' asks for an action, not a configuration` })
    return yield* resolveFlags(directive.value.flags)
  })
