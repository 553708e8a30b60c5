import * as Schema from "effect/Schema"

/** A process id: short, unique for the life of the server, never reused (`p1`, `p2`, …). */
export const ProcessId = Schema.String.pipe(Schema.brand("ProcessId"))
export type ProcessId = typeof ProcessId.Type

/** A computer id: a DNS-label-like slug, 1–63 characters. */
export const ComputerId = Schema.String.pipe(
  Schema.pattern(/^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/, {
    message: () => "computer_id must be 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit"
  }),
  Schema.brand("ComputerId")
)
export type ComputerId = typeof ComputerId.Type
