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
 * A task belongs to the session of the call that made it (the principal and its key) and is kept
 * for `keepMs` after it was created. Its call's fiber is in this server; its id carries what the
 * task is (TaskIds: the tool, the process, what its result needs), so that where the computer holds
 * its processes another replica — or this one after a restart — answers it too (HeldTasks). A task
 * made before its process was known (a slow computer start) has a plain id: this server's alone.
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import * as FiberMap from "effect/FiberMap"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { CallToolResult } from "@modelcontextprotocol/server"
import { randomBytes } from "node:crypto"
import type { ProgressReporter } from "../../services/Processes.js"
import { CurrentCallSubject, type SubjectCursors } from "../../services/Progress.js"
import * as TaskIds from "./TaskIds.js"

/** The extension's id, in client and server capabilities. */
export const tasksExtension = "io.modelcontextprotocol/tasks"

/** The tools whose calls may become tasks: those that wait on a process. */
export const taskTools: ReadonlySet<string> = new Set(["sandbox_exec", "spawn", "wait"])

/** The `_meta` key of a task's process. */
export const processMeta = "kilntainers/process"

/** Why a task's command was killed when its task was cancelled: any replica reads it back from the process. */
export const cancelReason = "killed with SIGKILL (tasks/cancel of its sandbox_exec task)"

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

/** The id names a task that was not made for this session: another's, forged, or altered. */
export class TaskRefused extends Schema.TaggedError<TaskRefused>()("TaskRefused", { taskId: Schema.String, why: Schema.String }) {
  override get message() {
    return `task '${this.taskId.length > 24 ? `${this.taskId.slice(0, 24)}…` : this.taskId}' refused: ${this.why}`
  }
}

export type Status = "working" | "completed" | "failed" | "cancelled"

interface Entry {
  id: string
  readonly session: string
  readonly tool: string
  readonly createdAt: number
  lastUpdatedAt: number
  status: Status
  statusMessage: string | undefined
  subject: { readonly computer_id: string; readonly pid: string; readonly cursors?: SubjectCursors | undefined } | undefined
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
  /**
   * How much longer a call past `taskAfterMs` that has not started its process yet (a computer
   * being made or attached) is waited for: a task whose id names its process is answered by any
   * replica; past this, the task is this server's alone. Default 10 s.
   */
  readonly namedWithinMs?: number | undefined
}

/**
 * A call becomes a task after a second (most commands are done by then, and answer at once); a task
 * is kept for an hour, and at most a thousand at once.
 */
export const defaults: TasksOptions = { taskAfterMs: 1000, keepMs: 3_600_000, maxTasks: 1000 }

/** Made by `taskAfterMs` and answered by the call itself: a result, or the task that carries on. */
export type Started = { readonly _tag: "Result"; readonly result: CallToolResult } | { readonly _tag: "Task"; readonly task: DetailedTask }

export const pollIntervalMs = 1000

const iso = (millis: number) => new Date(millis).toISOString()

/** A task as tasks/get answers it, from what is known of it (here, or from its process). */
export const detailed = (
  options: TasksOptions,
  task: {
    readonly id: string
    readonly status: Status
    readonly statusMessage?: string | undefined
    readonly createdAt: number
    readonly lastUpdatedAt: number
    readonly result?: CallToolResult | undefined
    readonly subject?: { readonly computer_id: string; readonly pid: string } | undefined
  }
): DetailedTask => ({
  taskId: task.id,
  status: task.status,
  ...(task.statusMessage === undefined ? {} : { statusMessage: task.statusMessage }),
  createdAt: iso(task.createdAt),
  lastUpdatedAt: iso(task.lastUpdatedAt),
  ttlMs: options.keepMs,
  pollIntervalMs,
  ...(task.status === "completed" && task.result !== undefined ? { result: task.result as Record<string, unknown> } : {}),
  ...(task.status === "failed" ? { error: { code: -32603, message: task.statusMessage ?? "the call failed" } } : {}),
  ...(task.subject === undefined ? {} : { _meta: { [processMeta]: { computer_id: task.subject.computer_id, pid: task.subject.pid } } })
})

/**
 * The tasks of one server. Every call that may become a task runs as a fiber of a scoped FiberMap,
 * so a call outlives its request but not the server. `key` signs the ids (TaskIds.keyFrom).
 */
export const make = (options: TasksOptions, key: Buffer) =>
  Effect.gen(function*() {
    const fibers = yield* FiberMap.make<string>()
    const entries = new Map<string, Entry>()
    let seq = 0

    const view = (entry: Entry): DetailedTask => detailed(options, entry)

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
      tool: TaskIds.Claim["tool"],
      call: (progress: ProgressReporter) => Effect.Effect<CallToolResult>,
      killProcess: (pid: string) => Effect.Effect<void>,
      /** sandbox_exec: its timeout (a replica kills a command its server no longer times). */
      timeoutSec?: number
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
        const named = yield* Deferred.make<void>()
        const fiber = yield* FiberMap.run(
          fibers,
          id,
          call(progress).pipe(
            Effect.locally(CurrentCallSubject, (computerId, processId, cursors) => {
              entry.subject = { computer_id: computerId, pid: processId, cursors }
              Deferred.unsafeDone(named, Exit.void)
            }),
            Effect.onExit(settle)
          )
        )
        // A request cancelled before the call became a task cancels the call's wait, as without Tasks.
        const cancelled = Effect.onInterrupt(() => FiberMap.remove(fibers, id))
        let early = yield* cancelled(Effect.timeoutOption(Fiber.join(fiber), options.taskAfterMs))
        if (Option.isNone(early) && entry.subject === undefined) {
          // Not started yet: the call's end or its process, whichever comes first, bounded.
          early = yield* cancelled(Effect.raceFirst(Effect.asSome(Fiber.join(fiber)), Effect.as(Deferred.await(named), Option.none())).pipe(
            Effect.timeoutTo({ duration: options.namedWithinMs ?? 10_000, onSuccess: (done) => done, onTimeout: Option.none })
          ))
        }
        if (Option.isSome(early)) return { _tag: "Result", result: early.value } as const
        // Its process known: an id any replica can answer (the fiber keeps its own key in the map).
        if (entry.subject !== undefined) {
          const { computer_id, cursors, pid } = entry.subject
          entry.id = TaskIds.sign(key, session, {
            tool,
            computer_id,
            pid,
            createdAt: now,
            ...(timeoutSec === undefined ? {} : { timeoutSec }),
            ...(tool === "sandbox_exec" ? {} : { cursors: cursors ?? { stdout: 0, stderr: 0 } })
          })
        }
        entries.set(entry.id, entry)
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

    /** The task, when its call runs (or ran) in this server. */
    const local = (session: string, taskId: string) => Effect.map(Effect.option(find(session, taskId)), Option.map(view))

    return { run, get, cancel, local, options, key, size: Effect.sync(() => entries.size) } as const
  })

export type Tasks = Effect.Effect.Success<ReturnType<typeof make>>
