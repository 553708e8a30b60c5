import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { type ComputerHandle, ComputerInfo, Computers, PoolStatus } from "../../services/Computers.js"
import { Files } from "../../services/Files.js"
import { defaultReadBytes, maxFileBytes } from "../FileTransfer.js"
import * as Dashboard from "./Dashboard.js"
import * as RecentActivity from "./RecentActivity.js"
import * as Tool from "./Tool.js"

const ComputerId = Schema.String.annotations({ description: "The computer's id (slug)" })
const Temporary = Schema.Boolean.annotations({
  description: "Remove the computer when its MCP session ends (default true). Set false to keep it provider-side and reconnect by computer_id."
})
const Inventory = Schema.Struct({
  computers: Schema.Array(ComputerInfo),
  count: Schema.Number,
  pool: Schema.optional(PoolStatus.annotations({ description: "The warm pool of computers prepared ahead" })),
  audit: Schema.optional(Schema.Array(RecentActivity.Activity).annotations({
    description: "Recent activity of these computers from the audit log (processes, files, lifecycle, network), oldest first"
  }))
})
const Created = Schema.Struct({
  ok: Schema.Boolean,
  computer_id: Schema.String,
  sandbox_id: Schema.String,
  temporary: Schema.Boolean
})
const Encoding = Schema.Literal("utf8", "base64")
const Int = Schema.Number.pipe(Schema.int())

const inventory = (session: string) =>
  Effect.flatMap(Computers, (computers) =>
    Effect.all([computers.list(session), computers.pool]).pipe(
      Effect.flatMap(([list, pool]) =>
        Effect.map(RecentActivity.recent(list.map((computer) => computer.computer_id)), (audit) => ({
          computers: list,
          count: list.length,
          ...(pool === undefined ? {} : { pool }),
          ...(audit.length === 0 ? {} : { audit })
        }))
      )
    ))

const created = (computer: ComputerHandle) =>
  Effect.map(computer.providerId, (providerId) => ({
    ok: true,
    computer_id: computer.id,
    sandbox_id: providerId,
    temporary: computer.temporary
  }))

