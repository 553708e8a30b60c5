import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js"
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js"
import {
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  type ServerCapabilities,
  type ServerNotification,
  type ServerRequest
} from "@modelcontextprotocol/sdk/types.js"
import type { RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js"
import { Cause, Deferred, Effect, Exit, ParseResult, Runtime, Schema } from "effect"
import { Computers } from "../../services/Computers.js"
import type { Files } from "../../services/Files.js"
import type { Processes, ProgressReporter } from "../../services/Processes.js"
import { CurrentProgress } from "../../services/Progress.js"
import { Settings } from "../../services/Settings.js"
import * as ComputerTools from "./ComputerTools.js"
import * as Dashboard from "./Dashboard.js"
import * as ProcessTools from "./ProcessTools.js"
import * as Tool from "./Tool.js"

export const serverInfo = { name: "kilntainers", version: "0.1.0" } as const

const text = (value: string): CallToolResult["content"] => [{ type: "text", text: value }]

const errorResult = (message: string): CallToolResult => ({ isError: true, content: text(message) })

/**
 * Builds an MCP `Server` (the SDK's low-level one) whose tools are the Schema-typed tool catalogue.
 * Every call runs as an Effect in the captured runtime; a cancelled request interrupts it.
 */
export const makeServer = Effect.gen(function*() {
  const settings = yield* Settings
  const runtime = yield* Effect.runtime<Processes | Computers | Files>()
  const run = Runtime.runPromiseExit(runtime)
  const tools: ReadonlyArray<Tool.Tool<any, any, Processes | Computers | Files>> = [
    ...ProcessTools.make(settings),
    ...ComputerTools.make()
  ]
  const byName = new Map(tools.map((tool) => [tool.name, tool]))
  const listed = tools.map((tool) => ({
    name: tool.name,
    title: tool.annotations.title,
    description: tool.description,
    inputSchema: Tool.jsonSchema(tool.input),
    outputSchema: Tool.jsonSchema(tool.output),
    annotations: tool.annotations,
    ...(tool.meta ? { _meta: tool.meta } : {})
  }))

  const server = new Server(serverInfo, {
    capabilities: {
      tools: {},
      resources: {},
      // MCP Apps: this server's UI resources are HTML apps.
      extensions: { "io.modelcontextprotocol/ui": { mimeTypes: [Dashboard.mimeType] } }
    } as ServerCapabilities,
    instructions: "kilntainers gives you isolated Linux computers. Use sandbox_exec for one-shot commands, " +
      "spawn/stdin/stdout/wait/kill/ps for long-running and interactive processes."
  })

  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: listed }))

  const dashboard = {
    uri: Dashboard.resourceUri,
    name: "computers",
    title: "Sandbox Computer Dashboard",
    description: "Interactive dashboard of the sandbox computers (MCP App)",
    mimeType: Dashboard.mimeType,
    _meta: Dashboard.resourceMeta
  }
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: [dashboard] }))
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    if (request.params.uri !== Dashboard.resourceUri) {
      throw new McpError(ErrorCode.InvalidParams, `unknown resource '${request.params.uri}'`)
    }
    return { contents: [{ uri: Dashboard.resourceUri, mimeType: Dashboard.mimeType, text: Dashboard.html, _meta: Dashboard.resourceMeta }] }
  })

  server.setRequestHandler(
    CallToolRequestSchema,
    async (request, extra: RequestHandlerExtra<ServerRequest, ServerNotification>): Promise<CallToolResult> => {
      const tool = byName.get(request.params.name)
      if (!tool) return errorResult(`unknown tool '${request.params.name}'; available: ${[...byName.keys()].join(", ")}`)
      const token = request.params._meta?.progressToken
      const progress: ProgressReporter | undefined = token === undefined ? undefined : (p) =>
        Effect.tryPromise(() =>
          extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, ...p } })
        ).pipe(Effect.ignore)
      const session = extra.sessionId ?? "stdio"
      const program = Schema.decodeUnknown(tool.input)(request.params.arguments ?? {}, { onExcessProperty: "error" }).pipe(
        Effect.mapError((error) => ({
          _tag: "InvalidInput",
          message: `invalid arguments for ${tool.name}: ${ParseResult.TreeFormatter.formatErrorSync(error)}`
        })),
        Effect.flatMap((input) => tool.handle(input, { session, progress })),
        Effect.locally(CurrentProgress, progress),
        Effect.flatMap((output) => Schema.encode(tool.output)(output).pipe(Effect.orDie)),
        Effect.map((encoded): CallToolResult => ({
          content: text(JSON.stringify(encoded, null, 2)),
          structuredContent: encoded as Record<string, unknown>
        })),
        // No structuredContent on errors: clients validate it against the tool's outputSchema.
        Effect.catchAll((error) => Effect.succeed(errorResult(`${error._tag}: ${error.message}`)))
      )
      const exit = await run(program, { signal: extra.signal })
      if (Exit.isSuccess(exit)) return exit.value
      if (Cause.isInterruptedOnly(exit.cause)) return errorResult("the call was cancelled")
      await run(Effect.logError("tool call failed", exit.cause))
      return errorResult(`internal error in ${tool.name}: ${Cause.pretty(exit.cause).split("\n")[0]}`)
    }
  )
  return server
})

/**
 * Serves one MCP session over a transport until the client goes away (transport closed), then
 * releases the session's temporary computers. Interrupting it closes the transport.
 */
export const serve = (transport: Transport, session: string, onConnected: Effect.Effect<void> = Effect.void) =>
  Effect.gen(function*() {
    const computers = yield* Computers
    const server = yield* makeServer
    const closed = yield* Deferred.make<void>()
    server.onclose = () => Deferred.unsafeDone(closed, Exit.void)
    yield* Effect.addFinalizer(() => computers.release(session))
    yield* Effect.acquireRelease(
      Effect.promise(() => server.connect(transport)),
      () => Effect.promise(() => server.close()).pipe(Effect.timeout("5 seconds"), Effect.interruptible, Effect.ignore)
    )
    yield* onConnected
    yield* Deferred.await(closed)
  }).pipe(Effect.scoped)

/** Serves MCP over this process's stdin/stdout until stdin ends. Nothing else may write to stdout. */
export const serveStdio = Effect.gen(function*() {
  const transport = new StdioServerTransport()
  const stdinEnded = yield* Deferred.make<void>()
  const onEnd = () => Deferred.unsafeDone(stdinEnded, Exit.void)
  yield* Effect.acquireRelease(
    Effect.sync(() => {
      process.stdin.on("end", onEnd)
      process.stdin.on("close", onEnd)
    }),
    () =>
      Effect.sync(() => {
        process.stdin.off("end", onEnd)
        process.stdin.off("close", onEnd)
      })
  )
  yield* Effect.raceFirst(serve(transport, "stdio"), Deferred.await(stdinEnded))
  yield* Effect.logDebug("stdin closed: shutting down")
}).pipe(Effect.scoped)
