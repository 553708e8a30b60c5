import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js"
import { Protocol, type RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js"
import {
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
import * as Cause from "effect/Cause"
import type * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import * as z from "zod/v4"
import { Computers } from "../../services/Computers.js"
import type { Files } from "../../services/Files.js"
import type { Processes, ProgressReporter } from "../../services/Processes.js"
import { CurrentProgress } from "../../services/Progress.js"
import type { SettingsShape } from "../../services/Settings.js"
import * as ArgumentErrors from "../../domain/ArgumentErrors.js"
import * as ComputerTools from "./ComputerTools.js"
import * as Dashboard from "./Dashboard.js"
import { lazyJsonSchemaValidator } from "./LazyJsonSchemaValidator.js"
import { maxMessageBytes } from "./Limits.js"
import * as ProcessTools from "./ProcessTools.js"
import { StdioTransport } from "./StdioTransport.js"
import * as Tool from "./Tool.js"
import * as ToolCallSpan from "./ToolCallSpan.js"

export const serverInfo = { name: "kilntainers", version: "0.1.0" } as const

const text = (value: string): CallToolResult["content"] => [{ type: "text", text: value }]

const errorResult = (message: string): CallToolResult => ({ isError: true, content: text(message) })

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Any tools/call request: its params are checked by the handler, which answers with tool results. */
const AnyToolCall = z.object({ method: z.literal("tools/call"), params: z.unknown() })

/** What tool calls use: the runtime's services over the backend. */
export type ToolServices = Processes | Computers | Files

/**
 * The services of tool calls, which may still be starting: the server answers `initialize` and
 * `tools/list` at once while the backend starts (a sandbox check, an engine ping, an SDK) in the
 * background, and a call waits for it — or is told why it could not start.
 */
export interface ServicesHandle {
  readonly await: Effect.Effect<Context.Context<ToolServices>, string>
  /** The services if they have started (no wait). */
  readonly poll: Effect.Effect<Option.Option<Context.Context<ToolServices>>>
}

/** Services that are already there (HTTP sessions, library callers). */
export const ready = (context: Context.Context<ToolServices>): ServicesHandle => ({
  await: Effect.succeed(context),
  poll: Effect.succeed(Option.some(context))
})

/**
 * Builds the layer in the background, in the current Scope (released with it). Its failure is
 * logged at once and answered to every call.
 */
export const starting = <E>(layer: Layer.Layer<ToolServices, E>): Effect.Effect<ServicesHandle, never, Scope.Scope> =>
  Effect.gen(function*() {
    const built = yield* Deferred.make<Context.Context<ToolServices>, string>()
    const scope = yield* Effect.scope
    yield* Layer.buildWithScope(layer, scope).pipe(
      Effect.tapErrorCause((cause) => Effect.logError(`the backend cannot start: ${describeFailure(cause)}`)),
      Effect.mapErrorCause((cause) => Cause.fail(describeFailure(cause))),
      Effect.exit,
      Effect.flatMap((exit) => Deferred.done(built, exit)),
      Effect.forkScoped
    )
    return {
      await: Deferred.await(built),
      poll: Deferred.poll(built).pipe(
        Effect.flatMap(Option.match({
          onNone: () => Effect.succeed(Option.none<Context.Context<ToolServices>>()),
          onSome: (done) => Effect.option(done)
        }))
      )
    }
  })

const describeFailure = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  return typeof error === "object" && error !== null && "message" in error && typeof error.message === "string"
    ? error.message
    : String(error)
}

interface Catalogue {
  readonly byName: ReadonlyMap<string, Tool.Tool<any, any, ToolServices>>
  readonly inputSchemas: ReadonlyMap<string, ReturnType<typeof Tool.jsonSchema>>
  readonly listed: ReadonlyArray<Record<string, unknown>>
}

const catalogues = new WeakMap<SettingsShape, Catalogue>()

/**
 * The tools of these settings and what tools/list says of them, made once per settings: every
 * HTTP session gets a `Server` of its own, and the JSON Schemas take milliseconds to derive.
 */
const catalogue = (settings: SettingsShape): Catalogue => {
  const cached = catalogues.get(settings)
  if (cached !== undefined) return cached
  const tools: ReadonlyArray<Tool.Tool<any, any, ToolServices>> = [
    ...ProcessTools.make(settings),
    ...ComputerTools.make()
  ]
  const inputSchemas = new Map(tools.map((tool) => [tool.name, Tool.jsonSchema(tool.input)]))
  const made: Catalogue = {
    byName: new Map(tools.map((tool) => [tool.name, tool])),
    inputSchemas,
    listed: tools.map((tool) => ({
      name: tool.name,
      title: tool.annotations.title,
      description: tool.description,
      inputSchema: inputSchemas.get(tool.name)!,
      outputSchema: Tool.jsonSchema(tool.output),
      annotations: tool.annotations,
      ...(tool.meta ? { _meta: tool.meta } : {})
    }))
  }
  catalogues.set(settings, made)
  return made
}

/**
 * Builds an MCP `Server` (the SDK's low-level one) whose tools are the Schema-typed tool catalogue.
 * Every call runs as an Effect in the captured runtime, with the services once they have started;
 * a cancelled request interrupts it.
 */
export const makeServer = (settings: SettingsShape, services: ServicesHandle) => Effect.gen(function*() {
  const run = Runtime.runPromiseExit(yield* Effect.runtime<never>())
  const { byName, inputSchemas, listed } = catalogue(settings)

  const server = new Server(serverInfo, {
    jsonSchemaValidator: lazyJsonSchemaValidator,
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
  // The built page, read once per session on first use.
  const dashboardPage = yield* Effect.cached(Dashboard.page)
  server.setRequestHandler(ReadResourceRequestSchema, async (request) => {
    if (request.params.uri !== Dashboard.resourceUri) {
      throw new McpError(ErrorCode.InvalidParams, `unknown resource '${request.params.uri}'`)
    }
    const page = await run(Effect.tapError(dashboardPage, (error) => Effect.logError(error.message)))
    if (Exit.isFailure(page)) {
      const reason = Option.match(Cause.failureOption(page.cause), { onNone: () => "interrupted", onSome: (error) => error.message })
      throw new McpError(ErrorCode.InternalError, reason)
    }
    return { contents: [{ uri: Dashboard.resourceUri, mimeType: Dashboard.mimeType, text: page.value, _meta: Dashboard.resourceMeta }] }
  })

  const callTool = async (params: unknown, extra: RequestHandlerExtra<ServerRequest, ServerNotification>): Promise<CallToolResult> => {
    const call = isObject(params) ? params : {}
    const name = typeof call.name === "string" ? call.name : ""
    const tool = byName.get(name)
    const args = call.arguments === undefined ? {} : call.arguments
    const meta = isObject(call._meta) ? call._meta : {}
    const token = typeof meta.progressToken === "string" || typeof meta.progressToken === "number" ? meta.progressToken : undefined
    const progress: ProgressReporter | undefined = token === undefined ? undefined : (p) =>
      Effect.tryPromise(() =>
        extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, ...p } })
      ).pipe(Effect.ignore)
    const session = extra.sessionId ?? "stdio"
    const invalid = (message: string) => Effect.fail({ _tag: "InvalidInput", message })
    const outcome: Effect.Effect<CallToolResult, { readonly _tag: string; readonly message: string }, Processes | Computers | Files> =
      typeof call.name !== "string"
        ? invalid("tools/call needs the tool's name (params.name, a string)")
        : tool === undefined
        ? Effect.succeed(errorResult(`unknown tool '${name}'; available: ${[...byName.keys()].join(", ")}`))
        : !isObject(args)
        ? invalid(`invalid arguments for ${tool.name}: arguments must be an object of named arguments, not ${ArgumentErrors.kindOf(args)}`)
        : Schema.decodeUnknown(tool.input)(args, { onExcessProperty: "error", errors: "all" }).pipe(
          Effect.mapError((error) => ({
            _tag: "InvalidInput",
            message: ArgumentErrors.describe(tool.name, inputSchemas.get(tool.name)!, args, error)
          })),
          Effect.flatMap((input) => tool.handle(input, { session, progress })),
          Effect.locally(CurrentProgress, progress),
          Effect.flatMap((output) => Schema.encode(tool.output)(output).pipe(Effect.orDie)),
          Effect.map((encoded): CallToolResult => ({
            // Compact: every byte of a result costs the agent context.
            content: text(JSON.stringify(tool.text ? tool.text(encoded) : encoded)),
            structuredContent: encoded as Record<string, unknown>
          }))
        )
    const program = ToolCallSpan.traced(
      {
        tool: name,
        session,
        sessionId: extra.sessionId,
        requestId: extra.requestId,
        meta,
        arguments: args,
        client: server.getClientVersion()
      },
      outcome,
      // No structuredContent on errors: clients validate it against the tool's outputSchema.
      (error) => errorResult(`${error._tag}: ${error.message}`)
    )
    const withServices = Effect.flatMap(Effect.either(services.await), (started) =>
      started._tag === "Left"
        ? Effect.succeed(errorResult(`the ${settings.backend} backend could not start: ${started.left}`))
        : Effect.provide(program, started.right))
    const exit = await run(withServices, { signal: extra.signal })
    if (Exit.isSuccess(exit)) return exit.value
    if (Cause.isInterruptedOnly(exit.cause)) return errorResult("the call was cancelled")
    await run(Effect.logError("tool call failed", exit.cause))
    return errorResult(`internal error in ${name}: ${Cause.pretty(exit.cause).split("\n")[0]}`)
  }
  // The SDK's Server checks tools/call params itself and answers malformed arguments with a JSON-RPC
  // error; a model reads tool results, not protocol errors, so every call comes here and a bad one
  // gets an isError result it can act on.
  const setRequestHandler = Protocol.prototype.setRequestHandler as (
    this: Server,
    schema: typeof AnyToolCall,
    handler: (request: z.infer<typeof AnyToolCall>, extra: RequestHandlerExtra<ServerRequest, ServerNotification>) => Promise<CallToolResult>
  ) => void
  setRequestHandler.call(server, AnyToolCall, (request, extra) => callTool(request.params, extra))
  return server
})

