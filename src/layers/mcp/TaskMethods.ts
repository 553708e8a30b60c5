/**
 * The Tasks extension's methods on a server instance: `tasks/get`, `tasks/cancel` and
 * `tasks/update` (never needed: no kilntainers task asks for input), answered from the task store
 * for the session the request names, as tools/call is.
 */
import { CLIENT_CAPABILITIES_META_KEY, ProtocolError, ProtocolErrorCode, type Server, type ServerContext } from "@modelcontextprotocol/server"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { SessionOf } from "./McpServer.js"
import { type Tasks, tasksExtension } from "./Tasks.js"
import type { Run } from "./ToolCall.js"

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Whether the request declared the Tasks extension among its capabilities (2026-07-28 envelope). */
export const acceptsTasks = (ctx: ServerContext): boolean => {
  const capabilities = (ctx.mcpReq.envelope as Record<string, unknown> | undefined)?.[CLIENT_CAPABILITIES_META_KEY]
  return isObject(capabilities) && isObject(capabilities.extensions) && tasksExtension in capabilities.extensions
}

const TaskRef = Schema.standardSchemaV1(Schema.Struct({ taskId: Schema.String }))

/** Registers the methods; their failures are JSON-RPC errors with the store's one-line message. */
export const register = (server: Server, tasks: Tasks, run: Run, sessionOf: SessionOf) => {
  const answer = async <A>(ctx: ServerContext, work: (session: string) => Effect.Effect<A, { readonly message: string }>) => {
    const found = sessionOf(ctx)
    if ("refused" in found) throw new ProtocolError(ProtocolErrorCode.InvalidParams, found.refused)
    try {
      const exit = await run(work(found.session))
      if (Exit.isSuccess(exit)) return exit.value
      const failure = Cause.failureOption(exit.cause)
      throw new ProtocolError(
        Option.isSome(failure) ? ProtocolErrorCode.InvalidParams : ProtocolErrorCode.InternalError,
        Option.match(failure, { onNone: () => "internal error", onSome: (error) => error.message })
      )
    } finally {
      found.done?.()
    }
  }
  server.setRequestHandler("tasks/get", { params: TaskRef }, (params, ctx) =>
    answer(ctx, (session) => tasks.get(session, params.taskId)) as Promise<never>)
  server.setRequestHandler("tasks/cancel", { params: TaskRef }, (params, ctx) =>
    answer(ctx, (session) => Effect.as(tasks.cancel(session, params.taskId), {})))
  server.setRequestHandler("tasks/update", { params: TaskRef }, (params, ctx) =>
    answer(ctx, (session) =>
      Effect.flatMap(tasks.get(session, params.taskId), () =>
        Effect.fail({ message: `task '${params.taskId}' asks for no input: kilntainers tasks never do` }))))
}
