import type * as Effect from "effect/Effect"
import * as JSONSchema from "effect/JSONSchema"
import * as Schema from "effect/Schema"
import * as AST from "effect/SchemaAST"
import type { ProgressReporter } from "../../services/Processes.js"

/** What a tool handler knows of the call beyond its input. */
export interface ToolContext {
  /** The MCP session making the call (`stdio` for the stdio transport). */
  readonly session: string
  /** Present when the client asked for progress notifications. */
  readonly progress: ProgressReporter | undefined
}

/** MCP's tool annotations; a hint left out means MCP's default (not read-only, destructive, not idempotent, open world). */
export interface ToolAnnotations {
  readonly title: string
  readonly readOnlyHint?: boolean
  readonly destructiveHint?: boolean
  readonly idempotentHint?: boolean
  readonly openWorldHint?: boolean
}

/**
 * A tool's annotations with only the hints that differ from MCP's defaults: tools/list is in every
 * conversation. (`destructive` means nothing for a read-only tool.) No tool here reaches an open world.
 */
export const annotations = (title: string, readOnly: boolean, destructive: boolean, idempotent: boolean): ToolAnnotations => ({
  title,
  ...(readOnly ? { readOnlyHint: true } : destructive ? {} : { destructiveHint: false }),
  ...(idempotent ? { idempotentHint: true } : {}),
  openWorldHint: false
})

/** The annotations as tools/list carries them: the title is the tool's own (`title`), said once. */
export const hints = ({ title: _title, ...hints }: ToolAnnotations): Omit<ToolAnnotations, "title"> => hints

/** A tool: Schema-typed input and output, one service call. */
export interface Tool<I, O, R> {
  readonly name: string
  readonly description: string
  readonly input: Schema.Schema<I, any>
  readonly output: Schema.Schema<O, any>
  readonly annotations: ToolAnnotations
  /** Extra `_meta` of the tool in tools/list (e.g. an MCP App's resource). */
  readonly meta?: Record<string, unknown> | undefined
  /** What the text content carries, when not the structured result itself (ps: the bare list, as process-mcp's clients read it). */
  readonly text?: ((output: O) => unknown) | undefined
  readonly handle: (input: I, context: ToolContext) => Effect.Effect<O, { readonly _tag: string; readonly message: string }, R>
}

export const make = <I, O, R>(tool: Tool<I, O, R>): Tool<I, O, R> => tool

const describeFields = (ast: AST.AST, descriptions: Readonly<Record<string, string | undefined>>): AST.AST => {
  switch (ast._tag) {
    case "TypeLiteral":
      return new AST.TypeLiteral(
        ast.propertySignatures.map((field) =>
          typeof field.name === "string" && descriptions[field.name] !== undefined
            ? new AST.PropertySignature(field.name, field.type, field.isOptional, field.isReadonly, {
              ...field.annotations,
              [AST.DescriptionAnnotationId]: descriptions[field.name]
            })
            : field
        ),
        ast.indexSignatures,
        ast.annotations
      )
    case "Refinement":
      return new AST.Refinement(describeFields(ast.from, descriptions), ast.filter, ast.annotations)
    default:
      throw new Error(`a tool's input is a Struct (with checks), not ${ast._tag}`)
  }
}

/**
 * A service's input Schema with arguments described for clients (tools/list): those whose name, type
 * and the tool's description leave a doubt (ProcessTools' header); what it decodes is unchanged. The
 * Schema (and its checks) belongs to the service; the words, which name this server's defaults, to the tool.
 */
export const described = <A, I>(
  schema: Schema.Schema<A, I>,
  descriptions: { readonly [K in keyof I & string]?: string }
): Schema.Schema<A, I> => Schema.make(describeFields(schema.ast, descriptions))

/** Effect's own names for refinements (`int`, `between(1, 9)`): not for a client's eyes. */
const internalTitle = /^[a-zA-Z]+(?:\(.*\))?$/
/** Effect's default descriptions of refinements (`an integer`, `a number greater than …`). */
const internalDescription = /^(an? (integer|number|string|finite number)|a (non-negative|positive) .*)( .*)?$/

const clean = (node: unknown): unknown => {
  if (Array.isArray(node)) return node.map(clean)
  if (node === null || typeof node !== "object") return node
  const out: Record<string, unknown> = {}
  const extra = (node as { readonly additionalProperties?: unknown }).additionalProperties
  const record = typeof extra === "object" && extra !== null
  for (const [key, value] of Object.entries(node)) {
    if (key === "title" && typeof value === "string" && internalTitle.test(value)) continue
    if (key === "description" && typeof value === "string" && internalDescription.test(value)) continue
    // Effect says `"required": []` and `"properties": {}` for records: noise.
    if ((key === "required" && Array.isArray(value) && value.length === 0)) continue
    if (key === "properties" && record && typeof value === "object" && value !== null && Object.keys(value).length === 0) continue
    out[key] = clean(value)
  }
  return out
}

/** JSON Schema of a Schema, as MCP wants it: a plain object schema without the $schema header or Effect's internal titles. */
export const jsonSchema = (schema: Schema.Schema<any, any>): { type: "object"; [key: string]: unknown } => {
  const { $schema: _ignored, ...rest } = JSONSchema.make(schema) as unknown as Record<string, unknown>
  return { ...(clean(rest) as Record<string, unknown>), type: "object" }
}
