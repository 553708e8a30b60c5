/**
 * The proxy's side towards the internet: names resolved by the server (never inside a computer),
 * the address checked against the policy, TCP connections made with a deadline and closed with
 * their Scope, and TLS to intercepted hosts verified as any client would (system roots plus
 * `--egress-ca-file`, the host's name checked against its certificate).
 *
 * Lookups use c-ares (`dns.Resolver`: DNS only, not /etc/hosts) rather than getaddrinfo, whose
 * calls take libuv's few worker threads: a computer asking for names that never answer must not
 * hold up file access or other computers. Names DNS does not know are pinned with --egress-resolve.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type * as Scope from "effect/Scope"
import { Resolver } from "node:dns/promises"
import { connect as tcpConnect, isIP, type Socket } from "node:net"
import {
  checkServerIdentity,
  connect as tlsConnect,
  createSecureContext,
  rootCertificates,
  type SecureContext,
  type TLSSocket
} from "node:tls"
import * as EgressPolicy from "./EgressPolicy.js"
import type * as HostPattern from "./HostPattern.js"

/** Why the proxy answers a request itself: 403 (policy) or 502/504 (the upstream), and the words to say. */
export interface Refusal {
  readonly status: 403 | 502 | 504
  readonly message: string
}

/** Finds the addresses of a name; Left: why not (in words). */
export type Lookup = (host: string) => Effect.Effect<ReadonlyArray<string>, string>

const errorCode = (error: unknown) =>
  typeof error === "object" && error !== null && "code" in error ? String(error.code) : error instanceof Error ? error.message : String(error)

/** DNS through c-ares, A records first, then AAAA; each lookup cancelled when interrupted. */
export const dnsLookup: Lookup = (host) =>
  Effect.async<ReadonlyArray<string>, string>((resume) => {
    const resolver = new Resolver({ timeout: 3000, tries: 2 })
    resolver.resolve4(host)
      .catch(() => resolver.resolve6(host))
      .then(
        (addresses) => resume(addresses.length > 0 ? Effect.succeed(addresses) : Effect.fail("no address")),
        (error) => resume(Effect.fail(errorCode(error)))
      )
    return Effect.sync(() => resolver.cancel())
  })

/** The address to connect to for an allowed request: its own, pinned or looked up; then checked. */
export const resolveAddress = (
  lookup: Lookup,
  decision: Extract<EgressPolicy.Decision, { readonly _tag: "Allowed" }>,
  target: HostPattern.Authority
): Effect.Effect<string, Refusal> =>
  Effect.gen(function*() {
    const address = isIP(target.host) !== 0
      ? target.host
      : decision.pinned ?? (yield* lookup(target.host).pipe(
        Effect.map((addresses) => addresses[0]!),
        Effect.mapError((reason): Refusal => ({ status: 502, message: `cannot resolve ${target.host}: ${reason}` }))
      ))
    const checked = EgressPolicy.checkAddress(decision, target, address)
    return Either.isRight(checked) ? checked.right : yield* Effect.fail<Refusal>({ status: 403, message: checked.left })
  })

/** Waits for a socket to connect (or fail). */
const connected = (socket: Socket | TLSSocket, event: "connect" | "secureConnect") =>
  Effect.async<void, string>((resume) => {
    const ok = () => resume(Effect.void)
    const failed = (error: Error) => resume(Effect.fail(errorCode(error)))
    socket.once(event, ok)
    socket.once("error", failed)
    return Effect.sync(() => {
      socket.off(event, ok)
      socket.off("error", failed)
    })
  })

/** A TCP connection to `address:port`, within `timeoutMs`; destroyed when the Scope closes. */
export const connectTcp = (
  address: string,
  port: number,
  timeoutMs: number,
  label: string
): Effect.Effect<Socket, Refusal, Scope.Scope> =>
  Effect.gen(function*() {
    const socket = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const socket = tcpConnect({ host: address, port, noDelay: true })
        socket.on("error", () => {})
        return socket
      }),
      (socket) => Effect.sync(() => socket.destroy())
    )
    yield* connected(socket, "connect").pipe(
      Effect.timeoutFail({
        duration: Duration.millis(timeoutMs),
        onTimeout: (): Refusal => ({ status: 504, message: `${label} did not accept a connection within ${timeoutMs} ms` })
      }),
      Effect.mapError((error): Refusal => (typeof error === "string" ? { status: 502, message: `cannot connect to ${label}: ${error}` } : error))
    )
    return socket
  })

/** The roots the proxy trusts upstream: Node's defaults, or those plus the extra CAs. */
export const trustedRoots = (extra: ReadonlyArray<string>): ReadonlyArray<string> | undefined =>
  extra.length === 0 ? undefined : [...rootCertificates, ...extra]

/**
 * One secure context per set of roots: given as `ca`, the roots (Node's and the extra CAs, some 150
 * certificates) would be parsed again for every upstream connection, about 20 ms of CPU each.
 */
const contexts = new WeakMap<ReadonlyArray<string>, SecureContext>()
const contextFor = (roots: ReadonlyArray<string>) => {
  let context = contexts.get(roots)
  if (context === undefined) {
    context = createSecureContext({ ca: [...roots] })
    contexts.set(roots, context)
  }
  return context
}

/**
 * TLS over `socket` to `host` (canonical name or address), verified: the chain against `roots`
 * (undefined: Node's defaults) and the name against the certificate; HTTP/1.1 only.
 */
export const connectTls = (
  socket: Socket,
  host: string,
  roots: ReadonlyArray<string> | undefined,
  timeoutMs: number
): Effect.Effect<TLSSocket, Refusal, Scope.Scope> =>
  Effect.gen(function*() {
    const secure = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const secure = tlsConnect({
          socket,
          ...(isIP(host) === 0 ? { servername: host } : {}),
          ...(roots === undefined ? {} : { secureContext: contextFor(roots) }),
          ALPNProtocols: ["http/1.1"],
          checkServerIdentity: (_name, certificate) => checkServerIdentity(host, certificate)
        })
        secure.on("error", () => {})
        return secure
      }),
      (secure) => Effect.sync(() => secure.destroy())
    )
    yield* connected(secure, "secureConnect").pipe(
      Effect.timeoutFail({
        duration: Duration.millis(timeoutMs),
        onTimeout: (): Refusal => ({ status: 504, message: `${host}: no TLS handshake within ${timeoutMs} ms` })
      }),
      Effect.mapError((error): Refusal =>
        typeof error === "string" ? { status: 502, message: `the TLS connection to ${host} failed verification or setup: ${error}` } : error
      )
    )
    return secure
  })
