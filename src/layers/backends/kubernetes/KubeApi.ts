/**
 * A small client of the Kubernetes API: the cluster and credentials as kubectl finds them, read by
 * @kubernetes/client-node's KubeConfig (an explicit file, else `KUBECONFIG`, `~/.kube/config`, or
 * the pod's service account in a cluster), and JSON requests over one keep-alive agent.
 *
 * The client library is used for the configuration and its authenticators only (tokens, client
 * certificates, exec plugins, a service account token it re-reads as it rotates): its generated
 * API makes an agent per request and a client per call. Credentials are applied again at most
 * every AUTH_REFRESH_MS. Every answer is bounded (MAX_BODY), and every failure is a ProviderError
 * made from the API's Status (KubeError.ts); a request no byte was answered to is sent again.
 */
import type * as https from "node:https"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import { Agent as HttpAgent, type IncomingMessage, request as httpRequest } from "node:http"
import { Agent as HttpsAgent, request as httpsRequest } from "node:https"
import { createSecureContext, type SecureContext } from "node:tls"
import type { ProviderError } from "../../../domain/Errors.js"
import { fromStatus, kubeError } from "./KubeError.js"

export interface KubeApiOptions {
  /** A kubeconfig file; undefined: as kubectl finds one (KUBECONFIG, ~/.kube/config, in-cluster). */
  readonly kubeconfig?: string | undefined
  /** A context of it; undefined: its current context. */
  readonly context?: string | undefined
  /** Longest wait for one answer. */
  readonly requestTimeoutMs: number
}

/** TLS and headers for a request or a WebSocket: what the kubeconfig's user and cluster say. */
export interface Credentials {
  readonly ca?: Buffer | string | undefined
  readonly cert?: Buffer | string | undefined
  readonly key?: Buffer | string | undefined
  readonly servername?: string | undefined
  readonly rejectUnauthorized?: boolean | undefined
  readonly headers: Readonly<Record<string, string>>
  /**
   * `ca`, `cert` and `key` made into a TLS context once, for WebSockets: given the PEMs, every
   * connection would parse them into a context of its own (a cost each exec paid).
   */
  readonly secureContext: SecureContext
}

export interface RequestSpec {
  readonly method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE"
  readonly path: string
  readonly query?: Readonly<Record<string, string | undefined>> | undefined
  readonly body?: unknown
  readonly contentType?: string | undefined
  /** The operation, as a verb phrase for errors ("create the claim"). */
  readonly operation: string
}


const AUTH_REFRESH_MS = 10_000
/** A request whose connection failed before any answer is sent again this often, this far apart. */
const RESENDS = 2
const RESEND_AFTER = Duration.millis(100)

/** A request that failed before any byte of an answer: safe to send again (see `send`). */
class Unanswered {
  constructor(readonly failed: ProviderError) {}
}
const MAX_BODY = 64 * 1024 * 1024

