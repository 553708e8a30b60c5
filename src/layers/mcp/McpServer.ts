/**
 * The MCP server of kilntainers on the SDK's low-level `Server` (v2): the Schema-typed tool
 * catalogue, the dashboard resource, and how a server instance is made — one per connection
 * (stdio, a 2025-era HTTP session) or one per request (2026-07-28 over HTTP). Whichever protocol
 * era the client speaks, the same tools answer; only how a call finds its session differs.
 */
import {
  type CallToolResult,
  ProtocolError,
  ProtocolErrorCode,
  ResourceNotFoundError,
  Server,
  type ServerCapabilities,
  type ServerContext,
  type Transport
} from "@modelcontextprotocol/server"
import { serveStdio as sdkServeStdio } from "@modelcontextprotocol/server/stdio"
import * as Cause from "effect/Cause"
import type * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import { Computers } from "../../services/Computers.js"
import type { SettingsShape } from "../../services/Settings.js"
import * as CheckpointTools from "./CheckpointTools.js"
import * as ComputerTools from "./ComputerTools.js"
import * as Dashboard from "./Dashboard.js"
import { lazyJsonSchemaValidator } from "./LazyJsonSchemaValidator.js"
import { maxMessageBytes } from "./Limits.js"
import * as PreviewTools from "./PreviewTools.js"
import * as ProcessTools from "./ProcessTools.js"
import { StdioTransport } from "./StdioTransport.js"
import * as Tool from "./Tool.js"
import * as TaskMethods from "./TaskMethods.js"
import * as TerminalTool from "./TerminalTool.js"
import * as TaskIds from "./TaskIds.js"
import * as Tasks from "./Tasks.js"
import { type Caller, callTool, type Catalogue, type Run, type TaskCreated, type ToolServices } from "./ToolCall.js"

export type { ToolServices } from "./ToolCall.js"

export const serverInfo = { name: "kilntainers", version: "0.1.0" } as const

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

const catalogues = new WeakMap<SettingsShape, Catalogue>()

/**
 * The tools of these settings and what tools/list says of them, made once per settings: the JSON
 * Schemas take milliseconds to derive, and a server instance is made per connection or request.
 */
const catalogue = (settings: SettingsShape): Catalogue => {
  const cached = catalogues.get(settings)
  if (cached !== undefined) return cached
  const tools: ReadonlyArray<Tool.Tool<any, any, ToolServices>> = [
    ...ProcessTools.make(settings),
    ...ComputerTools.make(),
    ...CheckpointTools.make(),
    ...PreviewTools.make(),
    ...TerminalTool.make()
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
      annotations: Tool.hints(tool.annotations),
      ...(tool.meta ? { _meta: tool.meta } : {})
    }))
  }
  catalogues.set(settings, made)
  return made
}

/** What every server instance of one process shares: the catalogue, the runtime, the services. */
export interface ServerParts {
  readonly settings: SettingsShape
  readonly services: ServicesHandle
  readonly catalogue: Catalogue
  readonly run: Run
  /** The built dashboard page, read on first use. */
  readonly dashboardPage: Effect.Effect<string, Dashboard.DashboardNotBuilt>
  /** The task store, where the Tasks extension is served. */
  readonly tasks: Tasks.Tasks | undefined
}

/** The parts of the servers made with these settings, in the current runtime. */
export const makeParts = (settings: SettingsShape, services: ServicesHandle, tasks?: Tasks.Tasks) =>
  Effect.gen(function*() {
    const run = Runtime.runPromiseExit(yield* Effect.runtime<never>())
    return {
      settings,
      services,
      catalogue: catalogue(settings),
      run: (effect, options) => run(effect, options),
      dashboardPage: yield* Effect.cached(Dashboard.page),
      tasks
    } satisfies ServerParts
  })

/**
 * Which session a request belongs to: the connection's, or, on 2026-07-28 over HTTP, the one its
 * principal and `_meta` (`ctx.mcpReq._meta`) name. A request that cannot name one is refused with a message for the agent.
 */
export type SessionOf = (ctx: ServerContext) => { readonly session: string; readonly done?: () => void } | { readonly refused: string }

const dashboard = {
  uri: Dashboard.resourceUri,
  name: "computers",
  title: "Sandbox Computer Dashboard",
  description: "Interactive dashboard of the sandbox computers (MCP App)",
  mimeType: Dashboard.mimeType,
  _meta: Dashboard.resourceMeta
}

const capabilities = {
  tools: {},
  resources: {},
  // None of either: declared so that clients (and the conformance suite) get empty answers, not errors.
  prompts: {},
  completions: {},
  // Protocol logging (2025 revisions): the SDK answers logging/setLevel; this server logs to stderr.
  logging: {},
  // MCP Apps: this server's UI resources are HTML apps.
  extensions: { "io.modelcontextprotocol/ui": { mimeTypes: [Dashboard.mimeType] } }
} satisfies ServerCapabilities

const withTasks = {
  ...capabilities,
  extensions: { ...capabilities.extensions, [Tasks.tasksExtension]: {} }
} satisfies ServerCapabilities

const instructions = "kilntainers gives you isolated Linux computers. Use sandbox_exec for one-shot commands, " +
  "spawn/stdin/stdout/wait/kill/ps for long-running and interactive processes."

/**
 * A server instance. Its tools/list is the catalogue (cacheable for an hour on 2026-07-28: it only
 * changes with the server's flags); every tools/call goes to `callTool` with its raw params, through
 * the SDK's handler for methods without one of their own — the SDK's own tools/call handler would
 * answer malformed arguments with a protocol error, and a model reads tool results, not those.
 */
