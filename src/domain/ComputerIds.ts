import * as Effect from "effect/Effect"
import * as Random from "effect/Random"

const adjectives = ["amber", "brisk", "calm", "deft", "eager", "fleet", "gentle", "hardy", "keen", "lucid", "nimble", "steady"]
const nouns = ["badger", "crane", "dolphin", "falcon", "heron", "lynx", "marten", "otter", "puffin", "raven", "tapir", "wren"]

const pick = <A>(items: ReadonlyArray<A>) => Effect.map(Random.nextIntBetween(0, items.length), (i) => items[i]!)

/** A readable computer id such as `steady-otter-a31f`. */
export const generateComputerId: Effect.Effect<string> = Effect.gen(function*() {
  const adjective = yield* pick(adjectives)
  const noun = yield* pick(nouns)
  const suffix = (yield* Random.nextIntBetween(0, 0x10000)).toString(16).padStart(4, "0")
  return `${adjective}-${noun}-${suffix}`
})

export const computerIdPattern = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/

/** Why a string is not a computer id, if it is not. */
export const computerIdProblem = (id: string): string | undefined =>
  computerIdPattern.test(id)
    ? undefined
    : `computer_id ${JSON.stringify(id)} is not valid: use 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit`
