/** The checks of tool inputs made once, in the service, before anything runs. */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Pattern from "../../domain/Pattern.js"
import { InvalidInput } from "../../domain/Errors.js"

export const validateSize = (name: string, value: number | undefined) =>
  value === undefined || (Number.isInteger(value) && value >= 2 && value <= 1000)
    ? Effect.void
    : new InvalidInput({ message: `${name} must be an integer between 2 and 1000` })

export const validateBudget = (maxBytes: number | undefined) =>
  maxBytes === undefined || (Number.isInteger(maxBytes) && maxBytes >= 1)
    ? Effect.void
    : new InvalidInput({ message: "maxBytes must be an integer >= 1" })

export const validateTimeout = (name: string, value: number | undefined) =>
  value === undefined || value >= 0 ? Effect.void : new InvalidInput({ message: `${name} must be a number >= 0` })

export const matcherOf = (pattern: string | undefined): Effect.Effect<Pattern.Pattern | undefined, InvalidInput> => {
  if (pattern === undefined || pattern === "") return Effect.succeed(undefined)
  const compiled = Pattern.compile(pattern)
  return Either.isLeft(compiled) ? Effect.fail(new InvalidInput({ message: compiled.left })) : Effect.succeed(compiled.right)
}
