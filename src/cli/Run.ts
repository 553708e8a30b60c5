/**
 * Runs the `kilntainers` command line (Cli.ts) in Node's runtime, its logs on stderr, the exit code
 * set from the command's result. Loaded by bin.ts once Node's compile cache is on.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as Cli from "./Cli.js"

// Logs go to stderr: in stdio mode stdout carries the MCP protocol and nothing else. Only help,
// --version, --completions, --print-config and image build's tag write stdout, and then no server runs.
const stderrLogger = Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true, colors: false }))
const width = process.stdout.isTTY ? Math.min(process.stdout.columns || 100, 120) : 100

Cli.main(process.argv.slice(2), width).pipe(
  Effect.tap((exitCode) => Effect.sync(() => (process.exitCode = exitCode))),
  Effect.provide(stderrLogger),
  NodeRuntime.runMain({
    disablePrettyLogger: true,
    // Always exit, once stdout is flushed: stdio listeners must not keep a finished server alive.
    teardown: (_exit, onExit) => {
      const code = typeof process.exitCode === "number" ? process.exitCode : 0
      onExit(code)
      process.stdout.write("", () => process.exit(code))
    }
  })
)
