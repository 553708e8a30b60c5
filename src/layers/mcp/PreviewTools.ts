/**
 * The preview tools: `computer_expose` makes a signed, expiring URL on the server's preview origin
 * for a port inside a computer (a person opens the web app an agent is building); `computer_unexpose`
 * revokes one. Descriptions are short: tools/list is read in every conversation.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { ComputerId } from "../../services/ProcessInputs.js"
import { PreviewInfo, Previews } from "../../services/Previews.js"
import * as Tool from "./Tool.js"

const ExposeInput = Schema.Struct({
  computer_id: ComputerId,
  port: Schema.Int.pipe(Schema.between(1, 65535)),
  lifetime_s: Schema.optional(Schema.Int.pipe(Schema.positive()))
})

const UnexposeInput = Schema.Struct({
  preview: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(2000))
})

export const make = () => [
  Tool.make({
    name: "computer_expose",
    description: "Get a URL a person can open to see a web server on 127.0.0.1:port in a computer " +
      "(HTTP, WebSocket; the computer needs no network). Expires after lifetime_s (default 3600).",
    input: ExposeInput,
    output: PreviewInfo,
    annotations: Tool.annotations("Expose a port", false, false, false),
    handle: (input, context) => Effect.flatMap(Previews, (previews) => previews.expose(context.session, input))
  }),
  Tool.make({
    name: "computer_unexpose",
    description: "Revoke a preview URL (give its preview_id or URL).",
    input: UnexposeInput,
    output: Schema.Struct({ ok: Schema.Boolean }),
    annotations: Tool.annotations("Revoke a preview URL", false, true, true),
    handle: (input, context) =>
      Effect.flatMap(Previews, (previews) => Effect.as(previews.unexpose(context.session, input.preview), { ok: true }))
  })
]
