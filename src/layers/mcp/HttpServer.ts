import { HttpMiddleware, HttpRouter, HttpServerResponse } from "@effect/platform"
import { createMcpHandler, type ServerContext } from "@modelcontextprotocol/server"
import { NodeHttpServer } from "@effect/platform-node"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Exit from "effect/Exit"
import * as Runtime from "effect/Runtime"
import * as Schema from "effect/Schema"
import { createServer } from "node:http"
import type { Computers } from "../../services/Computers.js"
import type { Files } from "../../services/Files.js"
import { Previews } from "../../services/Previews.js"
import type { Processes } from "../../services/Processes.js"
import { Settings } from "../../services/Settings.js"
import type { Terminals } from "../../services/Terminals.js"
import * as BearerAuth from "./BearerAuth.js"
import * as BodyBudget from "./BodyBudget.js"
import * as Dashboard from "./Dashboard.js"
import * as HttpSessions from "./HttpSessions.js"
import { maxMessageBytes } from "./Limits.js"
import * as McpEndpoint from "./McpEndpoint.js"
import { buildServer, makeParts, ready, releaseSession, serve, serverInfo } from "./McpServer.js"
import * as OriginGuard from "./OriginGuard.js"
import * as SessionLeases from "./SessionLeases.js"
import * as TaskIds from "./TaskIds.js"
import * as Tasks from "./Tasks.js"
import * as TerminalPage from "./TerminalPage.js"
import { TerminalLinks } from "../../services/TerminalLinks.js"
import * as Links from "../terminal/TerminalLinks.js"

export { isLoopback } from "./OriginGuard.js"
export { tokenMatches } from "./BearerAuth.js"

export interface HttpOptions {
  readonly host: string
  readonly port: number
  /** An MCP session with no request for this long is closed (its temporary computers removed). */
  readonly sessionTimeoutMs: number
  /** Bearer token required on /mcp (principal `default`); neither it nor `principals` = no auth (only allowed on loopback, or when told). */
  readonly authToken: string | undefined
  /** More tokens, each the identity of a principal of its own. */
  readonly principals?: ReadonlyArray<BearerAuth.PrincipalToken> | undefined
  readonly allowUnauthenticated: boolean
  /** Most concurrent MCP sessions. */
  readonly maxSessions: number
  /** Most concurrent MCP sessions of one principal (default: `maxSessions`). */
  readonly maxSessionsPerPrincipal?: number | undefined
  /** Largest request body, bytes (default: the MCP message limit, 32 MiB). */
  readonly maxBodyBytes?: number | undefined
  /** Bytes of memory request bodies may take at once, all together and one principal's (defaults: `defaultBodyMemory`). */
  readonly bodyMemory?: BodyBudget.BodyBudgetLimits | undefined
}

/**
 * The memory request bodies may take at once, by default: 256 MiB, two of the largest messages as
 * they are parsed (`McpEndpoint.memoryPerBodyByte`), all of it to one principal (there is nobody to
 * share with unless several are configured).
 */
export const defaultBodyMemory = { total: 8 * maxMessageBytes, perPrincipal: 8 * maxMessageBytes } as const

/** The HTTP server cannot start with these options. */
export class HttpStartError extends Schema.TaggedError<HttpStartError>()("HttpStartError", {
  message: Schema.String
}) {}

const notFound = HttpServerResponse.unsafeJson({ error: "not found" }, { status: 404 })

const describe = (cause: unknown) => cause instanceof Error ? cause.message : String(cause)

/**
 * Serves MCP over Streamable HTTP at `/mcp` (bearer auth when a token is set), `/healthz` (just
 * "ok") and `/` beside it, on `@effect/platform`'s Node server, with Host/Origin checks on
 * loopback. Every MCP session is a fiber of the session registry: it ends when the client deletes
 * it, when it has been idle for the session timeout, or when the server stops, and its temporary
 * computers go with it.
 */
