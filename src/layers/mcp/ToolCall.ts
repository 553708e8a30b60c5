/**
 * One `tools/call`, from the raw request to its result. Every call comes here, malformed or not: a
 * model reads tool results, not protocol errors, so a call without a name, with arguments that are
 * not an object or that do not decode gets an `isError` result it can act on. A known tool's input
 * is decoded with its Schema, its service call runs as an Effect with the request's AbortSignal and
 * progress token, and its output is encoded with its Schema.
 */
import type { CallToolResult, ServerContext } from "@modelcontextprotocol/server"
import * as Cause from "effect/Cause"
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Schema from "effect/Schema"
import type { Computers } from "../../services/Computers.js"
import type { Files } from "../../services/Files.js"
import type { Previews } from "../../services/Previews.js"
import { Processes, type ProgressReporter } from "../../services/Processes.js"
import { CurrentCallBudget, CurrentProgress } from "../../services/Progress.js"
import type { SettingsShape } from "../../services/Settings.js"
import type { Terminals } from "../../services/Terminals.js"
import * as ArgumentErrors from "../../domain/ArgumentErrors.js"
import { cancelReason, type Tasks, taskTools } from "./Tasks.js"
import type * as Tool from "./Tool.js"
import * as ToolCallSpan from "./ToolCallSpan.js"

/** What tool calls use: the runtime's services over the backend. */
export type ToolServices = Processes | Computers | Files | Previews | Terminals

/** The tools of one server and what tools/list says of them. */
export interface Catalogue {
  readonly byName: ReadonlyMap<string, Tool.Tool<any, any, ToolServices>>
  readonly inputSchemas: ReadonlyMap<string, ReturnType<typeof Tool.jsonSchema>>
  readonly listed: ReadonlyArray<Record<string, unknown>>
}

/** Runs an Effect to its Exit in the server's runtime (cancelled with the signal). */
export type Run = <A, E>(effect: Effect.Effect<A, E>, options?: { readonly signal?: AbortSignal }) => Promise<Exit.Exit<A, E>>

/** What a call needs besides its request: made once, shared by every call. */
export interface CallParts {
  readonly settings: SettingsShape
  readonly catalogue: Catalogue
  readonly run: Run
  /** The services once the backend has started, or why it could not. */
  readonly services: Effect.Effect<Context.Context<ToolServices>, string>
  /** Where calls that outlive their short budget become tasks (Tasks extension), when served. */
  readonly tasks: Tasks | undefined
}

/** Who the call is for: its session (which computers it sees), and what its span says of it. */
export interface Caller {
  readonly session: string
  readonly sessionId: string | undefined
  readonly client: { readonly name: string; readonly version: string } | undefined
  /** The request declared the Tasks extension: a long wait may become a task. */
  readonly acceptsTasks: boolean
}

/** A tools/call answered with a task instead of its result (Tasks extension). */
export interface TaskCreated {
  readonly resultType: "task"
  readonly [key: string]: unknown
}

const text = (value: string): CallToolResult["content"] => [{ type: "text", text: value }]

export const errorResult = (message: string): CallToolResult => ({ isError: true, content: text(message) })

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

const isTaskTool = (name: string): name is "sandbox_exec" | "spawn" | "wait" => taskTools.has(name)

/** A sandbox_exec's timeout in seconds, as Exec.plan takes it (the input decodes later; a bad one fails there). */
const execTimeoutSec = (settings: SettingsShape, args: unknown) => {
  const given = isObject(args) ? args.timeout : undefined
  return typeof given === "number" ? given : settings.timeout
}

/** The progress reporter of a call whose `_meta` carries a progress token. */
const progressOf = (meta: Record<string, unknown>, ctx: ServerContext): ProgressReporter | undefined => {
  const token = meta.progressToken
  if (typeof token !== "string" && typeof token !== "number") return undefined
  return (p) =>
    Effect.tryPromise(() => ctx.mcpReq.notify({ method: "notifications/progress", params: { progressToken: token, ...p } })).pipe(
      Effect.ignore
    )
}