export const make = (options: KubeApiOptions) =>
  Effect.gen(function*() {
    const k8s = yield* Effect.tryPromise({
      try: () => import("@kubernetes/client-node"),
      catch: (error) => kubeError("load the Kubernetes client", "Unavailable", String(error), error)
    })
    const config = new k8s.KubeConfig()
    yield* Effect.try({
      try: () => {
        if (options.kubeconfig !== undefined) config.loadFromFile(options.kubeconfig)
        else config.loadFromDefault()
        if (options.context !== undefined) config.setCurrentContext(options.context)
      },
      catch: (error) => kubeError("read the kubeconfig", "Invalid", error instanceof Error ? error.message : String(error), error)
    })
    const cluster = config.getCurrentCluster()
    if (cluster === null) {
      return yield* kubeError("read the kubeconfig", "Invalid", "no cluster: set --k8s-kubeconfig or KUBECONFIG, or run in a cluster")
    }
    const server = new URL(cluster.server)
    const secure = server.protocol === "https:"
    const namespace = config.getContextObject(config.getCurrentContext())?.namespace ?? "default"

    let cached: { readonly at: number; readonly credentials: Credentials } | undefined
    /** The user's credentials now (a token the library refreshes, a rotated service-account token). */
    const credentials = Effect.gen(function*() {
      const now = yield* Clock.currentTimeMillis
      if (cached !== undefined && now - cached.at < AUTH_REFRESH_MS) return cached.credentials
      const opts: https.RequestOptions = { headers: {} }
      yield* Effect.tryPromise({
        try: () => config.applyToHTTPSOptions(opts),
        catch: (error) => kubeError("authenticate to the cluster", "Denied", error instanceof Error ? error.message : String(error), error)
      })
      const headers = Object.fromEntries(Object.entries(opts.headers ?? {}).map(([k, v]) => [k, String(v)]))
      const tls = { ca: opts.ca as Buffer | undefined, cert: opts.cert as Buffer | undefined, key: opts.key as Buffer | undefined }
      const previous = cached?.credentials
      const sameTls = previous !== undefined && String(previous.ca) === String(tls.ca) && String(previous.cert) === String(tls.cert) && String(previous.key) === String(tls.key)
      const made: Credentials = {
        ...tls,
        servername: opts.servername,
        rejectUnauthorized: opts.rejectUnauthorized,
        headers,
        secureContext: sameTls ? previous.secureContext : yield* Effect.try({
          try: () => createSecureContext(tls),
          catch: (error) => kubeError("read the cluster's certificates", "Invalid", error instanceof Error ? error.message : String(error), error)
        })
      }
      cached = { at: now, credentials: made }
      return made
    })
    const first = yield* credentials
    const agent = secure
      ? new HttpsAgent({ keepAlive: true, maxSockets: 64, ca: first.ca, cert: first.cert, key: first.key, servername: first.servername, ...(first.rejectUnauthorized === undefined ? {} : { rejectUnauthorized: first.rejectUnauthorized }) })
      : new HttpAgent({ keepAlive: true, maxSockets: 64 })
    yield* Effect.addFinalizer(() => Effect.sync(() => agent.destroy()))

    const url = (spec: RequestSpec) => {
      const target = new URL(spec.path, server)
      for (const [key, value] of Object.entries(spec.query ?? {})) if (value !== undefined) target.searchParams.set(key, value)
      return target
    }

    /**
     * Sends the request; `answer` gets the response (status, headers) and reads its body itself. A
     * request whose connection failed before any byte of an answer (ECONNRESET, "socket hang up":
     * a kept-alive socket the server closed while idle, or a fresh one a loaded server dropped) is
     * sent again, at most RESENDS times, RESEND_AFTER apart. Every verb: reads, PUT and merge
     * PATCHes are idempotent, a DELETE of what is gone is a 404 its callers take as done, and a
     * POST is a create by name, whose resend meets its own first attempt as 409 AlreadyExists
     * (KubeProvider.create and KubernetesBackend's `ensure` take that as made).
     */
    const send = <A>(spec: RequestSpec, answer: (status: number, response: IncomingMessage, resume: (result: Effect.Effect<A, ProviderError>) => void) => void) =>
      Effect.flatMap(credentials, (auth) =>
        Effect.async<A, ProviderError | Unanswered>((resume) => {
          const body = spec.body === undefined ? undefined : Buffer.from(JSON.stringify(spec.body))
          let answered = false
          const request = (secure ? httpsRequest : httpRequest)(url(spec), {
            method: spec.method,
            agent,
            headers: {
              ...auth.headers,
              accept: "application/json",
              ...(body === undefined ? {} : { "content-type": spec.contentType ?? "application/json", "content-length": String(body.length) })
            }
          }, (response) => {
            answered = true
            answer(response.statusCode ?? 0, response, resume)
          })
          request.on("error", (error: NodeJS.ErrnoException) => {
            const failed = kubeError(spec.operation, "Unavailable", `cannot reach the cluster at ${server.origin}: ${error.message}`, error)
            resume(Effect.fail(!answered && (error.code === "ECONNRESET" || error.code === "EPIPE") ? new Unanswered(failed) : failed))
          })
          if (body !== undefined) request.write(body)
          request.end()
          return Effect.sync(() => request.destroy())
        }).pipe(
          Effect.retry({ times: RESENDS, schedule: Schedule.spaced(RESEND_AFTER), while: (error) => error instanceof Unanswered }),
          Effect.mapError((error) => (error instanceof Unanswered ? error.failed : error))
        ))

    /** One JSON request, answered whole. */
    const call = <A = any>(spec: RequestSpec): Effect.Effect<A, ProviderError> =>
      send<A>(spec, (status, response, resume) => {
        const chunks: Array<Buffer> = []
        let size = 0
        response.on("data", (chunk: Buffer) => {
          size += chunk.length
          if (size > MAX_BODY) {
            response.destroy()
            return resume(Effect.fail(kubeError(spec.operation, "Protocol", `the answer is larger than ${MAX_BODY} bytes`)))
          }
          chunks.push(chunk)
        })
        response.on("error", (error) => resume(Effect.fail(kubeError(spec.operation, "Unavailable", error.message, error))))
        response.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8")
          let parsed: unknown
          try {
            parsed = text.trim() === "" ? {} : JSON.parse(text)
          } catch {
            parsed = undefined
          }
          if (status >= 200 && status < 300) {
            return resume(parsed === undefined ? Effect.fail(kubeError(spec.operation, "Protocol", `not JSON: ${text.slice(0, 200)}`)) : Effect.succeed(parsed as A))
          }
          resume(Effect.fail(fromStatus(spec.operation, status, parsed, text)))
        })
      }).pipe(
        Effect.timeoutFail({
          duration: Duration.millis(options.requestTimeoutMs),
          onTimeout: () => kubeError(spec.operation, "Timeout", `no answer from the cluster at ${server.origin} within ${Math.round(options.requestTimeoutMs / 100) / 10} s`)
        })
      )

    /** A streaming GET (a watch): each line to `onLine` until the answer ends; interrupting it closes the request. */
    const stream = (spec: RequestSpec, onLine: (line: string) => void): Effect.Effect<void, ProviderError> =>
      send<void>(spec, (status, response, resume) => {
        if (status < 200 || status >= 300) {
          const chunks: Array<Buffer> = []
          response.on("data", (chunk: Buffer) => chunks.push(chunk))
          response.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8")
            let parsed: unknown
            try {
              parsed = JSON.parse(text)
            } catch {
              parsed = undefined
            }
            resume(Effect.fail(fromStatus(spec.operation, status, parsed, text)))
          })
          return
        }
        let pending = ""
        response.setEncoding("utf8")
        response.on("data", (text: string) => {
          pending += text
          let newline = pending.indexOf("\n")
          while (newline >= 0) {
            const line = pending.slice(0, newline)
            pending = pending.slice(newline + 1)
            if (line.trim() !== "") onLine(line)
            newline = pending.indexOf("\n")
          }
          if (pending.length > MAX_BODY) response.destroy()
        })
        response.on("end", () => resume(Effect.void))
        response.on("error", (error) => resume(Effect.fail(kubeError(spec.operation, "Unavailable", error.message, error))))
      })

    return { server: server.origin, namespace, secure, credentials, call, stream, wsUrl: (path: string) => new URL(path, server.href.replace(/^http/, "ws")) }
  })

export type KubeApi = Effect.Effect.Success<ReturnType<typeof make>>
