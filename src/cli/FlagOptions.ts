/**
 * A flag as an @effect/cli `Options`: the command line, else its variables through `Config`
 * (`Options.withFallbackConfig`: `KILNTAINERS_<NAME>` first, then the seeds' and providers' own),
 * else its default — each value with where it came from, decoded and range-checked by the flag.
 *
 * @effect/cli reads every value as text and the flag decodes it, so that an error names the flag
 * and where the value came from (`argument --port: invalid int value: 'x'`, `KILNTAINERS_PORT: …`);
 * its typed primitives would say "'x' is not a integer" for whichever option it was. A value that
 * cannot be used does not fail the parse: it is carried as a `Problem` and the command reports the
 * first one in the table's order with its exit code (2 for the command line, 1 for a variable or a
 * value out of range), where @effect/cli would merge several failures into one untyped message.
 */
import * as HelpDoc from "@effect/cli/HelpDoc"
import * as Options from "@effect/cli/Options"
import * as ValidationError from "@effect/cli/ValidationError"
import * as Config from "effect/Config"
import * as ConfigError from "effect/ConfigError"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { ConfigRefused, UsageError } from "./CliError.js"
import type * as Flag from "./Flag.js"

/** Where a value came from: the command line, a variable (its name) or the default. */
export type Source = { readonly _tag: "CommandLine" } | { readonly _tag: "Variable"; readonly name: string } | {
  readonly _tag: "Default"
}

/** A flag's value as read, or why it cannot be used. */
export interface Reading<A> {
  readonly source: Source
  readonly value: Either.Either<A, UsageError | ConfigRefused>
}

/** The words given, before the flag decodes them. */
interface Given {
  readonly source: Source
  readonly words: ReadonlyArray<string>
}

const commandLine: Source = { _tag: "CommandLine" }

/** The words a variable gives: one value, or one per line for a repeatable flag. */
const wordsOf = (flag: Flag.AnyFlag, raw: string): ReadonlyArray<string> =>
  flag.repeatable ? raw.split("\n").map((line) => line.replace(/\r$/, "")).filter((line) => line.trim() !== "") : [raw]

/**
 * The first of the flag's variables that is set, else the default. An empty (or blank) variable
 * counts as not set, except for secrets: a token that failed to expand must be refused, never turn
 * authentication off. Never fails, so the option's own default is never reached.
 */
const fromVariables = (flag: Flag.AnyFlag): Config.Config<Given> => {
  const variable = (name: string) =>
    Config.string(name).pipe(
      Config.mapOrFail((raw) =>
        raw.trim() === "" && !flag.secret
          ? Either.left(ConfigError.MissingData([name], `${name} is empty`))
          : Either.right<Given>({ source: { _tag: "Variable", name }, words: wordsOf(flag, raw) })
      )
    )
  const first = flag.variables.map(variable).reduce<Config.Config<Given> | undefined>(
    (earlier, next) => (earlier === undefined ? next : Config.orElse(earlier, () => next)),
    undefined
  )
  const unset: Given = { source: { _tag: "Default" }, words: [] }
  return first === undefined ? Config.succeed(unset) : Config.withDefault(first, unset)
}

const absent = (name: string) => ValidationError.missingValue(HelpDoc.p(`--${name} was not given`))

/** What the command line gives: one value, every value of a repeatable flag, or a switch. */
type OnTheLine = string | ReadonlyArray<string> | boolean

/** The command line's words, else the variables' (a `Given`, which says where it came from). */
const lineOrVariables = (flag: Flag.AnyFlag): Options.Options<OnTheLine | Given> => {
  if (flag.kind === "boolean") {
    // Options.boolean brings its own default (false), which would hide the variables: the config
    // fallback sits inside it and never leaves it a missing value (fromVariables never fails).
    const negationNames = flag.negatable ? [`no-${flag.name}`] : []
    return Options.boolean(flag.name, { negationNames }).pipe(
      Options.withDescription(flag.help),
      Options.withFallbackConfig(fromVariables(flag))
    )
  }
  const text = Options.text(flag.name).pipe(Options.withPseudoName(flag.metavar ?? "VALUE"), Options.withDescription(flag.help))
  const line: Options.Options<OnTheLine> = flag.repeatable
    ? text.pipe(
      Options.repeated,
      // Not given: missing, so that the variables are read (a repeated option alone would be []).
      Options.mapEffect((words) => words.length === 0 ? Effect.fail(absent(flag.name)) : Effect.succeed(words))
    )
    : text
  return line.pipe(Options.withFallbackConfig(fromVariables(flag)))
}

const isGiven = (value: OnTheLine | Given): value is Given => typeof value === "object" && !Array.isArray(value)

const fromLine = (value: OnTheLine): Given => ({
  source: commandLine,
  words: typeof value === "string" ? [value] : typeof value === "boolean" ? [String(value)] : value
})

/** The words as the flag's value, or the problem with them, named after where they came from. */
const decode = <A>(flag: Flag.Flag<A>, given: Given): Reading<A> => {
  const { source, words } = given
  if (source._tag === "Default" || (flag.repeatable && words.length === 0)) return { source, value: Either.right(flag.initial) }
  const label = source._tag === "CommandLine" ? `--${flag.name}` : source.name
  const decoded = flag.decode(words)
  if (Either.isLeft(decoded)) {
    return {
      source,
      value: Either.left(
        source._tag === "CommandLine"
          ? new UsageError({ message: `argument ${label}: ${decoded.left}` })
          : new ConfigRefused({ message: `${label}: ${decoded.left}` })
      )
    }
  }
  const problem = flag.check(decoded.right, label)
  return { source, value: problem === undefined ? Either.right(decoded.right) : Either.left(new ConfigRefused({ message: problem })) }
}

/** The flag as an option of its command. */
export const options = <A>(flag: Flag.Flag<A>): Options.Options<Reading<A>> =>
  lineOrVariables(flag).pipe(Options.map((value) => decode(flag, isGiven(value) ? value : fromLine(value))))
