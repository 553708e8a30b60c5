/**
 * The egress proxy: an HTTP proxy served over any `Duplex` — each connection a process inside a
 * computer made to the relay port (`agent/Relay.ts`), or a TCP socket in tests.
 *
 * - `CONNECT host:port` (HTTPS and anything over TLS): decided by the name asked for. Denied → a
 *   403 whose reason phrase and body name the flag to add, and no upstream connection. Allowed →
 *   the proxy resolves the name itself and tunnels the bytes untouched (the client verifies the
 *   upstream's own certificate), unless `--egress-header` rules cover the host: then the tunnel is
 *   TLS-intercepted with a certificate of ours for that host (`CertificateAuthority.ts`); each
 *   request whose SNI, request target and Host name that same host (`CredentialBinding.ts`, else a
 *   421) gets the header, the proxy's own TLS to the upstream is verified normally, and the
 *   answer comes back with the credential's echoes masked (`EchoMask.ts`).
 * - Plain HTTP: the absolute URI of a proxy request (`GET http://host/path`), or the Host header
 *   of an origin-form request; decided the same way and forwarded with the Host of the URI
 *   (`ForwardRequest.ts`). A host with a header rule is refused over plain HTTP: no credential is
 *   ever sent in clear text.
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
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { Duplex } from "node:stream"
import { TLSSocket } from "node:tls"
import type { EgressEvent } from "../../services/AuditLog.js"
import type { CertificateAuthority } from "./CertificateAuthority.js"
import * as CredentialBinding from "./CredentialBinding.js"
import * as EgressPolicy from "./EgressPolicy.js"
import * as ForwardRequest from "./ForwardRequest.js"
import * as HostPattern from "./HostPattern.js"
import { answer, denialPhrase, rawAnswer, type Status } from "./ProxyAnswers.js"
import { auditPath, closed, type Connection, type Destination, type EgressRecord, watch } from "./ProxyConnection.js"
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

    const record = (connection: Connection, event: EgressRecord) => options.audit({ type: "egress", computer: connection.computer, ...event })
    const forward = ForwardRequest.make({ limits, roots, record })

    /**
     * Decides a request to `target` (`tls`: through CONNECT); on yes, where it goes. Denials are
     * answered and audited here, plain HTTP to a host with a credential among them.
     */
    const admit = (
      connection: Connection,
      target: HostPattern.Authority,
      method: string,
      tls: boolean,
      deny: (status: Status, message: string, phrase?: string) => void
    ) =>
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
        const clear = tls ? undefined : CredentialBinding.plainRefusal(target, decision.headers)
        if (clear !== undefined) return yield* refuse(403, clear, clear)
        const address = yield* Effect.either(Upstream.resolveAddress(lookup, decision, target))
        if (Either.isLeft(address)) {
          const { message, status } = address.left
          return yield* refuse(status, message, status === 403 ? message : decision.rule, status === 403 ? denialPhrase(target) : undefined)
        }
        return { target, address: address.right, decision, tls: false } satisfies Destination
      })

    /** A request inside an intercepted tunnel: forwarded with the credential only when it names the tunnel's host. */
    const credentialed = (connection: Connection, destination: Destination, req: IncomingMessage, res: ServerResponse) =>
      Effect.suspend(() => {
        const { target } = destination
        const url = req.url ?? "/"
        const checked = CredentialBinding.checkIntercepted({ target, sni: (req.socket as TLSSocket).servername, url, host: req.headers.host })
        if (Either.isRight(checked)) return forward(connection, destination, req, res, checked.right)
        const { message, status } = checked.left
        answer(res, status, message)
        return record(connection, {
          host: target.host,
          port: target.port,
          method: req.method ?? "GET",
          path: auditPath(url),
          decision: "denied",
          rule: message,
          intercepted: true,
          status,
          bytesUp: 0,
          bytesDown: 0
        })
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
        const destination = yield* admit(connection, target.right, req.method ?? "GET", false, (status, message, phrase) => answer(res, status, message, phrase))
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
        const destination = yield* admit(connection, target.right, "CONNECT", true, (status, message, phrase) => rawAnswer(socket, status, message, phrase))
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
      entry.connection.run(handled(credentialed(entry.connection, entry.destination, req, res)))
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