/** The fork's computer lifecycle tools, and the file tools. */
export const make = () => [
  Tool.make({
    name: "computer_dashboard",
    description: "Open the interactive MCP App dashboard of sandbox computers: the inventory (state, backend, " +
      "image, temporary/permanent, created time, live processes), with create, restart, reset, delete, a " +
      "command runner and each computer's processes.",
    input: Schema.Struct({}),
    output: Inventory,
    annotations: Tool.annotations("Sandbox Computer Dashboard", true, false, true),
    // Both keys: the specification's, and the flat one older hosts read.
    meta: { ui: { resourceUri: Dashboard.resourceUri, visibility: ["model", "app"] }, "ui/resourceUri": Dashboard.resourceUri },
    handle: (_input, context) => inventory(context.session)
  }),
  Tool.make({
    name: "computer_list",
    description: "List every sandbox computer: those in use and the permanent ones the provider keeps, with " +
      "state, backend, image, provider id (sandbox_id), temporary/permanent, created time and live processes.",
    input: Schema.Struct({}),
    output: Inventory,
    annotations: Tool.annotations("List computers", true, false, true),
    handle: (_input, context) => inventory(context.session)
  }),
  Tool.make({
    name: "computer_create",
    description: "Create a sandbox computer, or attach to an existing one by computer_id. Omitting computer_id " +
      "always makes a new computer with a readable random id.",
    input: Schema.Struct({
      computer_id: Schema.optional(ComputerId),
      temporary: Schema.optionalWith(Temporary, { default: () => true }),
      shared: Schema.optional(Schema.Boolean.annotations({
        description: "Let other MCP sessions use this temporary computer by its id (permanent computers always can)"
      }))
    }),
    output: Created,
    annotations: Tool.annotations("Create a computer", false, false, true),
    handle: (input, context) =>
      Effect.flatMap(Computers, (computers) => computers.create(context.session, input)).pipe(Effect.flatMap(created))
  }),
  Tool.make({
    name: "computer_restart",
    description: "Restart a computer without erasing its writable filesystem. Its running processes end " +
      "(ps shows why).",
    input: Schema.Struct({ computer_id: ComputerId }),
    output: Created,
    annotations: Tool.annotations("Restart a computer", false, true, false),
    handle: (input, context) =>
      Effect.flatMap(Computers, (computers) => computers.restart(context.session, input.computer_id)).pipe(Effect.flatMap(created))
  }),
  Tool.make({
    name: "computer_factory_reset",
    description: "Erase a computer's state and recreate it from its base image. Its processes end and its " +
      "files are gone.",
    input: Schema.Struct({ computer_id: ComputerId }),
    output: Created,
    annotations: Tool.annotations("Factory-reset a computer", false, true, false),
    handle: (input, context) =>
      Effect.flatMap(Computers, (computers) => computers.factoryReset(context.session, input.computer_id)).pipe(
        Effect.flatMap(created)
      )
  }),
  Tool.make({
    name: "computer_delete",
    description: "Permanently delete a computer (temporary or permanent) and everything in it.",
    input: Schema.Struct({ computer_id: ComputerId }),
    output: Schema.Struct({ ok: Schema.Boolean, computer_id: Schema.String, deleted: Schema.Boolean }),
    annotations: Tool.annotations("Delete a computer", false, true, true),
    handle: (input, context) =>
      Effect.flatMap(Computers, (computers) => computers.delete(context.session, input.computer_id)).pipe(
        Effect.as({ ok: true, computer_id: input.computer_id, deleted: true })
      )
  }),
  Tool.make({
    name: "file_read",
    description: `Read a file inside a computer (relative paths are from /home/agent). Text comes back as ` +
      `utf8; binary (or encoding=base64) as base64. At most maxBytes (default ${defaultReadBytes}, max ` +
      `${maxFileBytes}); size is the whole file's.`,
    input: Schema.Struct({
      path: Schema.String.annotations({ description: "Path inside the computer" }),
      encoding: Schema.optional(Encoding.annotations({ description: "utf8 (default) or base64" })),
      maxBytes: Schema.optional(Int.pipe(Schema.between(0, maxFileBytes)).annotations({ description: "Most bytes to return" })),
      computer_id: Schema.optional(ComputerId),
      temporary: Schema.optional(Temporary)
    }),
    output: Schema.Struct({
      computer_id: Schema.String,
      path: Schema.String,
      size: Schema.Number,
      encoding: Encoding,
      content: Schema.String.annotations({ description: "The file's content: utf8 text, or base64 with encoding=base64" }),
      truncated: Schema.Boolean
    }),
    annotations: Tool.annotations("Read a file", true, false, true),
    handle: (input, context) => Effect.flatMap(Files, (files) => files.read(context.session, input))
  }),
  Tool.make({
    name: "file_write",
    description: `Write a file inside a computer (relative paths are from /home/agent; parent directories are ` +
      `created). content is utf8 text, or base64 with encoding=base64; at most ${maxFileBytes} bytes. ` +
      `append=true appends; mode sets permissions (e.g. 755).`,
    input: Schema.Struct({
      path: Schema.String.annotations({ description: "Path inside the computer" }),
      content: Schema.String.annotations({ description: "The file's content: utf8 text, or base64 with encoding=base64" }),
      encoding: Schema.optional(Encoding.annotations({ description: "utf8 (default) or base64" })),
      append: Schema.optional(Schema.Boolean.annotations({ description: "Append instead of replacing the file" })),
      mode: Schema.optional(Schema.String.annotations({ description: "Octal permissions, e.g. 644 or 755" })),
      computer_id: Schema.optional(ComputerId),
      temporary: Schema.optional(Temporary)
    }),
    output: Schema.Struct({ computer_id: Schema.String, path: Schema.String, bytes: Schema.Number }),
    annotations: Tool.annotations("Write a file", false, true, false),
    handle: (input, context) => Effect.flatMap(Files, (files) => files.write(context.session, input))
  })
]
