/**
 * The command line, read the way argparse reads it (so Kilntainers configurations work): `--flag
 * value` and `--flag=value`, unique prefixes (`--trans http`), repeatable flags, booleans with an
 * optional `=true|false`, `--no-network`. Unlike argparse, the word after a flag is its value even
 * when it starts with a dash (`--docker-run-flag --read-only`), unless it is one of our own flags.
 */
import * as Either from "effect/Either"
import { UsageError } from "./CliError.js"
import type * as Flag from "./Flag.js"

/** What the command line asks for besides serving. */
export type Action = "serve" | "help" | "help-all" | "version" | "print-config"

/** Flags that act instead of serving; they have no variables. */
export const actions: ReadonlyArray<{ readonly names: ReadonlyArray<string>; readonly action: Action; readonly help: string }> = [
  { names: ["-h", "--help"], action: "help", help: "Show this help and exit" },
  { names: ["--help-all"], action: "help-all", help: "Show every option and exit" },
  { names: ["--version"], action: "version", help: "Show the version and exit" },
  {
    names: ["--print-config"],
    action: "print-config",
    help: "Print the options' values and sources as JSON and exit"
  }
]

export interface ParsedArgv {
  readonly action: Action
  /** The words given for each flag (by flag name), in order; booleans get "true"/"false". */
  readonly given: ReadonlyMap<string, ReadonlyArray<string>>
}

const distance = (a: string, b: string): number => {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i)
  for (let i = 1; i <= a.length; i++) {
    const current = [i]
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1))
    }
    previous = current
  }
  return previous[b.length]!
}

/** Parses `argv` (without node and the script) against the flags. */
export const parseArgv = (
  argv: ReadonlyArray<string>,
  flags: ReadonlyArray<Flag.AnyFlag>
): Either.Either<ParsedArgv, UsageError> => {
  const fail = (message: string) => Either.left(new UsageError({ message }))
  const byName = new Map<string, { readonly flag: Flag.AnyFlag; readonly negated: boolean }>()
  for (const flag of flags) {
    byName.set(flag.name, { flag, negated: false })
    if (flag.negatable) byName.set(`no-${flag.name}`, { flag, negated: true })
  }
  const actionByName = new Map<string, Action>()
  for (const { action, names } of actions) for (const name of names) actionByName.set(name, action)
  const longNames = [...[...byName.keys()].map((name) => `--${name}`), ...actionByName.keys()].filter((n) => n.startsWith("--"))

  /** `--fly-ap` → `--fly-app` when unique, as argparse's allow_abbrev does. */
  const resolve = (option: string): Either.Either<string, string> => {
    if (byName.has(option.slice(2)) || actionByName.has(option)) return Either.right(option)
    const candidates = longNames.filter((name) => name.startsWith(option))
    if (candidates.length === 1) return Either.right(candidates[0]!)
    if (candidates.length > 1) return Either.left(`ambiguous option: ${option} could match ${candidates.join(", ")}`)
    const near = longNames.map((name) => [name, distance(option, name)] as const).sort((a, b) => a[1] - b[1])[0]
    const hint = near !== undefined && near[1] <= 3 ? ` (did you mean ${near[0]}?)` : ""
    return Either.left(`unrecognized argument: ${option}${hint}`)
  }
  const isOurFlag = (word: string) => word.startsWith("--") && Either.isRight(resolve(word.split("=")[0]!))

  // Help wins wherever it is, even over mistakes elsewhere on the line.
  const beforeDashes = argv.indexOf("--") < 0 ? argv : argv.slice(0, argv.indexOf("--"))
  if (beforeDashes.includes("--help-all")) return Either.right({ action: "help-all", given: new Map() })
  if (beforeDashes.includes("-h") || beforeDashes.includes("--help")) return Either.right({ action: "help", given: new Map() })

  let action: Action = "serve"
  const given = new Map<string, Array<string>>()
  const add = (flag: Flag.AnyFlag, word: string) => {
    const words = flag.repeatable ? given.get(flag.name) ?? [] : []
    words.push(word)
    given.set(flag.name, words)
  }
  for (let i = 0; i < argv.length; i++) {
    const word = argv[i]!
    if (word === "--") {
      if (i + 1 < argv.length) return fail(`unrecognized arguments: ${argv.slice(i + 1).join(" ")}`)
      continue
    }
    if (!word.startsWith("--")) return fail(`unrecognized arguments: ${word}`)
    const at = word.indexOf("=")
    const option = at < 0 ? word : word.slice(0, at)
    const resolved = resolve(option)
    if (Either.isLeft(resolved)) return fail(resolved.left)
    const asAction = actionByName.get(resolved.right)
    if (asAction !== undefined) {
      if (at >= 0) return fail(`argument ${resolved.right}: ignored explicit argument '${word.slice(at + 1)}'`)
      if (action === "serve") action = asAction
      continue
    }
    const { flag, negated } = byName.get(resolved.right.slice(2))!
    const label = `argument --${flag.name}`
    if (!flag.takesValue) {
      if (negated && at >= 0) return fail(`argument ${resolved.right}: ignored explicit argument '${word.slice(at + 1)}'`)
      add(flag, negated ? "false" : at >= 0 ? word.slice(at + 1) : "true")
      continue
    }
    if (at >= 0) {
      add(flag, word.slice(at + 1))
      continue
    }
    const next = argv[i + 1]
    if (next === undefined || isOurFlag(next)) return fail(`${label}: expected one argument`)
    add(flag, next)
    i++
  }
  return Either.right({ action, given })
}
