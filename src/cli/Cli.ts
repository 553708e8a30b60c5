/**
 * `kilntainers`: reads the command line and the `KILNTAINERS_*` variables, checks them, and serves
 * MCP over stdio or HTTP (`kilntainers image build` builds the computer image instead: ImageCommand.ts). Errors are one line on stderr in Kilntainers' shape (`kilntainers: error:
 * …`), exit code 2 for a command line that cannot be read and 1 for a configuration that is refused
 * or a server that cannot start. The server's modules are loaded only once the flags are good, so
 * `--help` and mistakes answer at once.
 */
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { randomUUID } from "node:crypto"
import { parseArgv } from "./ArgvParser.js"
import { type BackendChoice, chooseBackend } from "./BackendChoice.js"
import type { ConfigRefused, UsageError } from "./CliError.js"
import { allFlags, type FlagValues } from "./FlagTable.js"
import * as Help from "./Help.js"
import { printConfig } from "./PrintConfig.js"
import { resolveFlags } from "./ResolvedFlags.js"
import { startupChecks } from "./StartupChecks.js"
import { httpOptions, toSettings } from "./ToSettings.js"
import type { SettingsShape } from "../services/Settings.js"

/** How the command ended: its exit code, and what it prints on stdout (help, version, configuration). */
export interface Outcome {
  readonly exitCode: number
  readonly stdout?: string
}

const levels = {
  debug: LogLevel.Debug,
  info: LogLevel.Info,
  warning: LogLevel.Warning,
  error: LogLevel.Error,
  none: LogLevel.None
} as const

const HELP_POINTER = "see 'kilntainers --help'"
const errorLine = (message: string) => Console.error(`kilntainers: error: ${message}`)

const describe = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error && typeof error.message === "string" && error.message !== ""
    ? error.message
    : typeof error === "object" && error !== null && "_tag" in error
    ? String(error._tag)
    : String(error)

const serve = (settings: SettingsShape, values: FlagValues, choice: BackendChoice) =>
  Effect.gen(function*() {
    const [Main, McpServer] = yield* Effect.promise(() =>
      Promise.all([import("../layers/Main.js"), import("../layers/mcp/McpServer.js")])
    )
    if (choice.reason !== undefined) yield* Effect.logInfo(`backend: ${choice.backend} (${choice.reason})`)
    if (settings.unsafeNoSandbox && settings.backend === "host") {
      yield* Effect.logWarning("--unsafe-no-sandbox: processes run on this host WITHOUT isolation and can read and change your files")
    }
    const instanceId = randomUUID()
    yield* Effect.logInfo(
      `kilntainers ${McpServer.serverInfo.version}: backend ${settings.backend}, transport ${settings.transport}, ` +
        `state ${settings.stateDir}, instance ${instanceId}`
    )
    if (settings.transport === "http") {
      const HttpServer = yield* Effect.promise(() => import("../layers/mcp/HttpServer.js"))
      yield* HttpServer.serveHttpForever(yield* httpOptions(values)).pipe(Effect.provide(Main.layer(settings, instanceId)))
    } else {
      // The backend starts in the background (tools/list never waits for it); traces wrap it all.
      yield* McpServer.serveStdio(settings, Main.runtimeLayer(settings, instanceId)).pipe(
        Effect.provide(Main.tracingLayer(settings, instanceId))
      )
    }
  })

const run = (argv: ReadonlyArray<string>, width: number) =>
  Effect.gen(function*() {
    // `kilntainers image build …`: a command of its own, with its own flags.
    if (argv[0] === "image") {
      const ImageCommand = yield* Effect.promise(() => import("./ImageCommand.js"))
      return yield* ImageCommand.run(argv.slice(1), width)
    }
    const flags = allFlags.map(([, flag]) => flag)
    const parsed = yield* parseArgv(argv, flags)
    if (parsed.action === "help" || parsed.action === "help-all") {
      return { exitCode: 0, stdout: Help.render(flags, { all: parsed.action === "help-all", width }) }
    }
    if (parsed.action === "version") {
      const { serverInfo } = yield* Effect.promise(() => import("../layers/mcp/McpServer.js"))
      return { exitCode: 0, stdout: `kilntainers ${serverInfo.version}\n` }
    }
    const resolved = yield* resolveFlags(parsed)
    const values = resolved.values
    const choice = yield* chooseBackend(values)
    if (parsed.action === "print-config") return { exitCode: 0, stdout: printConfig(resolved, choice) }
    const settings: SettingsShape = { ...yield* toSettings(values, resolved.sources), backend: choice.backend }
    const warnings = yield* startupChecks(resolved, choice, settings)
    if (values.logLevel !== "error" && values.logLevel !== "none") {
      for (const warning of warnings) yield* Console.error(`kilntainers: warning: ${warning}`)
    }
    yield* serve(settings, values, choice).pipe(
      Effect.tapDefect((cause) => Effect.logDebug(Cause.pretty(cause))),
      Logger.withMinimumLogLevel(levels[values.logLevel])
    )
    return { exitCode: 0 }
  })

/**
 * Runs the command with `argv` (without node and the script); `width` is the help's line length.
 * Never fails: every failure is reported on stderr and becomes the exit code.
 */
export const main = (argv: ReadonlyArray<string>, width = 100): Effect.Effect<Outcome> => {
  const pointer = argv[0] === "image" ? "see 'kilntainers image --help'" : HELP_POINTER
  return run(argv, width).pipe(
    Effect.catchTags({
      UsageError: (error: UsageError) => errorLine(`${error.message} (${pointer})`).pipe(Effect.as({ exitCode: 2 })),
      ConfigRefused: (error: ConfigRefused) => errorLine(`${error.message} (${pointer})`).pipe(Effect.as({ exitCode: 1 }))
    }),
    Effect.catchAllCause((cause) => {
      if (Cause.isInterruptedOnly(cause)) return Effect.succeed({ exitCode: 130 })
      const failure = Cause.failureOption(cause)
      const message = failure._tag === "Some"
        ? describe(failure.value)
        : `internal error: ${describe(Cause.squash(cause))} (--log-level debug shows the details)`
      return errorLine(message).pipe(Effect.as({ exitCode: 1 }))
    })
  )
}