/** The call's Effect: decode, handle, encode; a tagged failure for what the agent should read. */
const outcome = (
  catalogue: Catalogue,
  call: Record<string, unknown>,
  session: string,
  progress: ProgressReporter | undefined
): Effect.Effect<CallToolResult, { readonly _tag: string; readonly message: string }, ToolServices> => {
  const invalid = (message: string) => Effect.fail({ _tag: "InvalidInput", message })
  const name = typeof call.name === "string" ? call.name : ""
  const tool = catalogue.byName.get(name)
  const args = call.arguments === undefined ? {} : call.arguments
  if (typeof call.name !== "string") return invalid("tools/call needs the tool's name (params.name, a string)")
  if (tool === undefined) return Effect.succeed(errorResult(`unknown tool '${name}'; available: ${[...catalogue.byName.keys()].join(", ")}`))
  if (!isObject(args)) {
    return invalid(`invalid arguments for ${tool.name}: arguments must be an object of named arguments, not ${ArgumentErrors.kindOf(args)}`)
  }
  return Schema.decodeUnknown(tool.input)(args, { onExcessProperty: "error", errors: "all" }).pipe(
    Effect.mapError((error) => ({
      _tag: "InvalidInput",
      message: ArgumentErrors.describe(tool.name, catalogue.inputSchemas.get(tool.name)!, args, error)
    })),
    Effect.flatMap((input) => tool.handle(input, { session, progress })),
    Effect.locally(CurrentProgress, progress),
    Effect.flatMap((output) => render(tool, output))
  )
}

/** A tool's output as its result: encoded with its Schema, and as the text an agent reads. */
export const render = <O>(tool: Tool.Tool<any, O, ToolServices>, output: O): Effect.Effect<CallToolResult> =>
  Schema.encode(tool.output)(output).pipe(
    Effect.orDie,
    Effect.map((encoded): CallToolResult => ({
      // Compact: every byte of a result costs the agent context.
      content: text(JSON.stringify(tool.text ? tool.text(encoded) : encoded)),
      structuredContent: encoded as Record<string, unknown>
    }))
  )

/**
 * Answers one `tools/call` (its raw params) for a caller. Never rejects: a failure the agent should
 * read, a backend that could not start, a cancelled call and a defect are all results. A call that
 * may become a task runs in the task store, which answers with its result or, past the short
 * budget, with the task.
 */
export const callTool = async (parts: CallParts, params: unknown, ctx: ServerContext, caller: Caller): Promise<CallToolResult | TaskCreated> => {
  const call = isObject(params) ? params : {}
  const meta = isObject(call._meta) ? call._meta : {}
  const name = typeof call.name === "string" ? call.name : ""
  const program = (progress: ProgressReporter | undefined) =>
    ToolCallSpan.traced(
      {
        tool: name,
        session: caller.session,
        sessionId: caller.sessionId,
        requestId: ctx.mcpReq.id,
        meta,
        arguments: call.arguments === undefined ? {} : call.arguments,
        client: caller.client
      },
      // A client that hears no progress gets an answer within --max-call-ms, whatever the call waits on.
      Effect.locally(outcome(parts.catalogue, call, caller.session, progress), CurrentCallBudget, progress === undefined ? parts.settings.maxCallMs : undefined),
      // No structuredContent on errors: clients validate it against the tool's outputSchema.
      (error) => errorResult(`${error._tag}: ${error.message}`)
    )
  const taskTool = caller.acceptsTasks && isTaskTool(name) ? name : undefined
  const tasks = taskTool === undefined ? undefined : parts.tasks
  const answer = (context: Context.Context<ToolServices>): Effect.Effect<CallToolResult | TaskCreated> =>
    tasks === undefined || taskTool === undefined
      ? Effect.provide(program(progressOf(meta, ctx)), context)
      : Effect.map(
        tasks.run(
          caller.session,
          taskTool,
          // The task's progress is its status message; the client polls tasks/get for it.
          (progress) => Effect.provide(program(progress), context),
          // Killed with a reason any replica reads back: the task was cancelled (HeldTasks).
          (pid) =>
            Effect.provide(
              Effect.ignore(Effect.flatMap(Processes, (p) =>
                Effect.flatMap(p.handle(caller.session, { id: pid }), (process) => process.signal("SIGKILL", cancelReason)))),
              context
            ),
          name === "sandbox_exec" ? execTimeoutSec(parts.settings, call.arguments) : undefined
        ),
        (started) => started._tag === "Result" ? started.result : { resultType: "task" as const, ...started.task }
      )
  const withServices = Effect.flatMap(Effect.either(parts.services), (started) =>
    started._tag === "Left"
      ? Effect.succeed(errorResult(`the ${parts.settings.backend} backend could not start: ${started.left}`))
      : answer(started.right))
  const exit = await parts.run(withServices, { signal: ctx.mcpReq.signal })
  if (Exit.isSuccess(exit)) return exit.value
  if (Cause.isInterruptedOnly(exit.cause)) return errorResult("the call was cancelled")
  await parts.run(Effect.logError("tool call failed", exit.cause))
  return errorResult(`internal error in ${name}: ${Cause.pretty(exit.cause).split("\n")[0]}`)
}
