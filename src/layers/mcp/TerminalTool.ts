/**
 * The `terminal` tool: a person's way into a TTY process. One tool with an action, because every
 * tool costs a model context in tools/list: `link` is the model's (a signed, expiring URL of the
 * live page, to hand a person); `view`, `take`, `keys`, `resize` and `release` are the dashboard
 * app's (it polls `view` by cursor, and types while it holds the terminal).
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import { InvalidInput, Unsupported } from "../../domain/Errors.js"
import { ComputerId } from "../../services/ProcessInputs.js"
import { Processes } from "../../services/Processes.js"
import { TerminalLinks } from "../../services/TerminalLinks.js"
import { Terminals } from "../../services/Terminals.js"
import * as Tool from "./Tool.js"

/** Most bytes of keystrokes in one call (a paste). */
export const maxKeysBytes = 64 * 1024

/** A string of at most `max` characters; checked, not said in tools/list (only the app sends these). */
const Short = (name: string, max: number) =>
  Schema.String.pipe(Schema.filter((value) => value.length <= max || `${name} is longer than ${max} characters`))

/** A whole number from `min` to `max`; checked, its bounds not said in tools/list. */
const Counted = (name: string, min: number, max: number) =>
  Schema.Number.pipe(Schema.filter((n) => (Number.isInteger(n) && n >= min && n <= max) || `${name} must be an integer from ${min} to ${max}`))

/** A terminal size, `COLSxROWS` (one argument where two would cost a model's context twice). */
const Size = Schema.transformOrFail(Schema.String, Schema.Struct({ cols: Schema.Number, rows: Schema.Number }), {
  strict: true,
  decode: (text, _, ast) => {
    const match = /^(\d{1,4})x(\d{1,4})$/.exec(text)
    const [cols, rows] = [Number(match?.[1]), Number(match?.[2])]
    return match !== null && cols >= 2 && cols <= 1000 && rows >= 2 && rows <= 1000
      ? ParseResult.succeed({ cols, rows })
      : ParseResult.fail(new ParseResult.Type(ast, text, "size must be COLSxROWS, each from 2 to 1000 (e.g. 120x30)"))
  },
  encode: ({ cols, rows }) => ParseResult.succeed(`${cols}x${rows}`)
})

const Input = Schema.Struct({
  id: Schema.String,
  action: Schema.optionalWith(Schema.Literal("link", "view", "take", "keys", "resize", "release"), { default: () => "link" as const }),
  computer_id: Schema.optional(ComputerId),
  control: Schema.optional(Schema.Boolean),
  minutes: Schema.optional(Counted("minutes", 1, 1440)),
  cursor: Schema.optional(Counted("cursor", 0, Number.MAX_SAFE_INTEGER)),
  hold: Schema.optional(Short("hold", 64)),
  keys: Schema.optional(Short("keys", maxKeysBytes)),
  size: Schema.optional(Size)
})

const Output = Schema.Struct({
  pid: Schema.String,
  url: Schema.optional(Schema.String.annotations({ description: "action=link: the page; give it to a person" })),
  expires_at: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  exitCode: Schema.optional(Schema.Number),
  cols: Schema.optional(Schema.Number),
  rows: Schema.optional(Schema.Number),
  data: Schema.optional(Schema.String.annotations({ description: "PTY bytes since cursor (with reset: a redraw)" })),
  next: Schema.optional(Schema.Number.annotations({ description: "The cursor of the next view" })),
  reset: Schema.optional(Schema.Literal(true)),
  held: Schema.optional(Schema.Struct({ by: Schema.String, since: Schema.String, yours: Schema.optional(Schema.Literal(true)) })),
  hold: Schema.optional(Schema.String.annotations({ description: "action=take: the token of keys, resize and release" })),
  bytes: Schema.optional(Schema.Number)
})

const encoder = new TextEncoder()
const needs = (field: string, action: string) => new InvalidInput({ message: `${field} is required with action=${action}` })

export const make = () => [
  Tool.make({
    name: "terminal",
    description: "Show a person a tty process live: action=link returns a signed URL, expiring after minutes (default " +
      "15); control=true lets them take over (your stdin waits until they hand back).",
    input: Input,
    output: Output,
    annotations: Tool.annotations("Share a terminal", false, false, false),
    handle: (input, context) =>
      Effect.gen(function*() {
        const terminals = yield* Terminals
        const { session } = context
        const ref = { id: input.id, computer_id: input.computer_id }
        const hold = input.hold
        switch (input.action) {
          case "link": {
            const links = yield* Effect.serviceOption(TerminalLinks)
            if (Option.isNone(links)) {
              return yield* new Unsupported({ backend: "stdio", feature: "terminal links (the page is served by --transport http)" })
            }
            const process = yield* (yield* Processes).terminal(session, ref)
            const link = yield* links.value.issue(
              { session, pid: process.id, computerId: process.computerId, control: input.control === true },
              (input.minutes ?? 15) * 60_000
            )
            return { pid: process.id, ...link }
          }
          case "view":
            return yield* terminals.view(session, ref, { cursor: input.cursor, hold })
          case "take": {
            const taken = yield* terminals.take(session, ref, "dashboard")
            if (input.size !== undefined) yield* terminals.resize(session, ref, taken.token, input.size.cols, input.size.rows)
            return { pid: input.id, hold: taken.token, held: { by: taken.by, since: new Date(taken.since).toISOString(), yours: true as const } }
          }
          case "keys": {
            if (hold === undefined) return yield* needs("hold", "keys")
            if (input.keys === undefined || input.keys === "") return yield* needs("keys", "keys")
            return { pid: input.id, bytes: yield* terminals.keys(session, ref, hold, encoder.encode(input.keys)) }
          }
          case "resize":
            if (hold === undefined) return yield* needs("hold", "resize")
            if (input.size === undefined) return yield* needs("size", "resize")
            yield* terminals.resize(session, ref, hold, input.size.cols, input.size.rows)
            return { pid: input.id, ...input.size }
          case "release":
            if (hold === undefined) return yield* needs("hold", "release")
            yield* terminals.release(session, ref, hold)
            return { pid: input.id }
        }
      })
  })
]
