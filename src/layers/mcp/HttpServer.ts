import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js"
import { Clock, Deferred, Duration, Effect, Exit, FiberMap, Runtime, Schedule, Schema } from "effect"
import { createHash, randomUUID, timingSafeEqual } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { Computers } from "../../services/Computers.js"
import type { Files } from "../../services/Files.js"
import type { Processes } from "../../services/Processes.js"
import type { Settings } from "../../services/Settings.js"
import * as Dashboard from "./Dashboard.js"
import { serve, serverInfo } from "./McpServer.js"

export interface HttpOptions {
  readonly host: string
  readonly port: number
  /** An MCP session with no request for this long is closed (its temporary computers removed). */
  readonly sessionTimeoutMs: number
  /** Bearer token required on /mcp; undefined = no auth (only allowed on loopback, or when told). */
  readonly authToken: string | undefined
  readonly allowUnauthenticated: boolean
  /** Most concurrent MCP sessions. */
  readonly maxSessions: number
  /** Largest request body, bytes. */
  readonly maxBodyBytes: number
}

/** The HTTP server cannot start with these options. */
export class HttpStartError extends Schema.TaggedError<HttpStartError>()("HttpStartError", {
  message: Schema.String
}) {}

const loopbackHosts = new Set(["127.0.0.1", "localhost", "::1", "[::1]"])
export const isLoopback = (host: string) => loopbackHosts.has(host) || host.startsWith("127.")

const digest = (value: string) => createHash("sha256").update(value).digest()

/** Constant-time comparison of a bearer token (hashing first makes the lengths equal). */
export const tokenMatches = (expected: string, header: string | undefined): boolean => {
  const match = /^Bearer\s+(.+)$/i.exec(header ?? "")
  return timingSafeEqual(digest(expected), digest(match?.[1]?.trim() ?? "")) && match !== null
}

const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { "content-type": "application/json", ...headers })
  res.end(JSON.stringify(body))
}

const rpcError = (res: ServerResponse, status: number, message: string, headers: Record<string, string> = {}) =>
  json(res, status, { jsonrpc: "2.0", error: { code: -32000, message }, id: null }, headers)

const readBody = (req: IncomingMessage, limit: number) =>
  new Promise<unknown>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    req.on("data", (chunk: Buffer) => {
      size += chunk.length
      if (size > limit) {
        reject(new Error(`request body over ${limit} bytes`))
        req.destroy()
      } else chunks.push(chunk)
    })
    req.on("end", () => {
      try {
        resolve(size === 0 ? undefined : JSON.parse(Buffer.concat(chunks).toString("utf8")))
      } catch {
        reject(new Error("request body is not valid JSON"))
      }
    })
    req.on("error", reject)
  })

interface Session {
  readonly transport: StreamableHTTPServerTransport
  lastActivity: number
  inFlight: number
}

/**
 * Serves MCP over Streamable HTTP at `/mcp`, with `/healthz` and `/` beside it. Every MCP session
 * is a fiber of this server's FiberMap: it ends when the client deletes it, when it has been idle
 * for the session timeout, or when the server stops — and its temporary computers go with it.
 */