/**
 * Serves one MCP session over a transport until the client goes away (transport closed), then
 * releases the session's temporary computers. Interrupting it closes the transport.
 */
export const serve = (
  settings: SettingsShape,
  services: ServicesHandle,
  transport: Transport,
  session: string,
  onConnected: Effect.Effect<void> = Effect.void
) =>
  Effect.gen(function*() {
    const server = yield* makeServer(settings, services)
    const closed = yield* Deferred.make<void>()
    server.onclose = () => Deferred.unsafeDone(closed, Exit.void)
    // Computers exist only once the services have started.
    yield* Effect.addFinalizer(() =>
      Effect.flatMap(services.poll, Option.match({
        onNone: () => Effect.void,
        onSome: (context) => Effect.flatMap(Computers, (computers) => computers.release(session)).pipe(Effect.provide(context))
      }))
    )
    yield* Effect.acquireRelease(
      Effect.promise(() => server.connect(transport)),
      () => Effect.promise(() => server.close()).pipe(Effect.timeout("5 seconds"), Effect.interruptible, Effect.ignore)
    )
    yield* onConnected
    yield* Deferred.await(closed)
  }).pipe(Effect.scoped)

/**
 * Serves MCP over this process's stdin/stdout until stdin ends, answering at once while the layer
 * (the backend) starts. Nothing else may write to stdout.
 */
export const serveStdio = <E>(settings: SettingsShape, layer: Layer.Layer<ToolServices, E>) => Effect.gen(function*() {
  const services = yield* starting(layer)
  const runFork = Runtime.runFork(yield* Effect.runtime<never>())
  const transport = new StdioTransport(process.stdin, process.stdout, {
    maxMessageBytes,
    warn: (message) => runFork(Effect.logWarning(message))
  })
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
  yield* Effect.raceFirst(serve(settings, services, transport, "stdio"), Deferred.await(stdinEnded))
  yield* Effect.logDebug("stdin closed: shutting down")
}).pipe(Effect.scoped)
