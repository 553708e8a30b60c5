/** What can go wrong setting up the egress proxy: its CA, its files, its configuration. */
import * as Schema from "effect/Schema"

/** The egress proxy cannot be set up as configured (a bad CA file, an unreadable bundle, a bad rule). */
export class EgressError extends Schema.TaggedError<EgressError>()("EgressError", {
  reason: Schema.String
}) {
  override get message() {
    return `egress: ${this.reason}`
  }
}
