import * as Either from "effect/Either"
import { constants } from "node:os"

const byName = constants.signals as Readonly<Record<string, number>>
const byNumber = new Map(Object.entries(byName).map(([name, n]) => [n, name]))

/** Accepts `SIGTERM`, `TERM`, `term` or `15`; answers the canonical name or a clear message. */
export const normalizeSignal = (input: string): Either.Either<string, string> => {
  const trimmed = input.trim()
  if (/^\d+$/.test(trimmed)) {
    const name = byNumber.get(Number(trimmed))
    return name ? Either.right(name) : Either.left(`unknown signal number ${trimmed}`)
  }
  const upper = trimmed.toUpperCase()
  const name = upper.startsWith("SIG") ? upper : `SIG${upper}`
  return name in byName
    ? Either.right(name)
    : Either.left(`unknown signal '${input}' (use a name such as SIGTERM, SIGINT, SIGKILL, SIGHUP, or a number)`)
}

/** The number of a canonical signal name. */
export const signalNumber = (name: string): number | undefined => byName[name]

/** The canonical name of a signal number. */
export const signalName = (n: number): string | undefined => byNumber.get(n)
