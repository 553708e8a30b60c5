/**
 * Signed links to the standalone terminal page (`/terminal` of the HTTP server): what a link
 * grants, and the service that issues and checks them. Present only where the HTTP server runs.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"

/** What a link lets its bearer do: watch (or, with `control`, drive) one process, as `session`, until `expiresAt`. */
export interface TerminalGrant {
  readonly session: string
  readonly pid: string
  readonly computerId: string
  readonly control: boolean
  /** Clock millis. */
  readonly expiresAt: number
}

/** A link that is not valid now (tampered with, for another server, expired, or not allowed to do this). */
export class TerminalLinkRefused extends Schema.TaggedError<TerminalLinkRefused>()("TerminalLinkRefused", {
  message: Schema.String
}) {}

export class TerminalLinks extends Context.Tag("kilntainers/services/TerminalLinks")<TerminalLinks, {
  /** A URL of the page for `grant`, valid for `lifetimeMs`. */
  readonly issue: (grant: Omit<TerminalGrant, "expiresAt">, lifetimeMs: number) => Effect.Effect<{ readonly url: string; readonly expires_at: string }>
  readonly verify: (token: string) => Effect.Effect<TerminalGrant, TerminalLinkRefused>
}>() {}
