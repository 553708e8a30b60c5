/**
 * Issues and checks the terminal page's links: `<payload>.<mac>`, base64url, the MAC an
 * HMAC-SHA256 of the payload under a key this server draws at start (so a restart voids every
 * link, and a link works on the server that issued it only). The token travels in the URL's
 * fragment, which browsers never send to a server nor put in a Referer; the page sends it in a
 * header. It is a credential for one process's terminal and nothing else: /mcp never accepts it,
 * and it never carries the MCP bearer token.
 */
import { randomBytes } from "node:crypto"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Schema from "effect/Schema"
import { type TerminalGrant, TerminalLinkRefused, TerminalLinks } from "../../services/TerminalLinks.js"
import * as Signature from "../../domain/Signature.js"

/** The longest a link may live. */
export const maxLifetimeMs = 24 * 60 * 60 * 1000

const Payload = Schema.parseJson(Schema.Struct({
  v: Schema.Literal(1),
  s: Schema.String,
  p: Schema.String,
  c: Schema.String,
  m: Schema.Literal("watch", "control"),
  e: Schema.Number
}))
const encodePayload = Schema.encodeSync(Payload)
const decodePayload = Schema.decodeUnknownEither(Payload)

/** The links of a server whose terminal page is at `pageUrl` (`http://host:port/terminal`). */
export const make = (pageUrl: string, key: Uint8Array = randomBytes(32)) => {
  const refused = (message: string) => new TerminalLinkRefused({ message })
  return TerminalLinks.of({
    issue: (grant, lifetimeMs) =>
      Effect.map(Clock.currentTimeMillis, (now) => {
        const expiresAt = now + Math.min(Math.max(1, lifetimeMs), maxLifetimeMs)
        const payload = Buffer.from(encodePayload({
          v: 1,
          s: grant.session,
          p: grant.pid,
          c: grant.computerId,
          m: grant.control ? "control" : "watch",
          e: expiresAt
        })).toString("base64url")
        return { url: `${pageUrl}#${payload}.${Signature.sign(key, payload)}`, expires_at: new Date(expiresAt).toISOString() }
      }),
    verify: (token) =>
      Effect.gen(function*() {
        const [payload, signature, ...rest] = token.length > 4096 ? [] : token.split(".")
        if (payload === undefined || signature === undefined || rest.length > 0) return yield* refused("not a terminal link")
        if (!Signature.verify(key, payload, signature)) return yield* refused("the link's signature does not match")
        const decoded = decodePayload(Buffer.from(payload, "base64url").toString("utf8"))
        if (Either.isLeft(decoded)) return yield* refused("not a terminal link")
        const claims = decoded.right
        if ((yield* Clock.currentTimeMillis) >= claims.e) return yield* refused("the link has expired")
        return { session: claims.s, pid: claims.p, computerId: claims.c, control: claims.m === "control", expiresAt: claims.e } satisfies TerminalGrant
      })
  })
}