export const serveHttp = (options: HttpOptions) =>
  Effect.gen(function*() {
    const loopback = OriginGuard.isLoopback(options.host)
    const token = options.authToken
    if (token !== undefined) {
      const checked = BearerAuth.validateToken(token, "the auth token (--auth-token or KILNTAINERS_AUTH_TOKEN)")
      if (Either.isLeft(checked)) return yield* new HttpStartError({ message: checked.left })
    }
    const tokens = [
      ...(token === undefined ? [] : [{ principal: BearerAuth.defaultPrincipal, token }]),
      ...(options.principals ?? [])
    ]
    for (const entry of options.principals ?? []) {
      const checked = BearerAuth.validateToken(entry.token, `the token of principal ${entry.principal}`)
      if (Either.isLeft(checked)) return yield* new HttpStartError({ message: checked.left })
    }
    if (!loopback && tokens.length === 0 && !options.allowUnauthenticated) {
      return yield* new HttpStartError({
        message: `refusing to serve on ${options.host} without authentication: set --auth-token (or ` +
          `KILNTAINERS_AUTH_TOKEN), bind to 127.0.0.1, or pass --allow-unauthenticated-http if something in front of ` +
          `this server authenticates`
      })
    }
    const context = yield* Effect.context<Processes | Computers | Files | Previews | Terminals | Settings>()
    const node = createServer()
    // Idle keep-alive connections are closed by the client, not by us: Node's 5 s default let a busy
    // server close a connection just as a client (undici keeps them 4 s) sent the next request on
    // it, which the client saw as ECONNRESET (50 sessions connecting at once, bench/http-scale.mjs).
    node.keepAliveTimeout = 65_000
    const server = yield* NodeHttpServer.make(() => node, { host: options.host, port: options.port }).pipe(
      Effect.mapError((error) => new HttpStartError({ message: `cannot listen on ${options.host}:${options.port}: ${describe(error.cause)}` }))
    )
    // Runs before the listener's own close: open streams end, so that close() can return.
    yield* Effect.addFinalizer(() => Effect.sync(() => node.closeAllConnections()))
    const port = server.address._tag === "TcpAddress" ? server.address.port : options.port
    // The terminal page is served on the preview origin when its listener runs (same origin rules as
    // previews: /mcp's origin refuses the page); else on this server, whose links name the address it
    // listens on (a wildcard: this machine).
    const previews = Context.get(context, Previews)
    const previewOrigin = yield* previews.origin
    const linkHost = options.host === "0.0.0.0" || options.host === "::" ? "localhost" : options.host
    const links = Links.make(`${previewOrigin ?? `http://${linkHost.includes(":") ? `[${linkHost}]` : linkHost}:${port}`}/terminal`)
    const withLinks = Effect.provideService(TerminalLinks, links)
    const sessions = yield* HttpSessions.make({
      idleTimeout: Duration.millis(options.sessionTimeoutMs),
      maxSessions: options.maxSessions,
      maxSessionsPerPrincipal: options.maxSessionsPerPrincipal ?? options.maxSessions,
      serve: (transport, id, onConnected) => withLinks(serve(Context.get(context, Settings), ready(context), transport, id, onConnected))
    })

    // 2026-07-28: a server instance per request, its session from the principal and the client's key.
    const services = ready(context)
    const leases = yield* SessionLeases.make({
      idleTimeout: Duration.millis(options.sessionTimeoutMs),
      maxPerPrincipal: options.maxSessionsPerPrincipal ?? options.maxSessions,
      release: (session) => releaseSession(services, session)
    })
    // Task ids are signed with a key derived from the tokens: replicas that share them answer each other's tasks.
    const tasks = yield* Tasks.make(Tasks.defaults, TaskIds.keyFrom(tokens.map((entry) => entry.token)))
    const parts = yield* withLinks(makeParts(Context.get(context, Settings), services, tasks))
    const principalOf = (ctx: ServerContext) => ctx.http?.authInfo?.clientId ?? BearerAuth.anonymous
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const maxBodyBytes = options.maxBodyBytes ?? maxMessageBytes
    const stateless = createMcpHandler(
      () =>
        buildServer(parts, (ctx) => leases.claim(principalOf(ctx), ctx.mcpReq._meta?.[SessionLeases.sessionKeyMeta])),
      {
        legacy: "reject",
        maxRequestBodySize: maxBodyBytes,
        onerror: (error) => runFork(Effect.logDebug(`MCP (2026-07-28): ${error.message}`))
      }
    )
    yield* Effect.addFinalizer(() => Effect.promise(() => stateless.close()).pipe(Effect.timeout("5 seconds"), Effect.ignore))
    const modern: McpEndpoint.ModernEndpoint = (request, body, principal) =>
      stateless.fetch(request, { parsedBody: body, authInfo: { token: "", clientId: principal, scopes: [] } })

    const budget = BodyBudget.make(options.bodyMemory ?? defaultBodyMemory)
    const mcp = McpEndpoint.handler(sessions, modern, budget, maxBodyBytes)
    const terminalRoutes = yield* TerminalPage.routes(links)
    if (previewOrigin !== undefined) {
      const page = HttpRouter.empty.pipe(terminalRoutes, Effect.catchTag("RouteNotFound", () => Effect.succeed(notFound)))
      yield* previews.mountTerminal(yield* NodeHttpServer.makeHandler(page))
    }
    const router = HttpRouter.empty.pipe(
      previewOrigin === undefined ? terminalRoutes : TerminalPage.refused(previewOrigin),
      HttpRouter.get("/healthz", HttpServerResponse.unsafeJson({ status: "ok" })),
      HttpRouter.get(
        "/",
        HttpServerResponse.unsafeJson({
          name: serverInfo.name,
          version: serverInfo.version,
          mcp_endpoint: "/mcp",
          dashboard_resource: Dashboard.resourceUri,
          terminal_page: "/terminal (with a link from the terminal tool)",
          health: "/healthz"
        })
      ),
      // Previews have an origin of their own (--preview-port): a page there can never act with this one's credentials.
      HttpRouter.all("/p/*", HttpServerResponse.unsafeJson({ error: "preview URLs are served on the preview origin only" }, { status: 403 })),
      HttpRouter.all("/mcp", tokens.length === 0 ? BearerAuth.unauthenticated(mcp) : BearerAuth.middleware(tokens)(mcp))
    )
    const app = router.pipe(
      Effect.catchTag("RouteNotFound", () => Effect.succeed(notFound)),
      OriginGuard.middleware(loopback)
    )
    // No HTTP request spans: a tool call's span is a child of the client's span from the MCP request's
    // `_meta` (one HTTP request may carry several MCP messages), not of the HTTP request.
    yield* server.serve(app).pipe(HttpMiddleware.withTracerDisabledWhenEffect(() => true))

    yield* Effect.logInfo(
      `MCP over HTTP at http://${options.host.includes(":") ? `[${options.host}]` : options.host}:${port}/mcp` +
        (tokens.length === 0 ? " (no auth)" : tokens.length === 1 ? " (bearer auth)" : ` (bearer auth, ${tokens.length} principals)`)
    )
    return { port, sessions: sessions.size }
  })

/** Serves HTTP until interrupted (SIGINT/SIGTERM): then every session closes and its computers go. */
export const serveHttpForever = (options: HttpOptions) =>
  Effect.scoped(Effect.zipRight(serveHttp(options), Effect.never)).pipe(Effect.onExit((exit) =>
    Exit.isInterrupted(exit) ? Effect.logInfo("HTTP server stopped") : Effect.void
  ))
