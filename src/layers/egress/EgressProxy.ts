/**
 * The egress proxy: an HTTP proxy served over any `Duplex` — each connection a process inside a
 * computer made to the relay port (`agent/Relay.ts`), or a TCP socket in tests.
 *
 * - `CONNECT host:port` (HTTPS and anything over TLS): decided by the name asked for. Denied → a
 *   403 whose reason phrase and body name the flag to add, and no upstream connection. Allowed →
 *   the proxy resolves the name itself and tunnels the bytes untouched (the client verifies the
 *   upstream's own certificate), unless `--egress-header` rules cover the host: then the tunnel is
 *   TLS-intercepted with a certificate of ours for that host (`CertificateAuthority.ts`), each
 *   request gets the header, and the proxy's own TLS to the upstream is verified normally.
 * - Plain HTTP: the absolute URI of a proxy request (`GET http://host/path`), or the Host header
 *   of an origin-form request; decided, injected and forwarded the same way.
 * - HTTP parsing is Node's (llhttp), given our sockets by `emit("connection")`, with its header
 *   size cap; Node's own timers are off (the server never listens), and time is ours: a connection
 *   must send its first request head within `headTimeoutMs`, and one with no byte either way for
 *   an idle period is closed (checked each `idleTimeoutMs` on the Clock: between one and two
 *   periods). At most `maxConnectionsPerComputer` connections per computer; the next is answered
 *   503. One computer's connections, however hostile, cost only its own slots.
 * - Every decision is audited: host, port, method, allowed/denied, rule, bytes both ways.
 * - WebSocket upgrades through plain HTTP or an intercepted host are answered 501; through a
 *   tunnel they work (the proxy never sees them).
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as FiberSet from "effect/FiberSet"
import * as Redacted from "effect/Redacted"
import { createServer, type IncomingMessage, request as httpRequest, type ServerResponse } from "node:http"
import type { Socket } from "node:net"
import type { Duplex } from "node:stream"
import { TLSSocket } from "node:tls"
import type { EgressEvent } from "../../services/AuditLog.js"
import type { CertificateAuthority } from "./CertificateAuthority.js"
import * as EgressPolicy from "./EgressPolicy.js"
import * as HostPattern from "./HostPattern.js"
import { forwardedHeaders, responseHeaders } from "./HeaderRewrite.js"
import { answer, denialPhrase, rawAnswer, type Status } from "./ProxyAnswers.js"
import { SecretScrubber } from "./SecretScrubber.js"
import type { ProxyLimits } from "./ProxyLimits.js"
import * as Upstream from "./Upstream.js"

export { defaultLimits, type ProxyLimits } from "./ProxyLimits.js"

export interface EgressProxyOptions {
  readonly policy: EgressPolicy.EgressPolicy
  /** Needed when the policy has header rules. */
  readonly ca: CertificateAuthority | undefined
  /** Extra CAs (PEM) trusted for intercepted upstreams, besides Node's roots. */
  readonly upstreamCa: ReadonlyArray<string>
  readonly audit: (event: EgressEvent) => Effect.Effect<void>
  readonly limits: ProxyLimits
  /** Name lookups (default: DNS through c-ares). */
  readonly lookup?: Upstream.Lookup | undefined
}

export interface EgressProxy {
  /** Serves one connection of `computer` until it closes (or is idle, or the Scope of the proxy ends). */
  readonly serve: (computer: string, socket: Duplex) => Effect.Effect<void>
  /** Connections of this computer open now. */
  readonly open: (computer: string) => number
}

interface Connection {
  readonly computer: string
  readonly socket: Duplex
  readonly run: <A, E>(effect: Effect.Effect<A, E>) => unknown
  /** Bumped by every chunk either way: the idle check compares it. */
  activity: number
  requests: number
}

/** Where an allowed request goes. */
interface Destination {
  readonly target: HostPattern.Authority
  readonly address: string
  readonly decision: Extract<EgressPolicy.Decision, { readonly _tag: "Allowed" }>
  readonly tls: boolean
}

