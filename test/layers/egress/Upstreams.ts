/**
 * Upstream servers for the egress tests, on 127.0.0.1: plain HTTP and HTTPS with a test CA of their
 * own (made by the same CertificateAuthority code in another directory, so it is not the proxy's),
 * a certificate for whatever name the client asks for. `/echo` answers the request's headers as
 * JSON; anything else answers `hello <host> <path>`. Every accepted TCP connection is counted.
 */
import { Effect, Runtime } from "effect"
import type { Scope } from "effect"
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { createServer as createHttpsServer } from "node:https"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import * as CertificateAuthority from "../../../src/layers/egress/CertificateAuthority.js"

export interface Seen {
  readonly scheme: "http" | "https"
  readonly url: string
  readonly headers: IncomingMessage["headers"]
}

export interface Upstreams {
  readonly httpPort: number
  readonly httpsPort: number
  /** The upstreams' own CA (PEM), to trust in clients and in the proxy (`--egress-ca-file`). */
  readonly caPem: string
  readonly caFile: string
  /** TCP connections accepted so far, both servers. */
  readonly connections: () => number
  readonly seen: Array<Seen>
}

const listen = (server: Server) =>
  Effect.acquireRelease(
    Effect.async<number>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
    }),
    () => Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
  )

export const start = (dir: string): Effect.Effect<Upstreams, unknown, Scope.Scope> =>
  Effect.gen(function*() {
    const ca = yield* CertificateAuthority.make({ dir: join(dir, "upstream-ca") })
    const caFile = join(dir, "upstream-ca.pem")
    const { writeFileSync } = yield* Effect.promise(() => import("node:fs"))
    writeFileSync(caFile, ca.certificate)
    const runtime = yield* Effect.runtime<never>()
    let connections = 0
    const seen: Array<Seen> = []
    const handler = (scheme: "http" | "https") => (req: IncomingMessage, res: ServerResponse) => {
      seen.push({ scheme, url: req.url ?? "", headers: req.headers })
      req.resume()
      req.on("end", () => {
        if (req.url?.startsWith("/echo")) {
          res.setHeader("content-type", "application/json")
          res.setHeader("x-echo-authorization", String(req.headers.authorization ?? ""))
          res.end(JSON.stringify({ scheme, url: req.url, headers: req.headers }))
        } else res.end(`hello ${req.headers.host} ${req.url}\n`)
      })
    }
    const http = createHttpServer(handler("http"))
    const https = createHttpsServer({
      SNICallback: (name, done) =>
        Runtime.runPromise(runtime)(ca.leaf(name)).then((context) => done(null, context), (error) => done(error as Error))
    }, handler("https"))
    for (const server of [http, https]) server.on("connection", () => connections++)
    const httpPort = yield* listen(http)
    const httpsPort = yield* listen(https)
    return { httpPort, httpsPort, caPem: ca.certificate, caFile, connections: () => connections, seen }
  })
