/**
 * The dashboard's "recent activity": the audit log's latest entries for the computers a session may
 * see, each in one line. Present in `computer_dashboard` results, and in `computer_list` results when
 * asked for (`audit: true`, as the dashboard's refresh does), only when there is something to show.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { type AuditEntry, AuditLog } from "../../services/AuditLog.js"

/** Entries a result carries at most. */
export const RECENT_ENTRIES = 20

export const Activity = Schema.Struct({
  time: Schema.String,
  kind: Schema.String.annotations({ description: "process.started, process.ended, file.written, computer or egress" }),
  summary: Schema.String,
  computer_id: Schema.optional(Schema.String)
})
export type Activity = typeof Activity.Type

const cut = (text: string, max = 120) => (text.length <= max ? text : `${text.slice(0, max - 1)}…`)

/** One entry in a line (the entry is already redacted). */
export const summary = (entry: AuditEntry): string => {
  switch (entry.type) {
    case "process.started":
      return `${entry.pid} started: ${cut(entry.command ?? (entry.argv ?? []).join(" "))}`
    case "process.ended": {
      const how = entry.signal !== undefined ? entry.signal : entry.exitCode === null ? "no exit code" : `exit ${entry.exitCode}`
      return `${entry.pid} ended: ${how} after ${(entry.durationMs / 1000).toFixed(1)} s${entry.reason === undefined ? "" : ` (${cut(entry.reason, 80)})`}`
    }
    case "file.written":
      return `${entry.append ? "appended to" : "wrote"} ${cut(entry.path)} (${entry.bytes} bytes)`
    case "computer":
      return `computer ${entry.event}${entry.detail === undefined ? "" : `: ${cut(entry.detail, 80)}`}`
    case "preview":
      return `preview ${entry.event}${entry.port === undefined ? "" : ` of port ${entry.port}`}${entry.reason === undefined ? "" : `: ${cut(entry.reason, 80)}`}`
    case "egress": {
      const target = `${entry.host}:${entry.port}${entry.path === undefined ? "" : cut(entry.path, 60)}`
      return `${entry.method} ${target} ${entry.decision}${entry.status === undefined ? "" : ` ${entry.status}`} (${cut(entry.rule, 80)})`
    }
  }
}

/** The recent entries of these computers, newest last; none without an audit log. */
export const recent = (computers: ReadonlyArray<string>) =>
  Effect.flatMap(Effect.serviceOption(AuditLog), (audit) =>
    Option.isNone(audit)
      ? Effect.succeed<ReadonlyArray<Activity>>([])
      : Effect.map(audit.value.recent(new Set(computers), RECENT_ENTRIES), (entries) =>
        entries.map((entry): Activity => ({ time: entry.time, kind: entry.type, summary: summary(entry), computer_id: entry.computer }))))
