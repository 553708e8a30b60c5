/** What a computer says about itself in `computer_list`/`computer_info`, and the warning before its provider ends it. */
import type { Instance } from "../services/Backend.js"
import type { ComputerInfo } from "../services/Computers.js"

const iso = (millis: number) => new Date(millis).toISOString()

export interface ComputerFacts {
  readonly id: string
  readonly backend: string
  readonly state: string
  readonly temporary: boolean
  readonly instance: Instance | undefined
  readonly createdAt: number
  readonly processes: number
  /** How long before the provider's end of life the info carries a warning (default 10 min). */
  readonly warnBeforeEndMs: number | undefined
  /**
   * A permanent computer on a backend whose computers hold their processes, connected without its
   * agent (it could not start there): its processes end with this server, which it must say.
   */
  readonly unheld?: boolean | undefined
}

/** What a permanent computer whose agent could not start says in its warning. */
export const UNHELD_WARNING =
  "its processes end with this kilntainers server: the computer's agent could not start in it (the server's log says why)"

/** The computer's info at `now` (Clock millis). */
export const computerInfo = (facts: ComputerFacts, now: number): ComputerInfo => {
  const endsAt = facts.instance?.endsAt
  const warnBefore = facts.warnBeforeEndMs ?? 10 * 60_000
  const left = endsAt === undefined ? undefined : endsAt - now
  const ending = left !== undefined && left < warnBefore
    ? left <= 0
      ? `the provider ends this computer at ${iso(endsAt!)} (its maximum runtime there)`
      : `the provider ends this computer in ${Math.ceil(left / 60_000)} min (its maximum runtime there); save your work${
        facts.temporary ? "" : " — a permanent computer can be restarted to continue"
      }`
    : undefined
  const warnings = [ending, facts.unheld === true ? UNHELD_WARNING : undefined].filter((said) => said !== undefined)
  return {
    computer_id: facts.id,
    sandbox_id: facts.instance?.providerId ?? "",
    backend: facts.backend,
    state: facts.state,
    temporary: facts.temporary,
    image: facts.instance?.metadata.image ?? "",
    created_at: iso(facts.createdAt),
    processes: facts.processes,
    ...(endsAt === undefined ? {} : { ends_at: iso(endsAt) }),
    ...(warnings.length === 0 ? {} : { warning: warnings.join("; ") })
  }
}
