import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { type ComputerHandle, ComputerInfo, Computers, PoolStatus } from "../../services/Computers.js"
import type { Capabilities } from "../../services/Backend.js"
import { Files } from "../../services/Files.js"
import { defaultReadBytes, maxFileBytes } from "../FileTransfer.js"
import * as Dashboard from "./Dashboard.js"
import * as RecentActivity from "./RecentActivity.js"
import * as Tool from "./Tool.js"

// Input fields say only what their name and the tool's description do not (see ProcessTools' header).
const ComputerId = Schema.String
const Temporary = Schema.Boolean
const Inventory = Schema.Struct({
  computers: Schema.Array(ComputerInfo),
  count: Schema.Number,
  pool: Schema.optional(PoolStatus.annotations({ description: "The warm pool of computers prepared ahead" })),
  serverExit: Schema.String.annotations({ description: "What outlives this server" }),
  unsupported: Schema.optional(Schema.Array(Schema.String).annotations({ description: "Capabilities this backend lacks" })),
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

/** The inventory; the recent audit entries only when asked for (they grow with every command an agent runs). */
/** The capabilities the backend lacks (checkpoints, pty, …): what its tools answer with Unsupported. */
const unsupported = (capabilities: Capabilities) => {
  const missing = Object.entries(capabilities).flatMap(([name, has]) => (has ? [] : [name]))
  return missing.length === 0 ? {} : { unsupported: missing }
}

const inventory = (session: string, withAudit: boolean) =>
  Effect.flatMap(Computers, (computers) =>
    Effect.all([computers.list(session), computers.pool]).pipe(
      Effect.flatMap(([list, pool]) =>
        Effect.map(
          withAudit ? RecentActivity.recent(list.map((computer) => computer.computer_id)) : Effect.succeed([]),
          (audit) => ({
            computers: list,
            count: list.length,
            ...(pool === undefined ? {} : { pool }),
            serverExit: computers.serverExit,
            ...unsupported(computers.capabilities),
            ...(audit.length === 0 ? {} : { audit })
          })
        )
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
    description: "Open the computers dashboard (an MCP App).",
    // An empty object, said plainly (Effect says `{}` as "object or array").
    input: Schema.Struct({}).annotations({ jsonSchema: { type: "object", properties: {} } }),
    output: Inventory,
    annotations: Tool.annotations("Sandbox Computer Dashboard", true, false, true),
    // Both keys: the specification's, and the flat one older hosts read.
    meta: { ui: { resourceUri: Dashboard.resourceUri, visibility: ["model", "app"] }, "ui/resourceUri": Dashboard.resourceUri },
    handle: (_input, context) => inventory(context.session, true)
  }),
  Tool.make({
    name: "computer_list",
    description: "List computers in use and permanent ones; audit=true: their last 20 audit entries.",
    input: Schema.Struct({ audit: Schema.optional(Schema.Boolean) }),
    output: Inventory,
    annotations: Tool.annotations("List computers", true, false, true),
    handle: (input, context) => inventory(context.session, input.audit === true)
  }),
  Tool.make({
    name: "computer_create",
    description: "Create a computer, or attach to one by computer_id. temporary=false keeps it past this session; " +
      "shared=true lets other sessions use it.",
    input: Schema.Struct({
      computer_id: Schema.optional(ComputerId),
      temporary: Schema.optionalWith(Temporary, { default: () => true }),
      shared: Schema.optional(Schema.Boolean),
      from_checkpoint: Schema.optional(Schema.String)
    }),
    output: Created,
    annotations: Tool.annotations("Create a computer", false, false, true),
    handle: (input, context) =>
      Effect.flatMap(Computers, (computers) => computers.create(context.session, input)).pipe(Effect.flatMap(created))
  }),
  Tool.make({
    name: "computer_restart",
    description: "Restart a computer, keeping its files; its processes end.",
    input: Schema.Struct({ computer_id: ComputerId }),
    output: Created,
    annotations: Tool.annotations("Restart a computer", false, true, false),
    handle: (input, context) =>
      Effect.flatMap(Computers, (computers) => computers.restart(context.session, input.computer_id)).pipe(Effect.flatMap(created))
  }),
  Tool.make({
    name: "computer_factory_reset",
    description: "Recreate a computer from its image, erasing its files.",
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
    description: "Delete a computer and everything in it.",
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
    description: `Read a file (relative: from the working directory): utf8, or base64 if binary or asked; at most ` +
      `maxBytes (default ${defaultReadBytes}).`,
    input: Schema.Struct({
      path: Schema.String,
      encoding: Schema.optional(Encoding),
      maxBytes: Schema.optional(Int.pipe(Schema.between(0, maxFileBytes))),
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
    description: "Write a file (relative: from the working directory; directories made): utf8, or base64 " +
      "(encoding); append=true appends; mode e.g. 755.",
    input: Schema.Struct({
      path: Schema.String,
      content: Schema.String,
      encoding: Schema.optional(Encoding),
      append: Schema.optional(Schema.Boolean),
      mode: Schema.optional(Schema.String),
      computer_id: Schema.optional(ComputerId),
      temporary: Schema.optional(Temporary)
    }),
    output: Schema.Struct({ computer_id: Schema.String, path: Schema.String, bytes: Schema.Number }),
    annotations: Tool.annotations("Write a file", false, true, false),
    handle: (input, context) => Effect.flatMap(Files, (files) => files.write(context.session, input))
  })
]
