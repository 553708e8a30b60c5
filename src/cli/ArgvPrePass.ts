/**
 * The one pass over argv before @effect/cli reads it, for what Kilntainers' argparse command line
 * accepted and @effect/cli does not. It only rewrites words; @effect/cli finds the options, their
 * values, the variables and the defaults. What it does, each for a reason:
 *
 * - `-h`, `--help` or `--help-all` anywhere before `--`: the line becomes that word alone (help
 *   answers whatever else is on the line, as argparse's does).
 * - Unique prefixes of long options are expanded (`--trans http`); an ambiguous or unknown option is
 *   refused here, with its candidates or the nearest name (argparse's `allow_abbrev`).
 * - `--flag=value` becomes `--flag value`: @effect/cli splits it only for options given once, not
 *   for repeated ones (`--docker-run-flag=--read-only`).
 * - A value that is missing, or is one of our options, is refused (`--image --network`: argparse's
 *   "expected one argument"); @effect/cli would take the option as the value.
 * - An option given twice that takes one value keeps the last (`--timeout 5 --timeout 7`, `--network
 *   --no-network`), as argparse does; @effect/cli refuses the second.
 * - A switch's explicit value (`--network=false`) must be true or false, and a built-in's value one of
 *   its choices (@effect/cli would read a line whose built-in it cannot read as the command's own).
 * - @effect/cli reads its built-in options (`--version`, `--completions`) only at the head of a
 *   command's words: they are moved there.
 * - A word that is no option, or anything after `--`, is refused: our commands take no arguments,
 *   and @effect/cli would try it as a subcommand's name.
 */
import * as AutoCorrect from "@effect/cli/AutoCorrect"
import * as CliConfig from "@effect/cli/CliConfig"
import * as Either from "effect/Either"
import { UsageError } from "./CliError.js"

/** How a long option is written: `--name`, with a value or not, once or repeatedly, `--no-name`. */
export interface Spelling {
  readonly name: string
  readonly takesValue: boolean
  readonly repeatable: boolean
  readonly negatable: boolean
  /** An @effect/cli built-in, read only at the head of the line. */
  readonly builtIn?: boolean
  /** A built-in's values: @effect/cli tries a line whose built-in it cannot read as the command's own. */
  readonly choices?: ReadonlyArray<string>
}

/** How an option of ours is written (its values are its own to check). */
export const spellingOf = (option: Omit<Spelling, "builtIn" | "choices">): Spelling => ({
  name: option.name,
  takesValue: option.takesValue,
  repeatable: option.repeatable,
  negatable: option.negatable
})

const HELP = new Set(["-h", "--help", "--help-all"])
const TRUE = new Set(["true", "1", "y", "yes", "on"])
const FALSE = new Set(["false", "0", "n", "no", "off"])

interface Occurrence {
  readonly spelling: Spelling
  readonly words: ReadonlyArray<string>
}

/** The words for @effect/cli, or why the line cannot be read. */
export const prepare = (argv: ReadonlyArray<string>, spellings: ReadonlyArray<Spelling>): Either.Either<ReadonlyArray<string>, UsageError> => {
  const fail = (message: string) => Either.left(new UsageError({ message }))
  const end = argv.indexOf("--")
  const help = (end < 0 ? argv : argv.slice(0, end)).filter((word) => HELP.has(word))
  const helpAll = help.includes("--help-all") && spellings.some((spelling) => spelling.name === "help-all")
  if (help.length > 0) return Either.right([helpAll ? "--help-all" : "--help"])

  const byName = new Map<string, { readonly spelling: Spelling; readonly negated: boolean }>()
  for (const spelling of spellings) {
    byName.set(`--${spelling.name}`, { spelling, negated: false })
    if (spelling.negatable) byName.set(`--no-${spelling.name}`, { spelling, negated: true })
  }
  const names = [...byName.keys()]
  const resolve = (option: string): Either.Either<string, string> => {
    if (byName.has(option)) return Either.right(option)
    const candidates = names.filter((name) => name.startsWith(option))
    if (candidates.length === 1) return Either.right(candidates[0]!)
    if (candidates.length > 1) return Either.left(`ambiguous option: ${option} could match ${candidates.join(", ")}`)
    const config = CliConfig.make({ isCaseSensitive: true })
    const near = names.map((name) => [name, AutoCorrect.levensteinDistance(option, name, config)] as const).sort((a, b) => a[1] - b[1])[0]
    return Either.left(`unrecognized argument: ${option}${near !== undefined && near[1] <= 3 ? ` (did you mean ${near[0]}?)` : ""}`)
  }
  const isOption = (word: string) => word.startsWith("--") && word !== "--" && Either.isRight(resolve(word.split("=")[0]!))

  const occurrences: Array<Occurrence> = []
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i]!
    // Our commands take no arguments, after `--` or anywhere else.
    if (word === "--") {
      if (i + 1 < argv.length) return fail(`unrecognized arguments: ${argv.slice(i + 1).join(" ")}`)
      continue
    }
    if (!word.startsWith("--")) return fail(`unrecognized arguments: ${word}`)
    const at = word.indexOf("=")
    const resolved = resolve(at < 0 ? word : word.slice(0, at))
    if (Either.isLeft(resolved)) return fail(resolved.left)
    const { negated, spelling } = byName.get(resolved.right)!
    const explicit = at < 0 ? undefined : word.slice(at + 1)
    if (!spelling.takesValue) {
      if (explicit === undefined) {
        occurrences.push({ spelling, words: [resolved.right] })
        continue
      }
      if (negated) return fail(`argument ${resolved.right}: ignored explicit argument '${explicit}'`)
      const lower = explicit.trim().toLowerCase()
      if (!TRUE.has(lower) && !FALSE.has(lower)) return fail(`argument ${resolved.right}: expected true or false, got '${explicit}'`)
      occurrences.push({ spelling, words: [resolved.right, TRUE.has(lower) ? "true" : "false"] })
      continue
    }
    const value = explicit ?? argv[i + 1]
    if (value === undefined || (explicit === undefined && isOption(value))) return fail(`argument ${resolved.right}: expected one argument`)
    if (explicit === undefined) i++
    if (spelling.choices !== undefined && !spelling.choices.includes(value)) {
      return fail(`argument ${resolved.right}: invalid choice: '${value}' (choose from ${spelling.choices.join(", ")})`)
    }
    occurrences.push({ spelling, words: [resolved.right, value] })
  }

  // The last occurrence of an option given once wins; built-ins go first.
  const kept = occurrences.filter((occurrence, index) =>
    occurrence.spelling.repeatable || !occurrences.slice(index + 1).some((later) => later.spelling === occurrence.spelling)
  )
  const builtIns = kept.filter((occurrence) => occurrence.spelling.builtIn === true)
  const others = kept.filter((occurrence) => occurrence.spelling.builtIn !== true)
  return Either.right([...builtIns, ...others].flatMap((occurrence) => occurrence.words))
}
