/**
 * The preview listener (`--preview-host`/`--preview-port`): an origin of its own, apart from /mcp's,
 * that serves `/p/<token>/…` — verified by the Previews service — by proxying HTTP and WebSocket
 * traffic to the port inside the computer through its agent's relay (the computer has no network of
 * its own), and the terminal page of signed links (`/terminal…`, the HTTP server's handler) when the
 * HTTP server runs. Nothing else is served here, /mcp included, and the server's own credentials
 * (Authorization, Proxy-Authorization) never go in. Bodies and connections are bounded.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberSet from "effect/FiberSet"
import * as Schema from "effect/Schema"
import { createServer, type IncomingHttpHeaders, type IncomingMessage, request as httpRequest, type ServerResponse } from "node:http"
import type { Duplex } from "node:stream"
import type { NodeHandler, Previews, PreviewTarget } from "../../services/Previews.js"

export interface PreviewServerOptions {
  readonly host: string
  readonly port: number
  readonly maxBodyBytes: number
  /** The terminal page's handler, when the HTTP server mounted it (Previews.mountTerminal). */
  readonly terminal?: { readonly handler: NodeHandler | undefined } | undefined
}

const TERMINAL = /^\/terminal(?:[/?#]|$)/

export class PreviewStartError extends Schema.TaggedError<PreviewStartError>()("PreviewStartError", {
  message: Schema.String
}) {}

/** Headers that belong to one hop, or carry the caller's credentials for this server: never passed on. */
const DROPPED = new Set([
  "authorization",
  "proxy-authorization",
  "proxy-connection",
  "connection",
  "keep-alive",
  "te",
  "trailer",
  "upgrade",
  "host"
])

const requestHeaders = (headers: IncomingHttpHeaders, port: number): Record<string, string | Array<string>> => {
  const out: Record<string, string | Array<string>> = {}
  for (const [name, value] of Object.entries(headers)) if (value !== undefined && !DROPPED.has(name)) out[name] = value
  out["host"] = `127.0.0.1:${port}`
  // One request per relay stream: the stream ends with the answer.
  out["connection"] = "close"
  return out
}

const responseHeaders = (headers: IncomingHttpHeaders): Record<string, string | Array<string>> => {
  const out: Record<string, string | Array<string>> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !DROPPED.has(name) && name !== "transfer-encoding") out[name] = value
  }
  // The token is in the path: it must not leave in a Referer to other sites.
  out["referrer-policy"] = "no-referrer"
  return out
}

const answer = (response: ServerResponse, status: number, text: string) => {
  if (response.headersSent) return void response.destroy()
  response.writeHead(status, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store", connection: "close" })
  response.end(`${text}\n`)
}

/** The path inside the computer: what follows the prefix (a bare prefix is answered by a redirect). */
const innerPath = (url: string, target: PreviewTarget) => url.slice(target.prefix.length)

interface Admitted {
  readonly target: PreviewTarget
  readonly release: () => void
  readonly upstream: Duplex
}

/** A preview's verified target and a slot among its connections, or the answer (status, text) that refuses it. */
const admit = (previews: Previews["Type"], url: string, close: () => void) =>
  Effect.gen(function*(): Effect.fn.Return<Either.Either<Admitted, readonly [number, string]>> {
    const verified = yield* Effect.either(previews.verify(url))
    if (Either.isLeft(verified)) {
      return Either.left([verified.left === "not a preview URL" ? 404 : 403, `preview refused: ${verified.left}`])
    }
    const release = yield* previews.track(verified.right.id, close)
    if (release === undefined) return Either.left([503, "preview refused: too many connections to this preview"])
    const upstream = yield* Effect.either(verified.right.open)
    if (Either.isLeft(upstream)) {
      release()
      return Either.left([502, `preview unavailable: ${upstream.left.message}`])
    }
    return Either.right({ target: verified.right, release, upstream: upstream.right })
  })

/** Proxies one HTTP request; resolves when it is done either way. */
const proxy = (request: IncomingMessage, response: ServerResponse, target: PreviewTarget, upstream: Duplex, maxBodyBytes: number) =>
  Effect.async<void>((resume) => {
    let done = false
    const finish = () => {
      if (done) return
      done = true
      upstream.destroy()
      resume(Effect.void)
    }
    const out = httpRequest({
      method: request.method,
      path: innerPath(request.url ?? "/", target),
      headers: requestHeaders(request.headers, target.port),
      createConnection: () => upstream as any
    })
    out.on("response", (answered) => {
      response.writeHead(answered.statusCode ?? 502, responseHeaders(answered.headers))
      answered.pipe(response)
      answered.on("error", () => response.destroy())
    })
    out.on("error", (error) => {
      answer(response, 502, `preview unavailable: ${error.message}`)
      finish()
    })
    let bytes = 0
    request.on("data", (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes <= maxBodyBytes) return
      answer(response, 413, `preview refused: a request body over ${maxBodyBytes} bytes`)
      request.destroy()
      finish()
    })
    request.pipe(out)
    response.on("close", finish)
    return Effect.sync(() => {
      response.destroy()
      finish()
    })
  })

