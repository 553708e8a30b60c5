import type { Effect } from "effect"
import { JSONSchema, type Schema } from "effect"
import type { ProgressReporter } from "../../services/Processes.js"

/** What a tool handler knows of the call beyond its input. */
export interface ToolContext {
  /** The MCP session making the call (`stdio` for the stdio transport). */
  readonly session: string
  /** Present when the client asked for progress notifications. */
  readonly progress: ProgressReporter | undefined
}

export interface ToolAnnotations {
  readonly title: string
  readonly readOnlyHint: boolean
  readonly destructiveHint: boolean
  readonly idempotentHint: boolean
  readonly openWorldHint: boolean
}

/** A tool: Schema-typed input and output, one service call. */
export interface Tool<I, O, R> {
  readonly name: string
  readonly description: string
  readonly input: Schema.Schema<I, any>
  readonly output: Schema.Schema<O, any>
  readonly annotations: ToolAnnotations
  /** Extra `_meta` of the tool in tools/list (e.g. an MCP App's resource). */
  readonly meta?: Record<string, unknown> | undefined
  readonly handle: (input: I, context: ToolContext) => Effect.Effect<O, { readonly _tag: string; readonly message: string }, R>
}

export const make = <I, O, R>(tool: Tool<I, O, R>): Tool<I, O, R> => tool

/** JSON Schema of a Schema, as MCP wants it: a plain object schema without the $schema header. */
export const jsonSchema = (schema: Schema.Schema<any, any>): { type: "object"; [key: string]: unknown } => {
  const { $schema: _ignored, ...rest } = JSONSchema.make(schema) as unknown as Record<string, unknown>
  return { ...rest, type: "object" }
}
