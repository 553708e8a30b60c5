/**
 * Preview URLs: a port inside a computer served to a person's browser on the server's preview
 * origin (`--preview-host`/`--preview-port`), through the computer's own channel (the agent's relay),
 * so the computer needs no network. URLs are signed, expire, and are revoked by `unexpose`. The
 * terminal page of a signed link is served on the same origin when the listener runs.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"
import type { IncomingMessage, ServerResponse } from "node:http"
import type { Duplex } from "node:stream"
import type { ComputerNotFound } from "../domain/Errors.js"
import type { ComputerError } from "./Computers.js"

/** What computer_expose answers. */
export const PreviewInfo = Schema.Struct({
  preview_id: Schema.String,
  url: Schema.String,
  computer_id: Schema.String,
  port: Schema.Number,
  expires_at: Schema.String,
  /** On a cloud whose own URL this is: what the provider does with it that the server cannot (revoke it). */
  note: Schema.optional(Schema.String)
})
export type PreviewInfo = typeof PreviewInfo.Type

export interface ExposeRequest {
  readonly computer_id: string
  readonly port: number
  /** Seconds; the default and the most allowed are the server's. */
  readonly lifetime_s?: number | undefined
}

/** A verified preview request: where it goes. */
export interface PreviewTarget {
  readonly id: string
  readonly computer: string
  readonly port: number
  /** The path prefix the browser uses (`/p/<token>`), stripped before the request goes in. */
  readonly prefix: string
  /** Opens a connection to the port inside the computer. */
  readonly open: Effect.Effect<Duplex, ComputerError | ComputerNotFound>
}

export class Previews extends Context.Tag("kilntainers/services/Previews")<Previews, {
  /** A new signed URL for a port of a computer the session may use. */
  readonly expose: (session: string, request: ExposeRequest) => Effect.Effect<PreviewInfo, ComputerError>
  /** Revokes a preview of this session (by id or URL): its URL is refused from now on, its connections closed. */
  readonly unexpose: (session: string, idOrUrl: string) => Effect.Effect<void, ComputerError>
  /**
   * The target of a request path `/p/<token>/…` on the preview origin, or why it is refused
   * (bad signature, expired, revoked); refusals are audit-logged. For the preview listener.
   */
  readonly verify: (path: string) => Effect.Effect<PreviewTarget, string>
  /** Tracks a proxied connection of a preview: closed when the preview is revoked or expires; false when it is at its limit. */
  readonly track: (id: string, close: () => void) => Effect.Effect<(() => void) | undefined>
  /** The preview origin (`http://host:port`) when the preview listener runs, else undefined. */
  readonly origin: Effect.Effect<string | undefined>
  /**
   * Serves the terminal page's paths (`/terminal`, `/terminal/…`) on the preview origin with this
   * handler for the life of the Scope: the page of a signed link lives on the same origin as
   * previews, apart from /mcp's. Nothing when the listener does not run.
   */
  readonly mountTerminal: (handler: NodeHandler) => Effect.Effect<void, never, Scope.Scope>
}>() {}

/** A Node request handler (the terminal page's routes, made by the HTTP server). */
export type NodeHandler = (request: IncomingMessage, response: ServerResponse) => void
