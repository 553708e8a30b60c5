/**
 * The Tasks extension's methods on a server instance: `tasks/get`, `tasks/cancel` and
 * `tasks/update` (never needed: no kilntainers task asks for input), for the session the request
 * names, as tools/call is. A task this server made is answered from its store; one whose id carries
 * its process (TaskIds) is checked against the session and answered from the process wherever it
 * was made (HeldTasks) — a sandbox_exec's always so, that every replica agrees.
 */
import { CLIENT_CAPABILITIES_META_KEY, ProtocolError, ProtocolErrorCode, type Server, type ServerContext } from "@modelcontextprotocol/server"
import * as Cause from "effect/Cause"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import * as HeldTasks from "./HeldTasks.js"
import type { SessionOf } from "./McpServer.js"
import * as TaskIds from "./TaskIds.js"
import { detailed, type DetailedTask, TaskNotFound, TaskRefused, type Tasks, tasksExtension } from "./Tasks.js"
import type { CallParts } from "./ToolCall.js"

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Whether the request declared the Tasks extension among its capabilities (2026-07-28 envelope). */
export const acceptsTasks = (ctx: ServerContext): boolean => {
  const capabilities = (ctx.mcpReq.envelope as Record<string, unknown> | undefined)?.[CLIENT_CAPABILITIES_META_KEY]
  return isObject(capabilities) && isObject(capabilities.extensions) && tasksExtension in capabilities.extensions
}

const TaskRef = Schema.standardSchemaV1(Schema.Struct({ taskId: Schema.String }))

type Failure = { readonly message: string }

/** The claim of a carried id issued to this session and not expired; None for a plain id. */
const claimOf = (tasks: Tasks, session: string, taskId: string) =>
  !TaskIds.isCarried(taskId)
    ? Effect.succeedNone
    : Effect.gen(function*() {
      const opened = TaskIds.open(tasks.key, session, taskId)
      if ("refused" in opened) return yield* new TaskRefused({ taskId, why: opened.refused })
      const now = yield* Clock.currentTimeMillis
      if (now - opened.claim.createdAt >= tasks.options.keepMs) return yield* new TaskNotFound({ taskId })
      return Option.some(opened.claim)
    })

/** tasks/get: the store's task; a carried one's from its process (sandbox_exec always, others where no wait of it runs here). */
const get = (tasks: Tasks, parts: CallParts, session: string, taskId: string): Effect.Effect<DetailedTask, Failure> =>
  Effect.gen(function*() {
    const claim = yield* claimOf(tasks, session, taskId)
    const local = yield* tasks.local(session, taskId)
    if (Option.isNone(claim)) return yield* Option.match(local, { onNone: () => Effect.fail(new TaskNotFound({ taskId })), onSome: Effect.succeed })
    if (Option.isSome(local) && claim.value.tool !== "sandbox_exec") return local.value
    const context = yield* Effect.mapError(parts.services, (why) => ({ message: `the ${parts.settings.backend} backend could not start: ${why}` }))
    const held = yield* Effect.either(Effect.provide(HeldTasks.read(parts.settings, parts.catalogue, session, taskId, claim.value), context))
    // A process this server no longer has (a backend whose computers do not hold theirs, its table full): the store's answer.
    if (held._tag === "Left") return yield* Option.match(local, { onNone: () => Effect.fail(held.left), onSome: Effect.succeed })
    const reading = held.right
    return detailed(tasks.options, {
      id: taskId,
      ...reading,
      // Its progress, where its call runs.
      statusMessage: reading.status === "working" ? Option.getOrUndefined(local)?.statusMessage : undefined,
      createdAt: claim.value.createdAt,
      subject: claim.value
    })
  })

/** tasks/cancel: the store's call where it runs here; else the process (HeldTasks.cancel). */
const cancel = (tasks: Tasks, parts: CallParts, session: string, taskId: string): Effect.Effect<void, Failure> =>
  Effect.gen(function*() {
    const claim = yield* claimOf(tasks, session, taskId)
    const local = yield* tasks.local(session, taskId)
    if (Option.isNone(claim) || (Option.isSome(local) && local.value.status === "working")) return yield* tasks.cancel(session, taskId)
    const context = yield* Effect.mapError(parts.services, (why) => ({ message: `the ${parts.settings.backend} backend could not start: ${why}` }))
    yield* Effect.provide(HeldTasks.cancel(session, taskId, claim.value), context)
  })

/** Registers the methods; their failures are JSON-RPC errors with a one-line message. */
export const register = (server: Server, tasks: Tasks, parts: CallParts, sessionOf: SessionOf) => {
  const answer = async <A>(ctx: ServerContext, work: (session: string) => Effect.Effect<A, Failure>) => {
    const found = sessionOf(ctx)
    if ("refused" in found) throw new ProtocolError(ProtocolErrorCode.InvalidParams, found.refused)
    try {
      const exit = await parts.run(work(found.session))
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
    answer(ctx, (session) => get(tasks, parts, session, params.taskId)) as Promise<never>)
  server.setRequestHandler("tasks/cancel", { params: TaskRef }, (params, ctx) =>
    answer(ctx, (session) => Effect.as(cancel(tasks, parts, session, params.taskId), {})))
  server.setRequestHandler("tasks/update", { params: TaskRef }, (params, ctx) =>
    answer(ctx, (session) =>
      Effect.flatMap(get(tasks, parts, session, params.taskId), () =>
        Effect.fail({ message: `task '${params.taskId}' asks for no input: kilntainers tasks never do` }))))
}
