/**
 * Forwards one HTTP request upstream — plain HTTP, or a request inside an intercepted tunnel that
 * has passed `CredentialBinding` — and passes the answer back: over a TCP connection (and TLS,
 * verified, when intercepted) made for this request alone, with the request's headers rewritten
 * (`HeaderRewrite.ts`) and, when a credential was injected, the response masked (`EchoMask.ts`).
 * Audited however it ends: status, bytes both ways, duration, the error if any.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Redacted from "effect/Redacted"
import { type IncomingMessage, request as httpRequest, type ServerResponse } from "node:http"
import type { Socket } from "node:net"
import { pipeline } from "node:stream"
import { maskResponse } from "./EchoMask.js"
import { forwardedHeaders } from "./HeaderRewrite.js"
import * as HostPattern from "./HostPattern.js"
import { answer } from "./ProxyAnswers.js"
import { auditPath, type Connection, type Destination, type EgressRecord, watch } from "./ProxyConnection.js"
import type { ProxyLimits } from "./ProxyLimits.js"
import * as Upstream from "./Upstream.js"

export interface ForwardOptions {
  readonly limits: ProxyLimits
  /** The roots trusted for intercepted upstreams (undefined: Node's). */
  readonly roots: ReadonlyArray<string> | undefined
  readonly record: (connection: Connection, event: EgressRecord) => Effect.Effect<void>
}

/** The forwarder of a proxy: sends `path` (origin-form) of `req` to `destination`, answers on `res`. */
export const make = ({ limits, record, roots }: ForwardOptions) =>
  /** Forwards one HTTP request and audits it, however it ends. */
  (connection: Connection, destination: Destination, req: IncomingMessage, res: ServerResponse, path: string) =>
    Effect.scoped(Effect.gen(function*() {
      const started = yield* Clock.currentTimeMillis
      const { address, decision, target } = destination
      const label = HostPattern.formatAuthority(target)
      const secrets = decision.headers.map((rule) => Redacted.value(rule.value))
      let up = 0
      let down = 0
      let status: number | undefined
      let error: string | undefined
      yield* Effect.addFinalizer(() =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          record(connection, {
            host: target.host,
            port: target.port,
            method: req.method ?? "GET",
            path: auditPath(path),
            decision: "allowed",
            rule: decision.rule,
            intercepted: destination.tls,
            injected: decision.headers.length > 0 ? decision.headers.map((rule) => rule.header) : undefined,
            address,
            status,
            bytesUp: up,
            bytesDown: down,
            durationMs: now - started,
            error: error ?? (status === undefined ? "the client went away" : undefined)
          }))
      )
      const fail = (refusal: Upstream.Refusal) =>
        Effect.sync(() => {
          status = refusal.status
          error = refusal.message
          answer(res, refusal.status, refusal.message)
        })
      const tcp = yield* Effect.either(Upstream.connectTcp(address, target.port, limits.connectTimeoutMs, label))
      if (Either.isLeft(tcp)) return yield* fail(tcp.left)
      const socket: Either.Either<Socket, Upstream.Refusal> = destination.tls
        ? yield* Effect.either(Upstream.connectTls(tcp.right, target.host, roots, limits.connectTimeoutMs))
        : Either.right(tcp.right)
      if (Either.isLeft(socket)) return yield* fail(socket.left)
      const connected = socket.right
      yield* Effect.async<void>((resume) => {
        const upstream = httpRequest({
          host: address,
          port: target.port,
          method: req.method,
          path,
          headers: forwardedHeaders(req, decision.headers, target, destination.tls),
          setHost: false,
          maxHeaderSize: 64 * 1024,
          // Our connection, made and verified above; without an agent it serves this request only.
          createConnection: () => connected
        })
        upstream.on("response", (response) => {
          status = response.statusCode
          response.on("error", () => res.destroy())
          watch(connection, response, (bytes) => (down += bytes))
          // The upstream's answer is unusable: a coding the masking cannot see through, or a status or header Node will not send on.
          const unusable = (why: string) => {
            status = 502
            error = `${label}: ${why}`
            response.destroy()
            answer(res, 502, error)
          }
          const masked = maskResponse(response, req.method ?? "GET", secrets)
          if (Either.isLeft(masked)) return unusable(masked.left)
          try {
            res.writeHead(response.statusCode ?? 502, masked.right.statusMessage, masked.right.headers)
          } catch (invalid) {
            return unusable(`sent a response that cannot be passed on: ${invalid instanceof Error ? invalid.message : String(invalid)}`)
          }
          if (masked.right.transforms.length === 0) response.pipe(res)
          else {
            pipeline([response, ...masked.right.transforms, res], (failure) => {
              if (failure === null || failure === undefined) return
              // A body the decoder cannot read, or a client gone mid-way: the answer is cut short.
              error ??= `${label}: the response was cut short (${failure.message})`
              res.destroy()
            })
          }
        })
        upstream.on("error", (failure) => {
          error = `${label}: ${failure.message}`
          status ??= 502
          answer(res, 502, error)
        })
        res.once("close", () => {
          upstream.destroy()
          resume(Effect.void)
        })
        res.on("error", () => {})
        req.on("error", () => upstream.destroy())
        watch(connection, req, (bytes) => (up += bytes))
        req.pipe(upstream)
        return Effect.sync(() => upstream.destroy())
      })
    }))