export const buildServer = (parts: ServerParts, sessionOf: SessionOf): Server => {
  const server = new Server(serverInfo, {
    jsonSchemaValidator: lazyJsonSchemaValidator,
    capabilities: parts.tasks === undefined ? capabilities : withTasks,
    instructions,
    cacheHints: { "tools/list": { ttlMs: 3_600_000, cacheScope: "public" }, "resources/list": { ttlMs: 3_600_000, cacheScope: "public" } }
  })
  server.setRequestHandler("tools/list", () => ({ tools: parts.catalogue.listed as Array<never> }))
  server.setRequestHandler("resources/list", () => ({ resources: [dashboard] }))
  server.setRequestHandler("prompts/list", () => ({ prompts: [] }))
  server.setRequestHandler("completion/complete", () => ({ completion: { values: [], hasMore: false } }))
  server.setRequestHandler("resources/read", async (request) => {
    if (request.params.uri !== Dashboard.resourceUri) throw new ResourceNotFoundError(request.params.uri, `unknown resource '${request.params.uri}'`)
    const page = await parts.run(Effect.tapError(parts.dashboardPage, (error) => Effect.logError(error.message)))
    if (Exit.isFailure(page)) {
      const reason = Option.match(Cause.failureOption(page.cause), { onNone: () => "interrupted", onSome: (error) => error.message })
      throw new ProtocolError(ProtocolErrorCode.InternalError, reason)
    }
    return { contents: [{ uri: Dashboard.resourceUri, mimeType: Dashboard.mimeType, text: page.value, _meta: Dashboard.resourceMeta }] }
  })
  const callParts = { settings: parts.settings, catalogue: parts.catalogue, run: parts.run, services: parts.services.await, tasks: parts.tasks }
  server.fallbackRequestHandler = async (request, ctx): Promise<CallToolResult | TaskCreated> => {
    if (request.method !== "tools/call") throw new ProtocolError(ProtocolErrorCode.MethodNotFound, "Method not found")
    const found = sessionOf(ctx)
    if ("refused" in found) return { isError: true, content: [{ type: "text", text: found.refused }] }
    const caller: Caller = {
      session: found.session,
      sessionId: ctx.sessionId,
      client: server.getClientVersion(),
      acceptsTasks: TaskMethods.acceptsTasks(ctx)
    }
    try {
      return await callTool(callParts, request.params, ctx, caller)
    } finally {
      found.done?.()
    }
  }
  if (parts.tasks !== undefined) TaskMethods.register(server, parts.tasks, callParts, sessionOf)
  return server
}

/** The session of every request on one connection. */
export const connectionSession = (session: string): SessionOf => () => ({ session })

/**
 * A server whose calls all belong to `session` (a connection's, or the HTTP transport's session
 * id when it has one), in the current runtime.
 */
export const makeServer = (settings: SettingsShape, services: ServicesHandle, session = "stdio") =>
  Effect.map(makeParts(settings, services), (parts) =>
    buildServer(parts, (ctx) => ({ session: ctx.sessionId ?? session })))

/** Releases a session's temporary computers, if the services have started (computers exist only then). */
export const releaseSession = (services: ServicesHandle, session: string) =>
  Effect.flatMap(services.poll, Option.match({
    onNone: () => Effect.void,
    onSome: (context) => Effect.flatMap(Computers, (computers) => computers.release(session)).pipe(Effect.provide(context))
  }))

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
    const server = yield* makeServer(settings, services, session)
    const closed = yield* Deferred.make<void>()
    server.onclose = () => Deferred.unsafeDone(closed, Exit.void)
    yield* Effect.addFinalizer(() => releaseSession(services, session))
    yield* Effect.acquireRelease(
      Effect.promise(() => server.connect(transport)),
      () => Effect.promise(() => server.close()).pipe(Effect.timeout("5 seconds"), Effect.interruptible, Effect.ignore)
    )
    yield* onConnected
    yield* Deferred.await(closed)
  }).pipe(Effect.scoped)

/**
 * Serves MCP over this process's stdin/stdout until stdin ends (or stdout breaks), answering at once while the layer
 * (the backend) starts. The SDK's stdio entry decides the era from the client's first message (a
 * 2025 `initialize`, or 2026-07-28 requests that carry their own envelope); either way the
 * connection is one session. Nothing else may write to stdout.
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
      // A client that closed its end of stdout is gone as surely as one that closed stdin.
      process.stdout.on("error", onEnd)
    }),
    () =>
      Effect.sync(() => {
        process.stdin.off("end", onEnd)
        process.stdin.off("close", onEnd)
        process.stdout.off("error", onEnd)
      })
  )
  // Over stdio there is no replica: a key of this process alone.
  const parts = yield* makeParts(settings, services, yield* Tasks.make(Tasks.defaults, TaskIds.keyFrom([])))
  yield* Effect.addFinalizer(() => releaseSession(services, "stdio"))
  yield* Effect.acquireRelease(
    Effect.sync(() =>
      sdkServeStdio(() => buildServer(parts, connectionSession("stdio")), {
        transport,
        onerror: (error) => runFork(Effect.logDebug(`stdio: ${error.message}`))
      })
    ),
    (handle) => Effect.promise(() => handle.close()).pipe(Effect.timeout("5 seconds"), Effect.interruptible, Effect.ignore)
  )
  yield* Deferred.await(stdinEnded)
  yield* Effect.logDebug("stdin closed or stdout broken: shutting down")
}).pipe(Effect.scoped)
