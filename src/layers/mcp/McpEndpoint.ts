import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { isInitializeRequest, isLegacyRequest } from "@modelcontextprotocol/server"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type { IncomingMessage } from "node:http"
import { Principal } from "./BearerAuth.js"
import type { BodyBudget, BodyOverBudget, Reservation } from "./BodyBudget.js"
import type { HttpSession, HttpSessions } from "./HttpSessions.js"

/** The request body is over the limit. */
class BodyTooLarge extends Schema.TaggedError<BodyTooLarge>()("BodyTooLarge", { limit: Schema.Number }) {}
/** The request body could not be read or is not JSON. */
class BadBody extends Schema.TaggedError<BadBody>()("BadBody", { message: Schema.String }) {}

const rpcError = (status: number, code: number, message: string) =>
  HttpServerResponse.unsafeJson({ jsonrpc: "2.0", error: { code, message }, id: null }, { status })

/** How long the rest of a refused body is read and dropped (see `linger`). */
const LINGER = "5 seconds"

/**
 * A lingering close, as web servers make one after an early refusal: the client may still be
 * sending the body it was refused. Closed with those bytes unread, the socket would reset the
 * connection, and a client still writing would see the reset (EPIPE, ECONNRESET) instead of the
 * 413. So the 413 is sent and the connection half-closed; the rest of the body is read and dropped
 * (the request is not read by anyone: Node drains it) until the client ends its side, or for
 * LINGER at most, then the socket is closed.
 */
const linger = (incoming: IncomingMessage) =>
  Effect.gen(function*() {
    const socket = incoming.socket
    // Node ends a `connection: close` response with destroySoon(): end, then destroy once written.
    socket.destroySoon = () => {
      if (socket.writable) socket.end()
    }
    incoming.resume()
    yield* Effect.sleep(LINGER).pipe(Effect.andThen(Effect.sync(() => socket.destroy())), Effect.forkDaemon)
  })

/**
 * What a body costs in memory, per byte, while it is read and parsed: its bytes, their decoded text
 * and the parsed value are all alive while `JSON.parse` runs (measured: four 30 MiB bodies read at
 * once took the server from 79 to 410 MiB, 2.75 times their size).
 */
export const memoryPerBodyByte = 3

/**
 * A chunked body is counted as it comes up to this size; past it, it is charged as the largest
 * message at once. Its size is unknown until it ends, and a large body refused half-read would
 * leave its chunks as garbage: with forty chunked 30 MiB bodies at once, counting every chunk let the
 * server grow by 375 MiB, charging the largest message past 1 MiB by 230 MiB (256 MiB budget).
 */
const smallChunkedBody = 1024 * 1024

/**
 * Reads a JSON body of at most `limit` bytes, refusing a larger one as soon as it shows: by its
 * Content-Length, or when a chunked body passes the limit. What it will cost in memory is taken
 * from the budgets before its bytes are kept (at once for a declared length, else chunk by chunk),
 * and a body the budgets cannot hold is refused the same way. The rest is not kept (and the refusal closes the
 * connection, after a bounded linger), so a client can neither fill memory nor keep the server
 * reading for long.
 */
const readJson = (request: HttpServerRequest.HttpServerRequest, limit: number, reservation: Reservation) => {
  const incoming = NodeHttpServerRequest.toIncomingMessage(request)
  return Effect.gen(function*() {
    const declared = Number(request.headers["content-length"] ?? Number.NaN)
    if (declared > limit) return yield* new BodyTooLarge({ limit })
    if (declared > 0) {
      const refused = reservation.grow(declared * memoryPerBodyByte)
      if (refused !== undefined) return yield* refused
    }
    const body = yield* Effect.async<Buffer, BodyTooLarge | BodyOverBudget | BadBody>((resume) => {
      // A declared body is copied into one buffer of its length as it arrives (Node stops a body at its
      // Content-Length); a chunked one is kept in chunks, charged before they are kept, and joined.
      const whole = declared > 0 ? Buffer.allocUnsafe(declared) : undefined
      let parts: Array<Buffer> = []
      let size = 0
      const stop = () => {
        incoming.off("data", onData)
        incoming.off("end", onEnd)
        incoming.off("error", onError)
      }
      const fail = (error: BodyTooLarge | BodyOverBudget | BadBody) => {
        stop()
        parts = []
        resume(Effect.fail(error))
      }
      const onData = (chunk: Buffer) => {
        if (whole !== undefined) {
          chunk.copy(whole, size)
          size += chunk.length
          return
        }
        size += chunk.length
        if (size > limit) return fail(new BodyTooLarge({ limit }))
        const cost = (size <= smallChunkedBody ? size : limit) * memoryPerBodyByte
        const refused = cost > reservation.held() ? reservation.grow(cost - reservation.held()) : undefined
        if (refused !== undefined) return fail(refused)
        parts.push(chunk)
      }
      const onEnd = () => {
        stop()
        if (whole !== undefined) return resume(Effect.succeed(whole.subarray(0, size)))
        const joined = Buffer.concat(parts, size)
        // The chunks are garbage now: the body is held once while it is decoded, not twice.
        parts = []
        resume(Effect.succeed(joined))
      }
      const onError = () => fail(new BadBody({ message: "the request body could not be read" }))
      incoming.on("data", onData)
      incoming.on("end", onEnd)
      incoming.on("error", onError)
      return Effect.sync(stop)
    })
    if (body.length === 0) return undefined
    return yield* Effect.try({
      try: () => JSON.parse(body.toString("utf8")) as unknown,
      catch: () => new BadBody({ message: "the request body is not valid JSON" })
    })
  }).pipe(Effect.tapErrorTag("BodyTooLarge", () => linger(incoming)), Effect.tapErrorTag("BodyOverBudget", () => linger(incoming)))
}

