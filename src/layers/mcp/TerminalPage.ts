/**
 * The standalone terminal page of the HTTP server, for the bearer of a signed link (the
 * `terminal` tool's action=link): `GET /terminal` the page (xterm.js, built by `npm run build`),
 * `GET /terminal/stream` the terminal's views as server-sent events, `POST /terminal/input` take
 * over, keystrokes, resize, renew (the hold's lease), hand back. The link (`X-Kilntainers-Link`, never a cookie, so no page
 * of another origin can use it) grants one process's terminal as the session that made it, until
 * it expires; a watch link cannot type. The bearer token of /mcp is never accepted here, and the
 * link never on /mcp. When the preview listener runs, these routes are served there (the preview
 * origin) and /mcp's origin refuses them (`refused`). The page is served with a CSP that lets it run its own inline script only
 * (by hash) and connect to this origin only, in no frame.
 */
import { HttpIncomingMessage, HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { createHash } from "node:crypto"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as Stream from "effect/Stream"
import { Int } from "../../services/ProcessInputs.js"
import type { TerminalLinks } from "../../services/TerminalLinks.js";
import { type TerminalGrant } from "../../services/TerminalLinks.js"
import { Terminals } from "../../services/Terminals.js"
import * as Dashboard from "./Dashboard.js"
import { maxKeysBytes } from "./TerminalTool.js"

export const linkHeader = "x-kilntainers-link"
/** Streams open at once, server-wide: each holds a subscription to a process's output. */
export const maxStreams = 64

const Input = Schema.Struct({
  action: Schema.Literal("take", "keys", "resize", "release", "renew"),
  hold: Schema.optional(Schema.String.pipe(Schema.maxLength(64))),
  keys: Schema.optional(Schema.String.pipe(Schema.maxLength(maxKeysBytes))),
  cols: Schema.optional(Int(2, 1000)),
  rows: Schema.optional(Int(2, 1000))
})

const json = (body: unknown, status = 200) =>
  HttpServerResponse.unsafeJson(body, { status, headers: { "cache-control": "no-store" } })
const refuse = (status: number, error: string) => json({ error }, status)

/** The page's security headers: its own inline script (by hash) and style, requests to this origin only. */
const pageHeaders = (html: string) => {
  const script = /<script>([\s\S]*?)<\/script>/.exec(html)?.[1] ?? ""
  const hash = createHash("sha256").update(script).digest("base64")
  return {
    "content-security-policy": `default-src 'none'; script-src 'sha256-${hash}'; style-src 'unsafe-inline'; ` +
      "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store"
  }
}

const encoder = new TextEncoder()
const event = (name: string, data: unknown) => encoder.encode(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`)

/** The routes, for a server whose links `links` checks. */
export const routes = (links: TerminalLinks["Type"]) =>
  Effect.gen(function*() {
    const terminals = yield* Terminals
    const page = yield* Effect.cached(Effect.map(Dashboard.builtPage("terminal.html"), (html) => ({ html, headers: pageHeaders(html) })))
    let streams = 0

    /** The request's link, checked now; a refusal is the response. */
    const granted = <E, R>(use: (grant: TerminalGrant) => Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
      Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
        const token = request.headers[linkHeader]
        if (token === undefined) return Effect.succeed(refuse(401, `this needs a terminal link (the ${linkHeader} header)`))
        return Effect.matchEffect(links.verify(token), {
          onFailure: (refused) => Effect.succeed(refuse(403, refused.message)),
          onSuccess: use
        })
      })
    const refOf = (grant: TerminalGrant) => ({ id: grant.pid, computer_id: grant.computerId })
    const failed = (error: { readonly _tag: string; readonly message: string }) =>
      refuse(error._tag === "ProcessNotFound" || error._tag === "ComputerNotFound" ? 404 : error._tag === "AccessDenied" ? 409 : 400, error.message)

    const stream = granted((grant) =>
      Effect.suspend(() => {
        if (streams >= maxStreams) return Effect.succeed(refuse(503, `${maxStreams} terminal streams are open already`))
        const body = Stream.acquireRelease(Effect.sync(() => streams++), () => Effect.sync(() => streams--)).pipe(
          Stream.flatMap(() =>
            Stream.concat(
              Stream.succeed(event("grant", { pid: grant.pid, computer_id: grant.computerId, control: grant.control, expires_at: new Date(grant.expiresAt).toISOString() })),
              terminals.follow(grant.session, refOf(grant)).pipe(
                Stream.map((view) => event("view", view)),
                Stream.catchAll((error) => Stream.succeed(event("end", { error: error.message })))
              )
            )
          ),
          // The link's end ends its stream.
          Stream.interruptWhen(Effect.flatMap(Effect.clockWith((clock) => clock.currentTimeMillis), (now) => Effect.sleep(Math.max(0, grant.expiresAt - now))))
        )
        return Effect.succeed(HttpServerResponse.stream(body, {
          contentType: "text/event-stream",
          headers: { "cache-control": "no-store", "x-accel-buffering": "no" }
        }))
      })
    )

    const input = granted((grant) =>
      Effect.gen(function*() {
        if (!grant.control) return refuse(403, "this link may watch the terminal, not type in it")
        const decoded = yield* HttpServerRequest.schemaBodyJson(Input).pipe(
          HttpIncomingMessage.withMaxBodySize(Option.some(2 * maxKeysBytes + 1024)),
          Effect.either
        )
        if (decoded._tag === "Left") return refuse(400, "the body must be JSON: {action: take|keys|resize|release|renew, hold, keys, cols, rows}")
        const body = decoded.right
        const ref = refOf(grant)
        const { session } = grant
        const answer = Effect.gen(function*() {
          if (body.action === "take") {
            const hold = yield* terminals.take(session, ref, "page")
            if (body.cols !== undefined && body.rows !== undefined) yield* terminals.resize(session, ref, hold.token, body.cols, body.rows)
            return json({ hold: hold.token })
          }
          if (body.hold === undefined) return refuse(400, `hold is required with action=${body.action}`)
          switch (body.action) {
            case "keys":
              return json({ bytes: yield* terminals.keys(session, ref, body.hold, encoder.encode(body.keys ?? "")) })
            case "resize":
              if (body.cols === undefined || body.rows === undefined) return refuse(400, "cols and rows are required with action=resize")
              yield* terminals.resize(session, ref, body.hold, body.cols, body.rows)
              return json({ cols: body.cols, rows: body.rows })
            case "release":
              yield* terminals.release(session, ref, body.hold)
              return json({})
            case "renew":
              yield* terminals.renew(session, ref, body.hold)
              return json({})
          }
        })
        return yield* Effect.catchAll(answer, (error) => Effect.succeed(failed(error)))
      })
    )

    const served = Effect.match(page, {
      onFailure: (error) => refuse(404, error.message),
      onSuccess: ({ html, headers }) => HttpServerResponse.text(html, { contentType: "text/html; charset=utf-8", headers })
    })

    return (router: HttpRouter.HttpRouter<never, never>) =>
      router.pipe(
        HttpRouter.get("/terminal", served),
        HttpRouter.get("/terminal/stream", stream),
        HttpRouter.post("/terminal/input", input)
      )
  })

/** The MCP origin's answer to the page's paths when the page lives on the preview origin. */
export const refused = (previewOrigin: string) => {
  const answer = refuse(403, `the terminal page is served on the preview origin only (${previewOrigin}/terminal)`)
  return (router: HttpRouter.HttpRouter<never, never>) =>
    router.pipe(HttpRouter.all("/terminal", Effect.succeed(answer)), HttpRouter.all("/terminal/*", Effect.succeed(answer)))
}