/** Resolves when the stream has closed (at once if it already has). */
const closed = (stream: Duplex) =>
  Effect.async<void>((resume) => {
    if (stream.closed || stream.destroyed) return resume(Effect.void)
    const done = () => resume(Effect.void)
    stream.once("close", done)
    return Effect.sync(() => stream.off("close", done))
  })

/** Builds the proxy; its connections end with the Scope. */
export const make = (options: EgressProxyOptions) =>
  Effect.gen(function*() {
    const { limits, policy } = options
    const lookup = options.lookup ?? Upstream.dnsLookup
    const roots = Upstream.trustedRoots(options.upstreamCa)
    const counts = new Map<string, number>()
    const connections = new WeakMap<Duplex, Connection>()
    const intercepted = new WeakMap<Duplex, { readonly connection: Connection; readonly destination: Destination }>()
    const parserOptions = { maxHeaderSize: limits.maxHeaderBytes, requireHostHeader: false, keepAliveTimeout: 0, requestTimeout: 0, headersTimeout: 0 }
    const outer = createServer(parserOptions)
    const inner = createServer(parserOptions)

    const record = (connection: Connection, event: Omit<EgressEvent, "type" | "computer">) =>
      options.audit({ type: "egress", computer: connection.computer, ...event })

    const watch = (connection: Connection, stream: NodeJS.EventEmitter, count?: (bytes: number) => void) =>
      stream.on("data", (chunk: Buffer) => {
        connection.activity++
        count?.(chunk.length)
      })

    /** Forwards one HTTP request (plain, or inside an intercepted tunnel) and audits it, however it ends. */
    const forward = (connection: Connection, destination: Destination, req: IncomingMessage, res: ServerResponse, path: string) =>
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
              path: path.length > 512 ? `${path.slice(0, 512)}…` : path,
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
            headers: forwardedHeaders(req, decision.headers, target),
            setHost: false,
            maxHeaderSize: 64 * 1024,
            // Our connection, made and verified above; without an agent it serves this request only.
            createConnection: () => connected
          })
          upstream.on("response", (response) => {
            status = response.statusCode
            response.on("error", () => res.destroy())
            watch(connection, response, (bytes) => (down += bytes))
            try {
              res.writeHead(response.statusCode ?? 502, response.statusMessage, responseHeaders(response, secrets))
            } catch (invalid) {
              // A status or header Node will not send on: the upstream's answer is unusable.
              error = `${label} sent a response that cannot be passed on: ${invalid instanceof Error ? invalid.message : String(invalid)}`
              response.destroy()
              return answer(res, 502, error)
            }
            const source = secrets.length === 0 ? response : response.pipe(new SecretScrubber(secrets))
            source.pipe(res)
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

    /** Decides a request to `target`; on yes, where it goes. Denials are answered and audited here. */
    const admit = (connection: Connection, target: HostPattern.Authority, method: string, deny: (status: Status, message: string, phrase?: string) => void) =>
      Effect.gen(function*() {
        const decision = EgressPolicy.decide(policy, target)
        const refuse = (status: Status, message: string, rule: string, phrase?: string) =>
          Effect.sync(() => deny(status, message, phrase)).pipe(
            Effect.zipRight(record(connection, {
              host: target.host,
              port: target.port,
              method,
              decision: status === 403 ? "denied" : "allowed",
              rule,
              bytesUp: 0,
              bytesDown: 0,
              status,
              error: status === 403 ? undefined : message
            })),
            Effect.as(undefined)
          )
        if (decision._tag === "Denied") return yield* refuse(403, decision.reason, decision.reason, denialPhrase(target))
        const address = yield* Effect.either(Upstream.resolveAddress(lookup, decision, target))
        if (Either.isLeft(address)) {
          const { message, status } = address.left
          return yield* refuse(status, message, status === 403 ? message : decision.rule, status === 403 ? denialPhrase(target) : undefined)
        }
        return { target, address: address.right, decision, tls: false } satisfies Destination
      })

    const plain = (connection: Connection, req: IncomingMessage, res: ServerResponse) =>
      Effect.gen(function*() {
        const url = req.url ?? "/"
        const absolute = /^http:\/\//i.test(url)
        if (/^[a-z][a-z0-9+.-]*:\/\//i.test(url) && !absolute) {
          return answer(res, 400, `only http:// URLs are proxied as requests; HTTPS goes through CONNECT (set HTTPS_PROXY)`)
        }
        let authority: string | undefined
        let path = url
        if (absolute) {
          const at = url.indexOf("/", 7)
          authority = url.slice(7, at < 0 ? undefined : at)
          path = at < 0 ? "/" : url.slice(at)
          if (authority.includes("@")) return answer(res, 400, "credentials in the URL are not proxied")
        } else authority = req.headers.host
        const target = authority === undefined ? Either.left("no host") : HostPattern.parseAuthority(authority, 80)
        if (Either.isLeft(target)) return answer(res, 400, `cannot tell the host of this request: ${target.left}`)
        const destination = yield* admit(connection, target.right, req.method ?? "GET", (status, message, phrase) => answer(res, status, message, phrase))
        if (destination !== undefined) yield* forward(connection, destination, req, res, path)
      })

    const tunnel = (connection: Connection, destination: Destination, head: Buffer) =>
      Effect.scoped(Effect.gen(function*() {
        const started = yield* Clock.currentTimeMillis
        const { socket } = connection
        const label = HostPattern.formatAuthority(destination.target)
        let up = head.length
        let down = 0
        const upstream = yield* Effect.either(Upstream.connectTcp(destination.address, destination.target.port, limits.connectTimeoutMs, label))
        const finish = (error?: string) =>
          Effect.flatMap(Clock.currentTimeMillis, (now) =>
            record(connection, {
              host: destination.target.host,
              port: destination.target.port,
              method: "CONNECT",
              decision: "allowed",
              rule: destination.decision.rule,
              address: destination.address,
              bytesUp: up,
              bytesDown: down,
              durationMs: now - started,
              error
            }))
        if (Either.isLeft(upstream)) {
          rawAnswer(socket, upstream.left.status, upstream.left.message)
          return yield* finish(upstream.left.message)
        }
        // Recorded however it ends: the client closing first ends this connection's fibers.
        yield* Effect.addFinalizer(() => finish())
        const remote = upstream.right
        watch(connection, socket, (bytes) => (up += bytes))
        watch(connection, remote, (bytes) => (down += bytes))
        socket.write("HTTP/1.1 200 Connection Established\r\n\r\n")
        if (head.length > 0) remote.write(head)
        socket.pipe(remote)
        remote.pipe(socket)
        socket.once("close", () => remote.destroy())
        yield* closed(remote)
        if (!socket.writableEnded) socket.end()
      }))

    const intercept = (connection: Connection, destination: Destination, head: Buffer, ca: CertificateAuthority) =>
      Effect.gen(function*() {
        const { socket } = connection
        const context = yield* Effect.either(ca.leaf(destination.target.host))
        if (Either.isLeft(context)) return rawAnswer(socket, 502, context.left.reason)
        socket.write("HTTP/1.1 200 Connection Established\r\n\r\n")
        if (head.length > 0) socket.unshift(head)
        const secure = new TLSSocket(socket, { isServer: true, secureContext: context.right, ALPNProtocols: ["http/1.1"] })
        // A client that does not trust our CA ends the handshake: that closes the tunnel, nothing more.
        secure.on("error", () => secure.destroy())
        intercepted.set(secure, { connection, destination: { ...destination, tls: true } })
        inner.emit("connection", secure)
        yield* closed(secure)
        socket.destroy()
      })

    const connect = (connection: Connection, req: IncomingMessage, head: Buffer) =>
      Effect.gen(function*() {
        const { socket } = connection
        // Nothing is read from the client until the upstream is there (a pipe or TLS resumes it).
        socket.pause()
        const target = HostPattern.parseAuthority(req.url ?? "", undefined)
        if (Either.isLeft(target)) return rawAnswer(socket, 400, `CONNECT needs host:port: ${target.left}`)
        const destination = yield* admit(connection, target.right, "CONNECT", (status, message, phrase) => rawAnswer(socket, status, message, phrase))
        if (destination === undefined) return
        if (destination.decision.headers.length > 0 && options.ca !== undefined) {
          return yield* intercept(connection, destination, head, options.ca)
        }
        yield* tunnel(connection, destination, head)
      })

    const handled = (effect: Effect.Effect<void>) => effect.pipe(Effect.catchAllDefect((defect) => Effect.logDebug("egress proxy: request failed", defect)))

    outer.on("request", (req: IncomingMessage, res: ServerResponse) => {
      const connection = connections.get(req.socket as Duplex)
      if (connection === undefined) return void res.destroy()
      connection.requests++
      connection.run(handled(plain(connection, req, res)))
    })
    outer.on("connect", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      const connection = connections.get(socket)
      if (connection === undefined) return void socket.destroy()
      connection.requests++
      connection.run(handled(connect(connection, req, head)))
    })
    inner.on("request", (req: IncomingMessage, res: ServerResponse) => {
      const entry = intercepted.get(req.socket as Duplex)
      if (entry === undefined) return void res.destroy()
      entry.connection.requests++
      entry.connection.run(handled(forward(entry.connection, entry.destination, req, res, req.url ?? "/")))
    })
    for (const server of [outer, inner]) {
      server.on("upgrade", (_req: IncomingMessage, socket: Duplex) =>
        rawAnswer(socket, 501, "protocol upgrades (WebSocket) pass only through untouched HTTPS tunnels"))
      server.on("clientError", (error: NodeJS.ErrnoException, socket: Duplex) => {
        if (error.code === "HPE_HEADER_OVERFLOW") {
          rawAnswer(socket, 400, `the request head is larger than ${limits.maxHeaderBytes} bytes`, "Request Header Fields Too Large")
        } else rawAnswer(socket, 400, `malformed request (${error.code ?? error.message})`)
        // Ended, not destroyed, so the answer is delivered; the watchdog closes what lingers.
      })
    }

    /** Closes the connection when it sends no request head in time, or goes idle. */
    const watchdog = (connection: Connection) =>
      Effect.gen(function*() {
        yield* Effect.sleep(limits.headTimeoutMs)
        if (connection.requests === 0) return
        let seen = connection.activity
        while (true) {
          yield* Effect.sleep(limits.idleTimeoutMs)
          if (connection.activity === seen) return
          seen = connection.activity
        }
      })

    const serve = (computer: string, socket: Duplex): Effect.Effect<void> =>
      Effect.suspend(() => {
        const open = counts.get(computer) ?? 0
        if (open >= limits.maxConnectionsPerComputer) {
          socket.on("error", () => {})
          rawAnswer(socket, 503, `this computer has ${open} proxy connections open, the most allowed; close some and retry`)
          return Effect.void
        }
        counts.set(computer, open + 1)
        return Effect.scoped(Effect.gen(function*() {
          yield* Effect.addFinalizer(() =>
            Effect.sync(() => {
              const left = (counts.get(computer) ?? 1) - 1
              if (left <= 0) counts.delete(computer)
              else counts.set(computer, left)
              socket.destroy()
            })
          )
          const run = yield* FiberSet.makeRuntime<never>()
          const connection: Connection = { computer, socket, run, activity: 0, requests: 0 }
          connections.set(socket, connection)
          socket.on("error", () => {})
          watch(connection, socket)
          outer.emit("connection", socket)
          yield* Effect.raceFirst(closed(socket), watchdog(connection))
        }))
      })

    return { serve, open: (computer) => counts.get(computer) ?? 0 } satisfies EgressProxy
  })
