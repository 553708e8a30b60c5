/**
 * Every flag's value: from the command line, else from its variables (`KILNTAINERS_<NAME>` first,
 * then the provider's own, such as `FLY_API_TOKEN`), else its default; decoded and range-checked.
 * Variables are read through Effect's `Config`, so tests can give them with a `ConfigProvider`.
 */
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import type { ParsedArgv } from "./ArgvParser.js"
import { ConfigRefused, UsageError } from "./CliError.js"
import type * as Flag from "./Flag.js"
import { type FlagKey, flagTable, type FlagValues, type Source } from "./FlagTable.js"

export interface ResolvedFlags {
  readonly values: FlagValues
  readonly sources: { readonly [K in FlagKey]: Source }
}

/** The words a variable gives: one value, or one per line for a repeatable flag. */
const wordsOf = (flag: Flag.AnyFlag, raw: string): ReadonlyArray<string> =>
  flag.repeatable ? raw.split("\n").map((line) => line.replace(/\r$/, "")).filter((line) => line.trim() !== "") : [raw]

/**
 * The first of the flag's variables that is set. An empty (or blank) variable counts as not set,
 * except for secrets: a token that failed to expand must be refused, never turn authentication off.
 */
const fromVariables = (flag: Flag.AnyFlag) =>
  Effect.gen(function*() {
    for (const name of flag.variables) {
      const raw = yield* Config.option(Config.string(name)).pipe(Effect.orElseSucceed(() => undefined))
      if (raw === undefined || raw._tag === "None") continue
      if (raw.value.trim() === "" && !flag.secret) continue
      return { name, words: wordsOf(flag, raw.value) }
    }
    return undefined
  })

/** Resolves every flag of the table, failing on the first value that is malformed or out of range. */
export const resolveFlags = (argv: ParsedArgv): Effect.Effect<ResolvedFlags, UsageError | ConfigRefused> =>
  resolveTable(argv, flagTable)

/**
 * Resolves the flags of any table (a subcommand's own, such as `kilntainers image build`'s): by key,
 * the value and its source.
 */
export const resolveTable = <T extends Readonly<Record<string, Flag.AnyFlag>>>(argv: ParsedArgv, table: T) =>
  Effect.gen(function*() {
    const values: Record<string, unknown> = {}
    const sources: Record<string, Source> = {}
    for (const [key, flag] of Object.entries(table)) {
      const onLine = argv.given.get(flag.name)
      const variable = onLine === undefined ? yield* fromVariables(flag) : undefined
      if (onLine === undefined && variable === undefined) {
        values[key] = flag.initial
        sources[key] = { _tag: "Default" }
        continue
      }
      const words = onLine ?? variable!.words
      const label = onLine !== undefined ? `--${flag.name}` : variable!.name
      const decoded = flag.repeatable && words.length === 0 ? Either.right(flag.initial) : flag.decode(words)
      if (Either.isLeft(decoded)) {
        return yield* onLine !== undefined
          ? new UsageError({ message: `argument ${label}: ${decoded.left}` })
          : new ConfigRefused({ message: `${label}: ${decoded.left}` })
      }
      const problem = flag.check(decoded.right, label)
      if (problem !== undefined) return yield* new ConfigRefused({ message: problem })
      values[key] = decoded.right
      sources[key] = onLine !== undefined ? { _tag: "CommandLine" } : { _tag: "Variable", name: variable!.name }
    }
    return {
      values: values as { readonly [K in keyof T]: Flag.ValueOf<T[K]> },
      sources: sources as { readonly [K in keyof T]: Source }
    }
  })