/** Sends the client's upgrade request on (credentials dropped) and splices the two connections. */
const splice = (request: IncomingMessage, socket: Duplex, head: Buffer, target: PreviewTarget, upstream: Duplex) =>
  Effect.async<void>((resume) => {
    const lines = [`${request.method} ${innerPath(request.url ?? "/", target)} HTTP/1.1`, `Host: 127.0.0.1:${target.port}`]
    const raw = request.rawHeaders
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const name = raw[i]!.toLowerCase()
      // Connection and Upgrade are this hop's own here: they ask for the upgrade.
      if (name === "connection" || name === "upgrade" || !DROPPED.has(name)) lines.push(`${raw[i]}: ${raw[i + 1]}`)
    }
    upstream.write(`${lines.join("\r\n")}\r\n\r\n`)
    if (head.length > 0) upstream.write(head)
    let done = false
    const finish = () => {
      if (done) return
      done = true
      socket.destroy()
      upstream.destroy()
      resume(Effect.void)
    }
    socket.pipe(upstream)
    upstream.pipe(socket)
    for (const side of [socket, upstream]) {
      side.on("error", finish)
      side.on("close", finish)
    }
    return Effect.sync(finish)
  })

/** Serves previews for the life of the Scope; answers the port it listens on. */
export const serve = (options: PreviewServerOptions, previews: Previews["Type"]) =>
  Effect.gen(function*() {
    const run = yield* FiberSet.makeRuntime<never>()
    const server = createServer()
    // A preview may stream for long (server-sent events): only the headers are timed.
    server.requestTimeout = 0
    server.headersTimeout = 30_000
    server.on("request", (request, response) => {
      const terminal = options.terminal?.handler
      if (terminal !== undefined && TERMINAL.test(request.url ?? "/")) return terminal(request, response)
      run(Effect.gen(function*() {
        const admitted = yield* admit(previews, request.url ?? "/", () => response.destroy())
        if (Either.isLeft(admitted)) return answer(response, admitted.left[0], admitted.left[1])
        const { target, release, upstream } = admitted.right
        const inner = innerPath(request.url ?? "/", target)
        if (!inner.startsWith("/")) {
          // Relative links resolve under the prefix only with its trailing slash.
          upstream.destroy()
          release()
          response.writeHead(308, { location: `${target.prefix}/${inner}`, "referrer-policy": "no-referrer" })
          return response.end()
        }
        yield* proxy(request, response, target, upstream, options.maxBodyBytes).pipe(Effect.ensuring(Effect.sync(release)))
      }))
    })
    server.on("upgrade", (request: IncomingMessage, socket: Duplex, head: Buffer) => {
      socket.on("error", () => {})
      run(Effect.gen(function*() {
        const admitted = yield* admit(previews, request.url ?? "/", () => socket.destroy())
        if (Either.isLeft(admitted)) {
          const [status, text] = admitted.left
          socket.end(`HTTP/1.1 ${status} Refused\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(text) + 1}\r\n\r\n${text}\n`)
          return
        }
        const { target, release, upstream } = admitted.right
        yield* splice(request, socket, head, target, upstream).pipe(Effect.ensuring(Effect.sync(release)))
      }))
    })
    server.on("clientError", (_error, socket) => socket.destroy())
    const port = yield* Effect.acquireRelease(
      Effect.async<number, PreviewStartError>((resume) => {
        server.once("error", (error) => resume(Effect.fail(new PreviewStartError({ message: `cannot listen on ${options.host}:${options.port} for previews: ${error.message}` }))))
        server.listen(options.port, options.host, () => {
          const address = server.address()
          resume(Effect.succeed(typeof address === "object" && address !== null ? address.port : options.port))
        })
      }),
      () => Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      }).pipe(Effect.timeout("5 seconds"), Effect.ignore)
    )
    return port
  })
