/**
 * The memory that HTTP request bodies may take while they are read and parsed: a budget for the
 * whole server and one for each principal. A body takes what it will cost from both before it is
 * buffered (for all of a declared Content-Length at once, a chunked body chunk by chunk) and gives
 * it back when its request has been answered, so however many clients send at once, the bodies in memory never
 * pass the server's budget, and one principal cannot spend the others' share.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type * as Scope from "effect/Scope"

/** A body would pass a memory budget: refused (503, Retry-After), never buffered. */
export class BodyOverBudget extends Schema.TaggedError<BodyOverBudget>()("BodyOverBudget", {
  /** Whose budget is spent: the whole server's, or the principal's. */
  budget: Schema.Literal("server", "principal"),
  limit: Schema.Number
}) {
  override get message() {
    const mib = Math.round(this.limit / 1024 / 1024)
    return this.budget === "server"
      ? `request bodies being read take ${mib} MiB of memory, the server's limit; try again shortly`
      : `this client's request bodies being read take ${mib} MiB of memory, its limit; try again shortly`
  }
}

export interface BodyBudgetLimits {
  /** Bytes taken at once, all principals together. */
  readonly total: number
  /** Bytes one principal's requests take at once. */
  readonly perPrincipal: number
}

/** One body's share of the budgets: grows as the body arrives, all given back by `release`. */
export interface Reservation {
  /** Takes `bytes` more, or fails without taking anything. */
  readonly grow: (bytes: number) => BodyOverBudget | undefined
  readonly held: () => number
}

export interface BodyBudget {
  /** A reservation of nothing yet, released with the scope (the request). */
  readonly reserve: (principal: string) => Effect.Effect<Reservation, never, Scope.Scope>
  /** Bytes held now: the server's, and each principal's (principals holding nothing are absent). */
  readonly inUse: () => { readonly total: number; readonly byPrincipal: ReadonlyMap<string, number> }
}

/**
 * The budgets of one server. Counting is synchronous (a body's chunks arrive in Node callbacks),
 * and a reservation can never give back more than it took.
 */
export const make = (limits: BodyBudgetLimits): BodyBudget => {
  let total = 0
  const byPrincipal = new Map<string, number>()

  const open = (principal: string) => {
    let held = 0
    let released = false
    const grow = (bytes: number): BodyOverBudget | undefined => {
      // A chunk that arrives after the request was answered is not kept: nothing to count.
      if (released) return undefined
      const mine = byPrincipal.get(principal) ?? 0
      if (total + bytes > limits.total) return new BodyOverBudget({ budget: "server", limit: limits.total })
      if (mine + bytes > limits.perPrincipal) return new BodyOverBudget({ budget: "principal", limit: limits.perPrincipal })
      total += bytes
      byPrincipal.set(principal, mine + bytes)
      held += bytes
      return undefined
    }
    const release = () => {
      if (released) return
      released = true
      total -= held
      const left = (byPrincipal.get(principal) ?? 0) - held
      if (left > 0) byPrincipal.set(principal, left)
      else byPrincipal.delete(principal)
      held = 0
    }
    return { reservation: { grow, held: () => held } satisfies Reservation, release }
  }

  return {
    reserve: (principal) =>
      Effect.map(
        Effect.acquireRelease(Effect.sync(() => open(principal)), (opened) => Effect.sync(opened.release)),
        (opened) => opened.reservation
      ),
    inUse: () => ({ total, byPrincipal: new Map(byPrincipal) })
  }
}
