import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import type { HttpApp } from "@effect/platform"
import * as Effect from "effect/Effect"

const loopbackHosts = new Set(["127.0.0.1", "localhost", "::1", "[::1]"])

/** Whether a bind address (or Host name) is this machine's loopback. */
export const isLoopback = (host: string) => loopbackHosts.has(host) || host.startsWith("127.")

/** The Host header without its port (an IPv6 literal keeps its brackets). */
const hostName = (header: string) => header.replace(/:\d+$/, "")

const originAllowed = (origin: string | undefined) => {
  if (origin === undefined || origin === "null") return true
  try {
    return loopbackHosts.has(new URL(origin).hostname)
  } catch {
    return false
  }
}

/** On loopback, only loopback Host names and Origins are served: a DNS-rebinding page gets nothing. */
export const allowed = (loopback: boolean, host: string | undefined, origin: string | undefined) =>
  !loopback || (loopbackHosts.has(hostName(host ?? "")) && originAllowed(origin))

const forbidden = HttpServerResponse.unsafeJson({ error: "forbidden host or origin" }, { status: 403 })

/** Middleware for the whole server: requests from a foreign Host or Origin get 403. */
export const middleware = (loopback: boolean) => <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R> =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
    allowed(loopback, request.headers.host, request.headers.origin) ? app : Effect.succeed(forbidden))
