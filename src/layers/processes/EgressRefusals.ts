/**
 * The egress requests a computer was refused during a call, for that call's result. A refused
 * program says little a model can act on ("CONNECT tunnel failed, response 403"; over plain HTTP,
 * curl exits 0 on the 403 body), so the result names the host, the port and the rule that would
 * allow it. The proxy records every decision, with the computer that asked, in the audit log; its
 * in-memory entries (kept with or without `--audit-log`) are read here, nothing is stored twice.
 * The proxy knows computers, not processes: a refusal is the computer's, during the call.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type { AuditLogShape } from "../../services/AuditLog.js"
import type { EgressRefusal as Refusal } from "../../services/Processes.js"

/** The most refusals a result lists (distinct host and port, the latest kept). */
const MOST = 5
/** How far back the audit entries are read for one call. */
const SCAN = 200

/** `refused(computer, sinceMs)`: the computer's distinct egress refusals since then, oldest first. */
export const make = (audit: Option.Option<AuditLogShape>) => (computer: string, sinceMs: number): Effect.Effect<ReadonlyArray<Refusal>> =>
  Option.match(audit, {
    onNone: () => Effect.succeed([]),
    onSome: (log) =>
      Effect.map(log.recent(new Set([computer]), SCAN), (entries) => {
        const seen = new Map<string, Refusal>()
        for (const entry of entries) {
          if (entry.type !== "egress" || entry.decision !== "denied" || Date.parse(entry.time) < sinceMs) continue
          const key = `${entry.host}:${entry.port}`
          seen.delete(key)
          seen.set(key, { host: entry.host, port: entry.port, reason: entry.rule })
        }
        return [...seen.values()].slice(-MOST)
      })
  })

/** A result's `egress_refused`, when there were any. */
export const field = (refusals: ReadonlyArray<Refusal>) => refusals.length === 0 ? {} : { egress_refused: refusals }

/** The same for a reader of sandbox_exec's stderr (the seeds' clients read only text). */
export const stderrLine = (refusals: ReadonlyArray<Refusal>): string | undefined =>
  refusals.length === 0 ? undefined : `[kilntainers: egress refused: ${refusals.map((r) => r.reason).join("; ")}]`
