#!/usr/bin/env node
import * as ValidationError from "@effect/cli/ValidationError"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Effect, Option } from "effect"
import * as Main from "../layers/Main.js"
import * as Cli from "./Cli.js"

const describe = (error: unknown): string =>
  typeof error === "string" ? error : error instanceof Error || (typeof error === "object" && error !== null && "message" in error)
    ? String((error as { message: unknown }).message)
    : String(error)

Cli.run(process.argv).pipe(
  // Failures are reported here, on stderr: runMain's own report would go to stdout.
  Effect.catchAllCause((cause) => {
    if (Cause.isInterruptedOnly(cause)) return Effect.void
    process.exitCode = 1
    const failure = Cause.failureOption(cause)
    // @effect/cli has already printed its own validation errors.
    if (Option.isSome(failure) && ValidationError.isValidationError(failure.value)) return Effect.void
    return Option.match(failure, {
      onNone: () => Effect.logError(Cause.pretty(cause)),
      onSome: (error) => Effect.logError(`kilntainers cannot start: ${describe(error)}`)
    })
  }),
  Effect.provide(NodeContext.layer),
  Effect.provide(Main.stderrLogger),
  NodeRuntime.runMain({
    disablePrettyLogger: true,
    // Always exit: stdio listeners must not keep a finished server alive.
    teardown: (_exit, onExit) => {
      const code = typeof process.exitCode === "number" ? process.exitCode : 0
      onExit(code)
      process.exit(code)
    }
  })
)
