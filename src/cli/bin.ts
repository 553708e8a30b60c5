#!/usr/bin/env node
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Exit, Logger } from "effect"
import * as Cli from "./Cli.js"

Cli.run(process.argv).pipe(
  Effect.provide(NodeContext.layer),
  Effect.provide(Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true, colors: false }))),
  NodeRuntime.runMain({
    disablePrettyLogger: true,
    // Always exit: stdio listeners must not keep a finished server alive.
    teardown: (exit, onExit) => {
      const code = Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause) ? 1 : 0
      onExit(code)
      process.exit(code)
    }
  })
)
