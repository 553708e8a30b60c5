/**
 * The Tasks extension (`io.modelcontextprotocol/tasks`, MCP 2026-07-28) for the calls that wait on
 * a process: `sandbox_exec`, `spawn` and `wait`. A client that declares the extension in a request's
 * capabilities gets the call's result when it ends within `taskAfterMs`; past that, a task that
 * names the process (`_meta["kilntainers/process"]`), while the call goes on as before — the same
 * tool, the same limits, its progress as the task's status message. `tasks/get` answers its status
 * and, once it has ended, the tool's result; `tasks/cancel` ends it:
 *
 * - `sandbox_exec`: the command's process tree is killed (SIGKILL), as its timeout would;
 * - `spawn` and `wait`: the wait ends, the process keeps running (as when a request is cancelled).
 *
 * A task belongs to the session of the call that made it (the principal and its key), is kept for
 * `keepMs` after it was created, and lives in this server: the call's fiber is here. A task is
 * reached again from any connection of its session; another replica does not know it (see README).
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberMap from "effect/FiberMap"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { CallToolResult } from "@modelcontextprotocol/server"
import { randomBytes } from "node:crypto"
import type { ProgressReporter } from "../../services/Processes.js"
import { CurrentCallSubject } from "../../services/Progress.js"

/** The extension's id, in client and server capabilities. */
export const tasksExtension = "io.modelcontextprotocol/tasks"

/** The tools whose calls may become tasks: those that wait on a process. */
export const taskTools: ReadonlySet<string> = new Set(["sandbox_exec", "spawn", "wait"])

/** The `_meta` key of a task's process. */
export const processMeta = "kilntainers/process"

/** No task of that id belongs to this session (never made, another session's, or expired). */
export class TaskNotFound extends Schema.TaggedError<TaskNotFound>()("TaskNotFound", { taskId: Schema.String }) {
  override get message() {
    return `no task '${this.taskId}' in this session (tasks are kept for an hour, by the server that made them)`
  }
}

/** The task has ended: there is nothing left to cancel. */
export class TaskEnded extends Schema.TaggedError<TaskEnded>()("TaskEnded", { taskId: Schema.String, status: Schema.String }) {
  override get message() {
    return `task '${this.taskId}' has already ${this.status === "cancelled" ? "been cancelled" : this.status}`
  }
}

type Status = "working" | "completed" | "failed" | "cancelled"

interface Entry {
  readonly id: string
  readonly session: string
  readonly tool: string
  readonly createdAt: number
  lastUpdatedAt: number
  status: Status
  statusMessage: string | undefined
  subject: { readonly computer_id: string; readonly pid: string } | undefined
  result: CallToolResult | undefined
  /** Cancels the call: ends its wait, and for sandbox_exec kills its process first. */
  readonly cancel: Effect.Effect<void>
}

/** What tasks/get answers: the task, and its result once completed. */
export interface DetailedTask {
  readonly taskId: string
  readonly status: Status
  readonly statusMessage?: string
  readonly createdAt: string
  readonly lastUpdatedAt: string
  readonly ttlMs: number
  readonly pollIntervalMs: number
  readonly result?: Record<string, unknown>
  readonly error?: { readonly code: number; readonly message: string }
  readonly _meta?: Record<string, unknown>
}

export interface TasksOptions {
  /** A call still waiting after this long becomes a task. */
  readonly taskAfterMs: number
  /** How long a task is kept after it was made. */
  readonly keepMs: number
  /** Most tasks kept at once; past it the oldest ended ones go first. */
  readonly maxTasks: number
}

/**
 * A call becomes a task after a second (most commands are done by then, and answer at once); a task
 * is kept for an hour, and at most a thousand at once.
 */
export const defaults: TasksOptions = { taskAfterMs: 1000, keepMs: 3_600_000, maxTasks: 1000 }

/** Made by `taskAfterMs` and answered by the call itself: a result, or the task that carries on. */
export type Started = { readonly _tag: "Result"; readonly result: CallToolResult } | { readonly _tag: "Task"; readonly task: DetailedTask }

const pollIntervalMs = 1000

/**
 * The tasks of one server. Every call that may become a task runs as a fiber of a scoped FiberMap,
 * so a call outlives its request but not the server.
 */
