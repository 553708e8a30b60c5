import {
  isJSONRPCErrorResponse,
  isJSONRPCNotification,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  type JSONRPCMessage,
  type MessageExtraInfo,
  type RequestId,
  type Transport,
  type TransportSendOptions,
  WebStandardStreamableHTTPServerTransport
} from "@modelcontextprotocol/server"
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as FiberMap from "effect/FiberMap"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { randomUUID } from "node:crypto"

/** An MCP session over HTTP: one transport and one MCP server, served by a fiber of the registry. */
export interface HttpSession {
  readonly id: string
  /** Who opened it: only this principal's requests reach it. */
  readonly principal: string
  /** Where the session's HTTP requests go. */
  readonly transport: WebStandardStreamableHTTPServerTransport
}

interface Entry extends HttpSession {
  lastActivity: number
  /** Requests the session's server has not answered yet (and that were not cancelled). */
  readonly pending: Set<RequestId>
  /** The last pending request was settled since the reaper looked: idleness starts then. */
  settled: boolean
}

/**
 * The transport the MCP server sees: the session's HTTP transport, with the requests in progress
 * counted. A session is busy while its server handles a request (a long `wait`, say), however the
 * HTTP side looks: a cancelled request's stream may stay open without ever getting an answer.
 */
class CountingTransport implements Transport {
  onclose?: (() => void) | undefined
  onerror?: ((error: Error) => void) | undefined
  onmessage?: (<T extends JSONRPCMessage>(message: T, extra?: MessageExtraInfo) => void) | undefined

  constructor(private readonly entry: Entry) {}

  get sessionId() {
    return this.entry.transport.sessionId
  }

  private settle(id: RequestId) {
    if (this.entry.pending.delete(id) && this.entry.pending.size === 0) this.entry.settled = true
  }

  async start() {
    const inner = this.entry.transport
    inner.onclose = () => this.onclose?.()
    inner.onerror = (error) => this.onerror?.(error)
    inner.onmessage = (message, extra) => {
      if (isJSONRPCRequest(message)) this.entry.pending.add(message.id)
      else if (isJSONRPCNotification(message) && message.method === "notifications/cancelled") {
        const id = (message.params as { requestId?: RequestId } | undefined)?.requestId
        if (id !== undefined) this.settle(id)
      }
      this.onmessage?.(message, extra)
    }
    await inner.start()
  }

  // The server tells its transport which revisions it speaks (the transport checks the header by them).
  setSupportedProtocolVersions(versions: Array<string>) {
    this.entry.transport.setSupportedProtocolVersions(versions)
  }

  send(message: JSONRPCMessage, options?: TransportSendOptions) {
    if ((isJSONRPCResultResponse(message) || isJSONRPCErrorResponse(message)) && message.id !== undefined) this.settle(message.id)
    const relatedRequestId = options?.relatedRequestId
    return this.entry.transport.send(message, relatedRequestId === undefined ? undefined : { relatedRequestId })
  }

  close() {
    return this.entry.transport.close()
  }
}

/** Every session slot is taken, the server's or the principal's. */
export class TooManySessions extends Schema.TaggedError<TooManySessions>()("TooManySessions", {
  max: Schema.Number,
  /** Set when the principal's own cap was reached, not the server's. */
  principal: Schema.optional(Schema.String)
}) {
  override get message() {
    return this.principal === undefined
      ? `too many MCP sessions (${this.max}); try again later`
      : `too many MCP sessions for ${this.principal} (${this.max}, its cap); close one or try again later`
  }
}

export interface HttpSessionsOptions {
  /** A session with no request in progress and no HTTP request for this long is closed. */
  readonly idleTimeout: Duration.Duration
  readonly maxSessions: number
  /** Most sessions of one principal, so that one client cannot take every slot. */
  readonly maxSessionsPerPrincipal: number
  /** Serves one session until its transport closes; `onConnected` once the server is attached. */
  readonly serve: (transport: Transport, id: string, onConnected: Effect.Effect<void>) => Effect.Effect<void>
}

/**
 * The MCP sessions of one HTTP server. Each session is a fiber of a scoped FiberMap: it ends when
 * the client deletes it, when it has been idle for the timeout (the reaper, on `Clock`), or when
 * the registry's scope closes, and its temporary computers go with it.
 */
export const make = (options: HttpSessionsOptions) =>
  Effect.gen(function*() {
    const entries = new Map<string, Entry>()
    const fibers = yield* FiberMap.make<string>()
    const idleMs = Duration.toMillis(options.idleTimeout)

    /** Sessions per principal, counted as entries come and go. */
    const perPrincipal = new Map<string, number>()
    const add = (entry: Entry) => {
      entries.set(entry.id, entry)
      perPrincipal.set(entry.principal, (perPrincipal.get(entry.principal) ?? 0) + 1)
    }
    const drop = (id: string) => {
      const entry = entries.get(id)
      if (entry === undefined) return
      entries.delete(id)
      const left = (perPrincipal.get(entry.principal) ?? 1) - 1
      if (left > 0) perPrincipal.set(entry.principal, left)
      else perPrincipal.delete(entry.principal)
    }

    const open = (principal: string) => Effect.gen(function*() {
      if (entries.size >= options.maxSessions) return yield* new TooManySessions({ max: options.maxSessions })
      if ((perPrincipal.get(principal) ?? 0) >= options.maxSessionsPerPrincipal) {
        return yield* new TooManySessions({ max: options.maxSessionsPerPrincipal, principal })
      }
      const id = randomUUID()
      const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: () => id })
      const entry: Entry = { id, principal, transport, lastActivity: yield* Clock.currentTimeMillis, pending: new Set(), settled: false }
      add(entry)
      const connected = yield* Deferred.make<void>()
      yield* FiberMap.run(
        fibers,
        id,
        options.serve(new CountingTransport(entry), id, Deferred.succeed(connected, undefined)).pipe(
          Effect.ensuring(Effect.sync(() => drop(id))),
          Effect.ensuring(Deferred.succeed(connected, undefined)),
          Effect.ensuring(Effect.logDebug(`MCP session ${id} ended`))
        )
      )
      yield* Deferred.await(connected)
      yield* Effect.logDebug(`MCP session ${id} opened`)
      return entry as HttpSession
    })

    const get = (id: string): Option.Option<HttpSession> => Option.fromNullable(entries.get(id))

    /** Records an HTTP request of the session: its idle time starts again. */
    const touch = (session: HttpSession) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Effect.sync(() => {
          const entry = entries.get(session.id)
          if (entry) entry.lastActivity = now
        }))

    const reap = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      for (const entry of [...entries.values()]) {
        if (entry.settled) {
          entry.settled = false
          entry.lastActivity = Math.max(entry.lastActivity, now)
        }
        if (entry.pending.size === 0 && now - entry.lastActivity >= idleMs) {
          yield* Effect.logInfo(`closing MCP session ${entry.id}: idle for ${Math.round((now - entry.lastActivity) / 1000)} s`)
          drop(entry.id)
          yield* FiberMap.remove(fibers, entry.id)
        }
      }
    })
    // Clients that vanish without deleting their session are the usual case.
    yield* reap.pipe(
      Effect.repeat(Schedule.spaced(Duration.millis(Math.max(100, Math.min(5_000, idleMs / 4))))),
      Effect.forkScoped
    )

    return { open, get, touch, size: Effect.sync(() => entries.size) } as const
  })

export type HttpSessions = Effect.Effect.Success<ReturnType<typeof make>>
