/**
 * The checkpoint tool: one `computer_checkpoint` with an action (create, list, delete) rather than
 * three tools, because every tool costs a model context in tools/list on every session, and
 * listing and deleting are rare next to taking one. Forks are made by `computer_create` with
 * `from_checkpoint`.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { InvalidInput } from "../../domain/Errors.js"
import { type CheckpointError, CheckpointInfo, Computers } from "../../services/Computers.js"
import { ComputerId } from "../../services/ProcessInputs.js"
import * as Tool from "./Tool.js"

const Action = Schema.Literal("create", "list", "delete")

const Input = Schema.Struct({
  action: Schema.optionalWith(Action, { default: () => "create" as const }),
  // Checked whatever the action: a computer id that could never name a computer is refused, not ignored.
  computer_id: Schema.optional(ComputerId),
  name: Schema.optional(Schema.String.pipe(Schema.maxLength(200))),
  shared: Schema.optional(Schema.Boolean),
  checkpoint_id: Schema.optional(Schema.String)
})

const Output = Schema.Struct({
  ok: Schema.Boolean,
  checkpoint: Schema.optional(CheckpointInfo),
  checkpoints: Schema.optional(Schema.Array(CheckpointInfo)),
  deleted: Schema.optional(Schema.String)
})

const needs = (field: string, action: string) => new InvalidInput({ message: `${field} is required with action=${action}` })

export const make = () => [
  Tool.make({
    name: "computer_checkpoint",
    description: "Snapshot a computer's files (not its processes): action=create (computer_id, name, shared: other " +
      "sessions may fork it) returns checkpoint_id, for computer_create from_checkpoint; list; delete (checkpoint_id). " +
      "Checkpoints end with this session.",
    input: Input,
    output: Output,
    annotations: Tool.annotations("Checkpoint a computer", false, false, false),
    handle: (input, context) =>
      Effect.flatMap(Computers, (computers): Effect.Effect<typeof Output.Type, CheckpointError> => {
        switch (input.action) {
          case "list":
            return Effect.map(computers.checkpoints(context.session), (checkpoints) => ({ ok: true, checkpoints }))
          case "delete":
            return input.checkpoint_id === undefined
              ? Effect.fail(needs("checkpoint_id", "delete"))
              : Effect.as(computers.deleteCheckpoint(context.session, input.checkpoint_id), { ok: true, deleted: input.checkpoint_id })
          case "create":
            return input.computer_id === undefined
              ? Effect.fail(needs("computer_id", "create"))
              : Effect.map(
                computers.checkpoint(context.session, { computer_id: input.computer_id, name: input.name, shared: input.shared }),
                (checkpoint) => ({ ok: true, checkpoint })
              )
        }
      })
  })
]