export const make = (options: TasksOptions) =>
  Effect.gen(function*() {
    const fibers = yield* FiberMap.make<string>()
    const entries = new Map<string, Entry>()
    let seq = 0

    const iso = (millis: number) => new Date(millis).toISOString()

    const view = (entry: Entry): DetailedTask => ({
      taskId: entry.id,
      status: entry.status,
      ...(entry.statusMessage === undefined ? {} : { statusMessage: entry.statusMessage }),
      createdAt: iso(entry.createdAt),
      lastUpdatedAt: iso(entry.lastUpdatedAt),
      ttlMs: options.keepMs,
      pollIntervalMs,
      ...(entry.status === "completed" && entry.result !== undefined ? { result: entry.result as Record<string, unknown> } : {}),
      ...(entry.status === "failed" ? { error: { code: -32603, message: entry.statusMessage ?? "the call failed" } } : {}),
      ...(entry.subject === undefined ? {} : { _meta: { [processMeta]: entry.subject } })
    })

    /** Drops expired tasks, then the oldest ended ones while there are too many. */
    const prune = (now: number) => {
      for (const entry of [...entries.values()]) {
        if (now - entry.createdAt >= options.keepMs && entry.status !== "working") entries.delete(entry.id)
      }
      for (const entry of [...entries.values()]) {
        if (entries.size < options.maxTasks) break
        if (entry.status !== "working") entries.delete(entry.id)
      }
    }

    /**
     * Runs a call (given the progress reporter it should use) that may become a task. The call is
     * forked here, not in the request: the request only waits for it — up to `taskAfterMs`, never
     * racing the work — and the call goes on when the wait loses.
     */
    const run = (
      session: string,
      tool: string,
      call: (progress: ProgressReporter) => Effect.Effect<CallToolResult>,
      killProcess: (pid: string) => Effect.Effect<void>
    ): Effect.Effect<Started> =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        prune(now)
        const id = `t${++seq}-${randomBytes(6).toString("hex")}`
        const touch = Effect.map(Clock.currentTimeMillis, (millis) => {
          entry.lastUpdatedAt = millis
        })
        const entry: Entry = {
          id,
          session,
          tool,
          createdAt: now,
          lastUpdatedAt: now,
          status: "working",
          statusMessage: undefined,
          subject: undefined,
          result: undefined,
          cancel: Effect.suspend(() =>
            Effect.gen(function*() {
              if (tool === "sandbox_exec" && entry.subject !== undefined) yield* killProcess(entry.subject.pid)
              entry.status = "cancelled"
              entry.statusMessage = tool === "sandbox_exec"
                ? "cancelled: its process tree was killed"
                : "cancelled: the wait ended; the process runs on"
              yield* FiberMap.remove(fibers, id)
              yield* touch
            })
          )
        }
        const progress: ProgressReporter = (p) =>
          Effect.zipRight(
            Effect.sync(() => {
              entry.statusMessage = p.message
            }),
            touch
          )
        const settle = (exit: Exit.Exit<CallToolResult>) =>
          Effect.zipRight(
            Effect.sync(() => {
              if (entry.status !== "working") return
              if (Exit.isSuccess(exit)) {
                entry.status = "completed"
                entry.statusMessage = undefined
                entry.result = exit.value
              } else {
                entry.status = "failed"
                entry.statusMessage = "the call failed inside the server"
              }
            }),
            touch
          )
        const fiber = yield* FiberMap.run(
          fibers,
          id,
          call(progress).pipe(
            Effect.locally(CurrentCallSubject, (computerId, processId) => {
              entry.subject = { computer_id: computerId, pid: processId }
            }),
            Effect.onExit(settle)
          )
        )
        // A request cancelled before the call became a task cancels the call's wait, as without Tasks.
        const early = yield* Fiber.join(fiber).pipe(
          Effect.timeoutOption(options.taskAfterMs),
          Effect.onInterrupt(() => FiberMap.remove(fibers, id))
        )
        if (Option.isSome(early)) return { _tag: "Result", result: early.value } as const
        entries.set(id, entry)
        return { _tag: "Task", task: view(entry) } as const
      })

    const find = (session: string, taskId: string) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        prune(now)
        const entry = entries.get(taskId)
        return entry === undefined || entry.session !== session ? Effect.fail(new TaskNotFound({ taskId })) : Effect.succeed(entry)
      })

    const get = (session: string, taskId: string) => Effect.map(find(session, taskId), view)

    const cancel = (session: string, taskId: string) =>
      Effect.flatMap(find(session, taskId), (entry) =>
        entry.status === "working" ? entry.cancel : Effect.fail(new TaskEnded({ taskId, status: entry.status })))

    return { run, get, cancel, size: Effect.sync(() => entries.size) } as const
  })

export type Tasks = Effect.Effect.Success<ReturnType<typeof make>>
