/**
 * Tasks answered from their process, by whichever replica a request lands on: where computers hold
 * their processes (capability `heldProcesses`), the process a task's id names (TaskIds) is found
 * by (computer, handle), and its state is the task's — working while it runs, completed with the
 * tool's result once it ended (built as the tool builds it: Exec.finish, Output), cancelled when
 * it was killed by a cancel. Nothing is kept here: every answer is read from the computer.
 *
 * - `sandbox_exec`: always answered so, even by the server that made the task, so that every
 *   replica agrees; a command past its timeout whose server is gone is killed here, as its server
 *   would have (exit 124). Cancel kills the process tree with a reason every replica reads back.
 * - `spawn` and `wait`: the server that made the task answers from its wait (a pattern, a quiet
 *   spell); another replica runs no wait, so for it the task is its process: working while it
 *   runs, completed with the process's end and its output from the task's cursors once it ended.
 *   Cancel there ends nothing (no wait runs on it) and the process runs on, as it would anyway.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { CallToolResult } from "@modelcontextprotocol/server"
import { Computers } from "../../services/Computers.js"
import { type ProcessHandle, Processes } from "../../services/Processes.js"
import type { SettingsShape } from "../../services/Settings.js"
import * as Exec from "../processes/Exec.js"
import { outputFields, stateOf, withoutRunning } from "../processes/Output.js"
import type { Claim } from "./TaskIds.js"
import { cancelReason, type Status, TaskEnded, TaskNotFound } from "./Tasks.js"
import { type Catalogue, render, type ToolServices } from "./ToolCall.js"

/** A replica gives a command's own server this long past the timeout to kill it before it does. */
const timeoutGraceMs = 2000

/** What a task is now, read from its process. */
export interface Reading {
  readonly status: Status
  readonly lastUpdatedAt: number
  readonly result?: CallToolResult | undefined
}

const processOf = (session: string, taskId: string, claim: Claim) =>
  Effect.flatMap(Processes, (processes) => processes.handle(session, { id: claim.pid, computer_id: claim.computer_id })).pipe(
    Effect.mapError(() => new TaskNotFound({ taskId }))
  )

/**
 * How an ended process ended, alike on every replica: from the computer's record where it holds
 * one (a server that followed the process live did not see another's note of why it ended, and
 * each dates the end by its own clock); else from this server's.
 */
interface End {
  readonly reason: string | undefined
  /** When it ended, and how long it ran. */
  readonly at: number
  readonly ranMs: number
  readonly temporary: boolean
}

const endOf = (session: string, claim: Claim, process: ProcessHandle) =>
  Effect.gen(function*() {
    const info = yield* process.info
    const computer = yield* Effect.option(Effect.flatMap(Computers, (computers) => computers.get(session, claim.computer_id)))
    const record = Option.isNone(computer) ? undefined : yield* Effect.orElseSucceed(computer.value.heldRecord(claim.pid), () => undefined)
    const temporary = Option.isSome(computer) && computer.value.temporary
    if (record?.endedAt !== undefined) {
      const at = record.endedAt
      return { reason: record.note === "" ? info.reason : record.note, at, ranMs: at - record.startedAt, temporary } satisfies End
    }
    const at = info.endedAt === undefined ? yield* Clock.currentTimeMillis : Date.parse(info.endedAt)
    return { reason: info.reason, at, ranMs: at - claim.createdAt, temporary } satisfies End
  })

/** The tool's result for a process that has ended. */
const resultOf = (settings: SettingsShape, catalogue: Catalogue, claim: Claim, process: ProcessHandle, end: End) =>
  Effect.gen(function*() {
    const info = yield* process.info
    const tool = catalogue.byName.get(claim.tool)!
    if (claim.tool === "sandbox_exec") {
      const timeoutSec = claim.timeoutSec ?? settings.timeout
      const timedOut = end.reason === Exec.timeoutReason(timeoutSec)
      const exit = yield* process.exited
      const output = yield* Exec.finish(
        settings,
        process,
        { timeoutSec },
        { computer_id: claim.computer_id, temporary: end.temporary, began: 0, end: end.ranMs },
        { exitCode: timedOut ? 124 : Exec.exitCodeOf(exit), timedOut, budget: { ms: timeoutSec * 1000 } }
      )
      return yield* render(tool, output)
    }
    const cursors = claim.cursors ?? { stdout: 0, stderr: 0 }
    const output = yield* outputFields(process, { stdoutCursor: cursors.stdout, stderrCursor: cursors.stderr, budget: settings.inlineBytes })
    const state = { ...stateOf({ ...info, ...(end.reason === undefined ? {} : { reason: end.reason }) }), ...withoutRunning(output) }
    return yield* render(tool, claim.tool === "wait" ? { ...state, outcome: "exited", waitedMs: Math.max(0, end.at - claim.createdAt) } : state)
  })

/** The task's state from its process (a command past its timeout is killed first). */
export const read = (
  settings: SettingsShape,
  catalogue: Catalogue,
  session: string,
  taskId: string,
  claim: Claim
): Effect.Effect<Reading, TaskNotFound, ToolServices> =>
  Effect.gen(function*() {
    const process = yield* processOf(session, taskId, claim)
    let info = yield* process.info
    const now = yield* Clock.currentTimeMillis
    if (info.status === "running" && claim.tool === "sandbox_exec") {
      const timeoutSec = claim.timeoutSec ?? settings.timeout
      if (now >= claim.createdAt + timeoutSec * 1000 + timeoutGraceMs) {
        yield* process.signal("SIGKILL", Exec.timeoutReason(timeoutSec)).pipe(Effect.ignore)
        yield* process.exited.pipe(Effect.timeout(Duration.seconds(5)), Effect.ignore)
        info = yield* process.info
      }
    }
    if (info.status === "running") return { status: "working", lastUpdatedAt: yield* process.lastActivity }
    const end = yield* endOf(session, claim, process)
    if (claim.tool === "sandbox_exec" && end.reason === cancelReason) return { status: "cancelled", lastUpdatedAt: end.at }
    return { status: "completed", lastUpdatedAt: end.at, result: yield* resultOf(settings, catalogue, claim, process, end) }
  })

/** Cancels the task on a replica: a running command is killed; a spawn or wait has no wait here to end. */
export const cancel = (
  session: string,
  taskId: string,
  claim: Claim
): Effect.Effect<void, TaskNotFound | TaskEnded, ToolServices> =>
  Effect.gen(function*() {
    const process = yield* processOf(session, taskId, claim)
    const info = yield* process.info
    if (info.status !== "running") {
      const end = yield* endOf(session, claim, process)
      return yield* new TaskEnded({ taskId, status: claim.tool === "sandbox_exec" && end.reason === cancelReason ? "cancelled" : "completed" })
    }
    if (claim.tool !== "sandbox_exec") return
    yield* process.signal("SIGKILL", cancelReason).pipe(Effect.ignore)
    yield* process.exited.pipe(Effect.timeout(Duration.seconds(5)), Effect.ignore)
  })