/**
 * The web-standard request the SDK reads: method and headers (the body is given parsed); `signal`
 * aborts it when the client goes away before it is answered.
 */
const toWeb = (request: HttpServerRequest.HttpServerRequest, signal?: AbortSignal) => {
  const headers = new Headers()
  for (const [name, value] of Object.entries(request.headers)) headers.set(name, value)
  return new Request(new URL(request.url, "http://localhost"), { method: request.method, headers, ...(signal ? { signal } : {}) })
}

/** The SDK's web response as ours: a body streams (SSE) as the SDK writes it, cancelled if the client goes. */
const fromWeb = (response: Response) => {
  const headers: Record<string, string> = {}
  response.headers.forEach((value, name) => {
    headers[name] = value
  })
  if (response.body === null) return HttpServerResponse.empty({ status: response.status, headers })
  const stream = Stream.fromReadableStream({ evaluate: () => response.body!, onError: (error) => error })
  return HttpServerResponse.stream(stream, {
    status: response.status,
    headers,
    contentType: response.headers.get("content-type") ?? undefined
  })
}

/** A refusal that closes the connection: the client may still be sending what was refused. */
const closing = (response: HttpServerResponse.HttpServerResponse) => HttpServerResponse.setHeader(response, "connection", "close")

/** Serves one 2026-07-28 request of a principal (its body given parsed). */
export type ModernEndpoint = (request: Request, body: unknown, principal: string) => Promise<Response>

/**
 * Serves `/mcp` for both protocol eras. A 2026-07-28 request (its `_meta` carries the protocol
 * version) goes to the stateless endpoint, whatever replica it reaches. A 2025-era request with a
 * session id goes to that session's transport (a session answers only the principal that opened it);
 * one without must be `initialize`, which opens a session. Responses stream (SSE) as the SDK writes
 * them; if the client goes away, the stream is cancelled. A body holds its share of the memory
 * budgets until its request has been answered.
 */
export const handler = (sessions: HttpSessions, modern: ModernEndpoint, budget: BodyBudget, maxBodyBytes: number) => {
  const forward = (session: HttpSession, request: HttpServerRequest.HttpServerRequest, body: unknown) =>
    Effect.gen(function*() {
      yield* sessions.touch(session)
      const response = yield* Effect.promise(() => session.transport.handleRequest(toWeb(request), { parsedBody: body }))
      yield* sessions.touch(session)
      return fromWeb(response)
    })

  return Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const principal = yield* Principal
    const reservation = yield* budget.reserve(principal)
    const sessionId = request.headers["mcp-session-id"]
    if (sessionId !== undefined) {
      const session = Option.filter(sessions.get(sessionId), (found) => found.principal === principal)
      if (Option.isNone(session)) return rpcError(404, -32001, "unknown or expired MCP session; initialize a new one")
      const body = request.method === "POST" ? yield* readJson(request, maxBodyBytes, reservation) : undefined
      return yield* forward(session.value, request, body)
    }
    if (request.method !== "POST") return rpcError(400, -32000, "missing Mcp-Session-Id header")
    const body = yield* readJson(request, maxBodyBytes, reservation)
    const legacy = yield* Effect.promise(() => isLegacyRequest(toWeb(request), body ?? null, { maxRequestBodySize: maxBodyBytes }))
    if (!legacy) return fromWeb(yield* Effect.promise((signal) => modern(toWeb(request, signal), body, principal)))
    if (!isInitializeRequest(body)) return rpcError(400, -32000, "the first request of a session must be initialize")
    const session = yield* sessions.open(principal)
    return yield* forward(session, request, body)
  }).pipe(
    Effect.scoped,
    Effect.catchTags({
      BodyTooLarge: (error) =>
        Effect.succeed(closing(rpcError(413, -32600, `request body over ${error.limit} bytes (the limit of one MCP message)`))),
      // Memory frees as the bodies being read are answered: worth a retry soon.
      BodyOverBudget: (error) =>
        Effect.succeed(HttpServerResponse.setHeader(closing(rpcError(503, -32000, error.message)), "retry-after", "1")),
      BadBody: (error) => Effect.succeed(rpcError(400, -32700, `parse error: ${error.message}`)),
      TooManySessions: (error) => Effect.succeed(rpcError(503, -32000, error.message))
    })
  )
}
