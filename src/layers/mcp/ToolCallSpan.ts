/**
 * The span of one tool call, after OpenTelemetry's MCP conventions: `tools/call <tool>`, server kind,
 * a child of the client's span when the request's `_meta` carries `traceparent` (SEP-414). It says
 * which tool, session, computer and process the call concerned, and how it ended: `error.type` is
 * `tool_error` for a result with `isError` (`kilntainers.error` gives the error's tag), and the
 * size of the result in bytes. Never the arguments or the output.
 */
import type { CallToolResult } from "@modelcontextprotocol/server"
import * as Effect from "effect/Effect"
import { ClientSpan, fromMeta } from "../tracing/TraceContext.js"
import { annotate, Attr, type Attributes, enabled, span } from "../../services/Spans.js"

export interface ToolCall {
  /** The tool's name as the client sent it (cut: it may be anything). */
  readonly tool: string
  /** The session the call belongs to (`stdio` on the stdio transport). */
  readonly session: string
  /** The transport's MCP session id, when it has one (Streamable HTTP). */
  readonly sessionId: string | undefined
  readonly requestId: string | number
  readonly meta: Readonly<Record<string, unknown>>
  readonly arguments: unknown
  readonly client: { readonly name: string; readonly version: string } | undefined
}

const encoder = new TextEncoder()

const stringField = (value: unknown, key: string) =>
  typeof value === "object" && value !== null && key in value && typeof (value as Record<string, unknown>)[key] === "string"
    ? (value as Record<string, string>)[key]
    : undefined

/** Which computer and process the call concerned: from its result, else from its arguments. */
const subjects = (args: unknown, result: CallToolResult | undefined): Attributes => {
  const structured = result?.structuredContent
  const computer = stringField(structured, "computer_id") ?? stringField(args, "computer_id")
  const process = stringField(structured, "pid") ?? stringField(args, "id")
  return {
    ...(computer === undefined || computer === "" ? {} : { [Attr.computerId]: computer }),
    ...(process === undefined || process === "" ? {} : { [Attr.processId]: process })
  }
}

const resultBytes = (result: CallToolResult) =>
  result.content.reduce((total, item) => total + (item.type === "text" ? encoder.encode(item.text).length : 0), 0)

/** Why a call whose result has `isError` failed, for the span (the result itself goes to the client unchanged). */
class ToolError {
  constructor(readonly _tag: string, readonly message: string, readonly result: CallToolResult) {}
}

/**
 * Runs a tool call in its span. `call` answers with the result (an `isError` result for a failure
 * the agent should read) or fails with the tagged error that `render` turns into that result.
 */
export const traced = <E extends { readonly _tag: string; readonly message: string }, R>(
  info: ToolCall,
  call: Effect.Effect<CallToolResult, E, R>,
  render: (error: E) => CallToolResult
): Effect.Effect<CallToolResult, never, R> =>
  Effect.flatMap(enabled, (on) => {
    if (!on) return Effect.catchAll(call, (error) => Effect.succeed(render(error)))
    return Effect.gen(function*() {
      const clientSpan = yield* ClientSpan
      const parent = fromMeta(info.meta)
      const tool = info.tool.length > 64 ? `${info.tool.slice(0, 64)}…` : info.tool
      let failure: E | undefined
      return yield* call.pipe(
        Effect.catchAll((error) => {
          failure = error
          return Effect.succeed(render(error))
        }),
        Effect.tap((result) => annotate(() => ({ ...subjects(info.arguments, result), "kilntainers.result.bytes": resultBytes(result) }))),
        // An isError result is a failed call for the span: error.type tool_error, kilntainers.error its tag, status ERROR.
        Effect.flatMap((result) => {
          if (result.isError !== true) return Effect.succeed(result)
          const text = result.content[0]?.type === "text" ? result.content[0].text : ""
          return Effect.fail(new ToolError(failure?._tag ?? "ToolError", failure?.message ?? text, result))
        }),
        span(`tools/call ${tool}`, {
          kind: "server",
          parent: parent === undefined ? undefined : clientSpan(parent),
          errorType: "tool_error",
          attributes: () => ({
            "mcp.method.name": "tools/call",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "jsonrpc.request.id": String(info.requestId),
            "network.transport": info.sessionId === undefined ? "pipe" : "tcp",
            [Attr.session]: info.session,
            ...(info.sessionId === undefined ? {} : { "mcp.session.id": info.sessionId }),
            ...(info.client === undefined ? {} : { "kilntainers.client.name": info.client.name, "kilntainers.client.version": info.client.version })
          })
        }),
        Effect.catchAll((failed) => Effect.succeed(failed.result))
      )
    })
  })
