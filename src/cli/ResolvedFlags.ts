/**
 * A command's flags as one @effect/cli `Options` (by key, each value with its source), and the
 * readings resolved: every value typed after its declaration, or the first problem in the table's
 * order as the command's error (`UsageError`, exit 2; `ConfigRefused`, exit 1).
 */
import * as Options from "@effect/cli/Options"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { ConfigRefused, UsageError } from "./CliError.js"
import type * as Flag from "./Flag.js"
import * as FlagOptions from "./FlagOptions.js"
import { type FlagKey, flagTable, type FlagValues } from "./FlagTable.js"

type Table = Readonly<Record<string, Flag.AnyFlag>>

/** What a table's options give: each flag's reading, by key. */
export type Readings<T extends Table> = { readonly [K in keyof T]: FlagOptions.Reading<Flag.ValueOf<T[K]>> }

export interface Resolved<T extends Table> {
  readonly values: { readonly [K in keyof T]: Flag.ValueOf<T[K]> }
  readonly sources: { readonly [K in keyof T]: FlagOptions.Source }
}

export interface ResolvedFlags {
  readonly values: FlagValues
  readonly sources: { readonly [K in FlagKey]: FlagOptions.Source }
}

/**
 * The options of every flag of the table, read at once. Repeatable flags come first: @effect/cli
 * matches a repeated option wherever its words are and then starts over from the first option not
 * yet matched, so each one placed after the single ones would cost a pass over all of them (a
 * quarter of a second at every start, with 12 of 90 repeatable).
 */
export const tableOptions = <T extends Table>(table: T): Options.Options<Readings<T>> => {
  const entries = Object.entries(table)
  const ordered = [...entries.filter(([, flag]) => flag.repeatable), ...entries.filter(([, flag]) => !flag.repeatable)]
  return Options.all(Object.fromEntries(ordered.map(([key, flag]) => [key, FlagOptions.options(flag)]))) as unknown as Options.Options<
    Readings<T>
  >
}

/** Every value and its source, failing on the first value (in the table's order) that cannot be used. */
export const resolve = <T extends Table>(table: T, readings: Readings<T>): Effect.Effect<Resolved<T>, UsageError | ConfigRefused> =>
  Effect.suspend(() => {
    const values: Record<string, unknown> = {}
    const sources: Record<string, FlagOptions.Source> = {}
    for (const key of Object.keys(table)) {
      const reading: FlagOptions.Reading<unknown> = readings[key]!
      if (Either.isLeft(reading.value)) return Effect.fail(reading.value.left)
      values[key] = reading.value.right
      sources[key] = reading.source
    }
    return Effect.succeed({ values, sources } as Resolved<T>)
  })

/** The server's flags resolved. */
export const resolveFlags = (readings: Readings<typeof flagTable>): Effect.Effect<ResolvedFlags, UsageError | ConfigRefused> =>
  resolve(flagTable, readings)
