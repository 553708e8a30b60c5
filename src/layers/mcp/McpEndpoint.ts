import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import type { IncomingMessage } from "node:http"
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
 * Reads a JSON body of at most `limit` bytes, refusing a larger one as soon as it shows: by its
 * Content-Length, or when a chunked body passes the limit. The rest is not kept (and the 413 closes
 * the connection, after a bounded linger), so a client can neither fill memory nor keep the server
 * reading for long.
 */
const readJson = (request: HttpServerRequest.HttpServerRequest, limit: number) => {
  const incoming = NodeHttpServerRequest.toIncomingMessage(request)
  return Effect.gen(function*() {
    const declared = Number(request.headers["content-length"] ?? Number.NaN)
    if (declared > limit) return yield* new BodyTooLarge({ limit })
    const body = yield* Effect.async<Buffer, BodyTooLarge | BadBody>((resume) => {
      const parts: Array<Buffer> = []
      let size = 0
      const stop = () => {
        incoming.off("data", onData)
        incoming.off("end", onEnd)
        incoming.off("error", onError)
      }
      const onData = (chunk: Buffer) => {
        size += chunk.length
        if (size <= limit) return void parts.push(chunk)
        stop()
        resume(Effect.fail(new BodyTooLarge({ limit })))
      }
      const onEnd = () => {
        stop()
        resume(Effect.succeed(Buffer.concat(parts, size)))
      }
      const onError = () => {
        stop()
        resume(Effect.fail(new BadBody({ message: "the request body could not be read" })))
      }
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
  }).pipe(Effect.tapErrorTag("BodyTooLarge", () => linger(incoming)))
}

/** The web-standard request the SDK transport reads: method and headers (the body is given parsed). */
const toWeb = (request: HttpServerRequest.HttpServerRequest) => {
  const headers = new Headers()
  for (const [name, value] of Object.entries(request.headers)) headers.set(name, value)
  return new Request(new URL(request.url, "http://localhost"), { method: request.method, headers })
}

/**
 * Serves `/mcp`: a request with a session id goes to that session's transport; a request without
 * one must be `initialize`, which opens a session. Responses stream (SSE) as the SDK writes them;
 * if the client goes away, the stream is cancelled.
 */
export const handler = (sessions: HttpSessions, maxBodyBytes: number) => {
  const forward = (session: HttpSession, request: HttpServerRequest.HttpServerRequest, body: unknown) =>
    Effect.gen(function*() {
      yield* sessions.touch(session)
      const response = yield* Effect.promise(() => session.transport.handleRequest(toWeb(request), { parsedBody: body }))
      yield* sessions.touch(session)
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
    })

  return Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const sessionId = request.headers["mcp-session-id"]
    if (sessionId !== undefined) {
      const session = sessions.get(sessionId)
      if (Option.isNone(session)) return rpcError(404, -32001, "unknown or expired MCP session; initialize a new one")
      const body = request.method === "POST" ? yield* readJson(request, maxBodyBytes) : undefined
      return yield* forward(session.value, request, body)
    }
    if (request.method !== "POST") return rpcError(400, -32000, "missing Mcp-Session-Id header")
    const body = yield* readJson(request, maxBodyBytes)
    if (!isInitializeRequest(body)) return rpcError(400, -32000, "the first request of a session must be initialize")
    const session = yield* sessions.open
    return yield* forward(session, request, body)
  }).pipe(
    Effect.catchTags({
      BodyTooLarge: (error) =>
        Effect.succeed(
          HttpServerResponse.setHeader(
            rpcError(413, -32600, `request body over ${error.limit} bytes (the limit of one MCP message)`),
            "connection",
            "close"
          )
        ),
      BadBody: (error) => Effect.succeed(rpcError(400, -32700, `parse error: ${error.message}`)),
      TooManySessions: (error) => Effect.succeed(rpcError(503, -32000, error.message))
    })
  )
}
