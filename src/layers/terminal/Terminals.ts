/**
 * The Terminals service: a person's view of a TTY process, from the same PTY byte log and
 * rendered screen the agent reads (services/Processes `terminal`). A viewer first gets the bytes
 * the log kept, replayed from the start (exactly what the agent's terminal parsed), or — when the
 * log had to leave bytes out or there are too many — a redraw of the rendered screen; then the
 * bytes after its cursor. Keystrokes and resizes of the one person holding it (TerminalHolds) go
 * through the process's own mailbox, the path of the `stdin` tool.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Stream from "effect/Stream"
import type { ProcessRef } from "../../services/ProcessInputs.js"
import { type ProcessHandle, Processes } from "../../services/Processes.js"
import { type Hold, TerminalHolds, Terminals, type TerminalView, type ViewOptions } from "../../services/Terminals.js"
import { redraw } from "./Redraw.js"

/** The most PTY bytes one view carries; past them (a viewer far behind), it gets a redraw instead. */
export const maxViewBytes = 256 * 1024
/** A follower hears from a quiet terminal this often (who holds it may have changed). */
const heartbeat = Duration.seconds(5)

const iso = (millis: number) => new Date(millis).toISOString()

export const layer = Layer.effect(
  Terminals,
  Effect.gen(function*() {
    const processes = yield* Processes
    const holds = yield* TerminalHolds

    const heldField = (hold: Hold | undefined, mine: string | undefined): TerminalView["held"] =>
      hold === undefined ? undefined : { by: hold.by, since: iso(hold.since), ...(mine === hold.token ? { yours: true as const } : {}) }

    const viewOf = (process: ProcessHandle, options: ViewOptions): Effect.Effect<TerminalView, never> =>
      Effect.gen(function*() {
        const output = yield* process.read({ raw: true, stdoutCursor: options.cursor ?? 0, maxBytes: maxViewBytes, stderrMaxBytes: 0 })
        const screen = output.screen!
        const info = yield* process.info
        const slice = output.stdout
        // Bytes the viewer cannot get (evicted, cut, or a cursor past the end): it redraws the screen.
        const gap = slice.omitted > 0 || (options.cursor !== undefined && options.cursor > slice.total)
        return {
          pid: info.pid,
          computer_id: info.computer_id,
          status: info.status,
          ...(info.exitCode === undefined ? {} : { exitCode: info.exitCode }),
          cols: screen.cols,
          rows: screen.rows,
          ...(gap
            ? { data: redraw(screen), next: slice.total, reset: true as const }
            : { data: slice.text, next: slice.next, ...(options.cursor === undefined ? { reset: true as const } : {}) }),
          held: heldField(yield* holds.current(info.pid), options.hold)
        }
      })

    const view = (session: string, ref: ProcessRef, options: ViewOptions = {}) =>
      Effect.gen(function*() {
        const process = yield* processes.terminal(session, ref)
        if (options.hold !== undefined) yield* holds.renew(process.id, options.hold)
        return yield* viewOf(process, options)
      })

    const follow = (session: string, ref: ProcessRef): Stream.Stream<TerminalView, Effect.Effect.Error<ReturnType<typeof view>>> =>
      Stream.unwrapScoped(Effect.gen(function*() {
        const process = yield* processes.terminal(session, ref)
        // Subscribed before the first view: output after it wakes the next one, none is missed.
        const live = yield* process.subscribe
        let cursor: number | undefined
        let ended = false
        const next = Effect.gen(function*() {
          if (ended) return Option.none<TerminalView>()
          if (cursor !== undefined) {
            // Woken by output (all of it read at once from the log), or by the heartbeat.
            yield* Queue.take(live).pipe(Effect.timeout(heartbeat), Effect.ignore)
            yield* Queue.takeAll(live)
          }
          const seen = yield* viewOf(process, { cursor })
          cursor = seen.next
          ended = seen.status !== "running"
          return Option.some(seen)
        })
        return Stream.repeatEffectOption(Effect.flatMap(next, Option.match({
          onNone: () => Effect.fail(Option.none()),
          onSome: Effect.succeed
        })))
      }))

    const holder = (session: string, ref: ProcessRef, hold: string) =>
      Effect.flatMap(processes.terminal(session, ref), (process) => Effect.as(holds.renew(process.id, hold), process))

    return Terminals.of({
      view,
      follow,
      take: (session, ref, by) => Effect.flatMap(processes.terminal(session, ref), (process) => holds.take(process.id, by)),
      release: (session, ref, hold) => Effect.flatMap(processes.terminal(session, ref), (process) => holds.release(process.id, hold)),
      keys: (session, ref, hold, data) =>
        Effect.flatMap(holder(session, ref, hold), (process) => Effect.as(process.write(data), data.length)),
      renew: (session, ref, hold) => Effect.asVoid(holder(session, ref, hold)),
      resize: (session, ref, hold, cols, rows) => Effect.flatMap(holder(session, ref, hold), (process) => process.resize(cols, rows))
    })
  })
)