export const serveHttp = (options: HttpOptions) =>
  Effect.gen(function*() {
    if (!isLoopback(options.host) && options.authToken === undefined && !options.allowUnauthenticated) {
      return yield* new HttpStartError({
        message: `refusing to serve on ${options.host} without authentication: set --auth-token (or ` +
          `KILNTAINERS_AUTH_TOKEN), bind to 127.0.0.1, or pass --allow-unauthenticated-http if something in front of ` +
          `this server authenticates`
      })
    }
    const runtime = yield* Effect.runtime<Processes | Computers | Files | Settings>()
    const runFork = Runtime.runFork(runtime)
    const sessions = new Map<string, Session>()
    const fibers = yield* FiberMap.make<string>()
    const loopback = isLoopback(options.host)

    const now = () => Date.now()

    /** DNS rebinding: on loopback, only loopback Host names and Origins are served. */
    const hostAllowed = (req: IncomingMessage) => {
      if (!loopback) return true
      const host = (req.headers.host ?? "").replace(/:\d+$/, "")
      if (!loopbackHosts.has(host)) return false
      const origin = req.headers.origin
      if (origin === undefined || origin === "null") return true
      try {
        return loopbackHosts.has(new URL(origin).hostname)
      } catch {
        return false
      }
    }

    const openSession = (body: unknown) =>
      Effect.gen(function*() {
        const id = randomUUID()
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => id })
        const session: Session = { transport, lastActivity: now(), inFlight: 0 }
        sessions.set(id, session)
        const connected = yield* Deferred.make<void>()
        yield* FiberMap.run(
          fibers,
          id,
          serve(transport, id, Deferred.succeed(connected, undefined)).pipe(
            Effect.ensuring(Effect.sync(() => sessions.delete(id))),
            Effect.ensuring(Effect.logDebug(`MCP session ${id} ended`))
          )
        )
        yield* Deferred.await(connected)
        yield* Effect.logDebug(`MCP session ${id} opened`)
        return { id, session, body }
      })

    const handleMcp = async (req: IncomingMessage, res: ServerResponse) => {
      const sessionId = req.headers["mcp-session-id"]
      if (typeof sessionId === "string") {
        const session = sessions.get(sessionId)
        if (!session) return rpcError(res, 404, "unknown or expired MCP session; initialize a new one")
        session.lastActivity = now()
        // A standalone GET stream only waits for notifications: it does not keep a session busy.
        const counts = req.method !== "GET"
        if (counts) session.inFlight++
        try {
          const body = req.method === "POST" ? await readBody(req, options.maxBodyBytes) : undefined
          await session.transport.handleRequest(req, res, body)
        } finally {
          if (counts) session.inFlight--
          session.lastActivity = now()
        }
        return
      }
      if (req.method !== "POST") return rpcError(res, 400, "missing Mcp-Session-Id header")
      const body = await readBody(req, options.maxBodyBytes)
      if (!isInitializeRequest(body)) return rpcError(res, 400, "the first request of a session must be initialize")
      if (sessions.size >= options.maxSessions) return rpcError(res, 503, "too many MCP sessions; try again later")
      const { session } = await Runtime.runPromise(runtime)(openSession(body))
      session.inFlight++
      try {
        await session.transport.handleRequest(req, res, body)
      } finally {
        session.inFlight--
        session.lastActivity = now()
      }
    }

    const handle = async (req: IncomingMessage, res: ServerResponse) => {
      const path = (req.url ?? "/").split("?")[0]
      if (!hostAllowed(req)) return json(res, 403, { error: "forbidden host or origin" })
      if (path === "/healthz" && req.method === "GET") return json(res, 200, { status: "ok", sessions: sessions.size })
      if (path === "/" && req.method === "GET") {
        return json(res, 200, {
          name: serverInfo.name,
          version: serverInfo.version,
          mcp_endpoint: "/mcp",
          dashboard_resource: Dashboard.resourceUri,
          health: "/healthz"
        })
      }
      if (path !== "/mcp") return json(res, 404, { error: "not found" })
      if (options.authToken !== undefined && !tokenMatches(options.authToken, req.headers.authorization)) {
        return json(res, 401, { error: "unauthorized" }, { "www-authenticate": 'Bearer realm="kilntainers"' })
      }
      await handleMcp(req, res)
    }

    const server = createServer((req, res) => {
      handle(req, res).catch((error: unknown) => {
        runFork(Effect.logWarning(`HTTP request failed: ${error instanceof Error ? error.message : String(error)}`))
        if (!res.headersSent) rpcError(res, 400, error instanceof Error ? error.message : "bad request")
        else res.end()
      })
    })

    yield* Effect.acquireRelease(
      Effect.async<void, HttpStartError>((resume) => {
        server.once("error", (error) => resume(Effect.fail(new HttpStartError({ message: `cannot listen on ${options.host}:${options.port}: ${error.message}` }))))
        server.listen(options.port, options.host, () => resume(Effect.void))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        }).pipe(Effect.timeout(Duration.seconds(5)), Effect.interruptible, Effect.ignore)
    )
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : options.port
    yield* Effect.logInfo(
      `MCP over HTTP at http://${options.host.includes(":") ? `[${options.host}]` : options.host}:${port}/mcp` +
        (options.authToken !== undefined ? " (bearer auth)" : " (no auth)")
    )

    // Idle sessions close: the clients that vanished without deleting theirs are the usual case.
    yield* Effect.gen(function*() {
      const at = yield* Clock.currentTimeMillis
      for (const [id, session] of sessions) {
        if (session.inFlight === 0 && at - session.lastActivity >= options.sessionTimeoutMs) {
          yield* Effect.logInfo(`closing MCP session ${id}: idle for ${Math.round((at - session.lastActivity) / 1000)} s`)
          sessions.delete(id)
          yield* Effect.promise(() => session.transport.close()).pipe(Effect.ignore)
        }
      }
    }).pipe(
      Effect.repeat(Schedule.spaced(Duration.millis(Math.max(100, Math.min(5_000, options.sessionTimeoutMs / 4))))),
      Effect.forkScoped
    )
    return { port, sessions: () => sessions.size }
  })

/** Serves HTTP until interrupted (SIGINT/SIGTERM): then every session closes and its computers go. */
export const serveHttpForever = (options: HttpOptions) =>
  Effect.scoped(Effect.zipRight(serveHttp(options), Effect.never)).pipe(Effect.onExit((exit) =>
    Exit.isInterrupted(exit) ? Effect.logInfo("HTTP server stopped") : Effect.void
  ))
