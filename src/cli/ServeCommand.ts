/**
 * `kilntainers` (the default command): reads the flags and the `KILNTAINERS_*` variables, checks
 * them, and serves MCP over stdio or HTTP; `--print-config` and `--help-all` answer instead. The
 * server's modules are loaded only once the flags are good, so that help and mistakes answer at once.
 */
import * as Command from "@effect/cli/Command"
import * as Options from "@effect/cli/Options"
import * as Cause from "effect/Cause"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as LogLevel from "effect/LogLevel"
import { randomUUID } from "node:crypto"
import { type Spelling, spellingOf } from "./ArgvPrePass.js"
import { type BackendChoice, chooseBackend } from "./BackendChoice.js"
import { allFlags, flagTable, type FlagValues } from "./FlagTable.js"
import * as Help from "./Help.js"
import { printConfig } from "./PrintConfig.js"
import { resolveFlags, tableOptions } from "./ResolvedFlags.js"
import { startupChecks } from "./StartupChecks.js"
import { httpOptions, toSettings } from "./ToSettings.js"
import type { SettingsShape } from "../services/Settings.js"

const levels = {
  debug: LogLevel.Debug,
  info: LogLevel.Info,
  warning: LogLevel.Warning,
  error: LogLevel.Error,
  none: LogLevel.None
} as const

/** The actions: what the command does instead of serving. */
const actions: ReadonlyArray<Help.Action & Spelling> = [
  { invocation: "-h, --help", help: "Show this help and exit", name: "help", takesValue: false, repeatable: false, negatable: false },
  { invocation: "--help-all", help: "Show every option and exit", name: "help-all", takesValue: false, repeatable: false, negatable: false },
  { invocation: "--version", help: "Show the version and exit", name: "version", takesValue: false, repeatable: false, negatable: false, builtIn: true },
  {
    invocation: "--print-config",
    help: "Print the options' values and sources as JSON and exit",
    name: "print-config",
    takesValue: false,
    repeatable: false,
    negatable: false
  },
  {
    invocation: "--completions SHELL",
    help: "Print a completion script for SHELL (bash, zsh or fish) and exit",
    name: "completions",
    takesValue: true,
    repeatable: false,
    negatable: false,
    builtIn: true,
    choices: ["bash", "zsh", "fish", "sh"]
  }
]

/** How the command line is written, for the pre-pass. */
export const spellings: ReadonlyArray<Spelling> = [...actions, ...allFlags.map(([, flag]) => spellingOf(flag))]

export const page: Help.Page = {
  usage: [
    "usage: kilntainers [-h] [--help-all] [--backend BACKEND] [--transport {stdio,http}] [options]",
    "       kilntainers image build [--engine ENGINE] [--docker-host URL] [--tag TAG] [--base IMAGE]"
  ],
  description: "Isolated Linux computers and full process control for AI agents, served over MCP (stdio by default).",
  actions,
  flags: allFlags.map(([, flag]) => flag),
  footer: "Every option can also come from a variable: --output-limit from KILNTAINERS_OUTPUT_LIMIT (true or false " +
    "for switches, one value per line for repeatable options); the command line wins."
}

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

/** The command; `width` is the help's line length. */
export const make = (width: number) =>
  Command.make("kilntainers", {
    helpAll: Options.boolean("help-all").pipe(Options.withDescription("Show every option and exit")),
    printConfig: Options.boolean("print-config").pipe(Options.withDescription("Print the options' values and sources as JSON and exit")),
    flags: tableOptions(flagTable)
  }, (input) =>
    Effect.gen(function*() {
      if (input.helpAll) return yield* Console.log(Help.render(page, { all: true, width }).trimEnd())
      const resolved = yield* resolveFlags(input.flags)
      const values = resolved.values
      const choice = yield* chooseBackend(values)
      if (input.printConfig) return yield* Console.log(printConfig(resolved, choice).trimEnd())
      const settings: SettingsShape = { ...yield* toSettings(values, resolved.sources), backend: choice.backend }
      const warnings = yield* startupChecks(resolved, choice, settings)
      if (values.logLevel !== "error" && values.logLevel !== "none") {
        for (const warning of warnings) yield* Console.error(`kilntainers: warning: ${warning}`)
      }
      yield* serve(settings, values, choice).pipe(
        Effect.tapDefect((cause) => Effect.logDebug(Cause.pretty(cause))),
        Logger.withMinimumLogLevel(levels[values.logLevel])
      )
    }))
