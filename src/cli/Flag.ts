/**
 * One command-line flag: its name, where `--help` lists it, its `KILNTAINERS_*` variable, its
 * default, how its words become a value and which values are in range. The flag table
 * (`FlagTable.ts`) is a record of these; the parser, the variables, the help and the settings all
 * read it, so a flag is added in one place.
 */
import * as Either from "effect/Either"
import * as Redacted from "effect/Redacted"

/** The backends a flag can apply to (`go_busybox` is `toolset`; `auto` is docker or host). */
export type BackendName = "host" | "docker" | "fly" | "e2b" | "modal" | "kubernetes" | "wasm" | "toolset"

/** The help sections, in the order `--help` prints them. */
export const groups = [
  "options",
  "core options",
  "tool description options",
  "http options",
  "tracing options",
  "egress options",
  "filesystem options",
  "docker backend options",
  "host backend options",
  "fly backend options",
  "e2b backend options",
  "modal backend options",
  "kubernetes backend options",
  "wasm backend options",
  "process options",
  "image build options"
] as const
export type Group = typeof groups[number]

/** What kind of value a flag takes. */
export type Kind = "text" | "secret" | "integer" | "number" | "choice" | "boolean" | "list" | "pairs"

export interface Flag<A> {
  /** `docker-run-flag` for `--docker-run-flag`. */
  readonly name: string
  readonly kind: Kind
  /** The words a choice accepts. */
  readonly choices: ReadonlyArray<string> | undefined
  readonly group: Group
  readonly help: string
  /** The value's placeholder in the help (`IMAGE`, `{stdio,http}`); undefined for booleans. */
  readonly metavar: string | undefined
  /** The value when neither the command line nor a variable gives one. */
  readonly initial: A
  /** What the help says the default is; undefined prints none. */
  readonly shownDefault: string | undefined
  /** Variables read when the flag is not on the command line, first set wins: `KILNTAINERS_<NAME>` first. */
  readonly variables: ReadonlyArray<string>
  readonly takesValue: boolean
  /** Every occurrence adds to a list (one value per line in the variable) instead of replacing. */
  readonly repeatable: boolean
  /** `--no-<name>` sets the boolean to false. */
  readonly negatable: boolean
  /** Never printed (`--print-config` shows `<redacted>`); an empty variable counts as given. */
  readonly secret: boolean
  /** The backends it applies to; undefined = all. Given with another backend: a warning. */
  readonly backends: ReadonlyArray<BackendName> | undefined
  /** Only meaningful with this transport; given with the other one: refused. */
  readonly transport: "http" | undefined
  /** Listed by `--help-all` only. */
  readonly more: boolean
  /** The words given (one, or several for a repeatable flag) as a value, or why they are not one. */
  readonly decode: (words: ReadonlyArray<string>) => Either.Either<A, string>
  /** Why a decoded value is out of range (`label` is `--port` or `KILNTAINERS_PORT`), or undefined. */
  readonly check: (value: A, label: string) => string | undefined
}

export type AnyFlag = Flag<any>
export type ValueOf<F> = F extends Flag<infer A> ? A : never

export interface Common {
  readonly group: Group
  readonly help: string
  readonly metavar?: string
  /** Other variables read after `KILNTAINERS_<NAME>` (FLY_API_TOKEN, E2B_API_KEY, …). */
  readonly alsoFrom?: ReadonlyArray<string>
  readonly backends?: ReadonlyArray<BackendName>
  readonly transport?: "http"
  readonly more?: boolean
  /** Overrides the default shown in the help. */
  readonly shownDefault?: string
}

/** `--output-limit` ↔ `KILNTAINERS_OUTPUT_LIMIT`. */
export const variableOf = (name: string) => `KILNTAINERS_${name.toUpperCase().replace(/-/g, "_")}`

const last = (words: ReadonlyArray<string>) => words[words.length - 1]!

const make = <A>(
  name: string,
  common: Common,
  spec: {
    readonly kind: Kind
    readonly choices?: ReadonlyArray<string>
    readonly initial: A
    readonly shownDefault: string | undefined
    readonly decode: (words: ReadonlyArray<string>) => Either.Either<A, string>
    readonly check?: (value: A, label: string) => string | undefined
    readonly takesValue?: boolean
    readonly repeatable?: boolean
    readonly negatable?: boolean
    readonly secret?: boolean
    readonly metavar?: string
  }
): Flag<A> => ({
  name,
  kind: spec.kind,
  choices: spec.choices,
  group: common.group,
  help: common.help,
  metavar: spec.takesValue === false ? undefined : common.metavar ?? spec.metavar ?? name.split("-").pop()!.toUpperCase(),
  initial: spec.initial,
  shownDefault: common.shownDefault ?? spec.shownDefault,
  variables: [variableOf(name), ...(common.alsoFrom ?? [])],
  takesValue: spec.takesValue ?? true,
  repeatable: spec.repeatable ?? false,
  negatable: spec.negatable ?? false,
  secret: spec.secret ?? false,
  backends: common.backends,
  transport: common.transport,
  more: common.more ?? false,
  decode: spec.decode,
  check: spec.check ?? (() => undefined)
})

const nonBlank = (word: string): Either.Either<string, string> =>
  word.trim() === "" ? Either.left("must not be empty") : Either.right(word)

/** A text value with a default. */
export const text = (name: string, common: Common & { readonly default: string }): Flag<string> =>
  make(name, common, {
    kind: "text",
    initial: common.default,
    shownDefault: common.default,
    decode: (words) => nonBlank(last(words))
  })

/** A text value that may be absent. */
export const optionalText = (
  name: string,
  common: Common & { readonly pattern?: { readonly test: RegExp; readonly says: string } }
): Flag<string | undefined> =>
  make<string | undefined>(name, common, {
    kind: "text",
    initial: undefined,
    shownDefault: undefined,
    decode: (words) => nonBlank(last(words)),
    check: (value, label) =>
      value !== undefined && common.pattern !== undefined && !common.pattern.test.test(value)
        ? `${label} ${common.pattern.says} (got '${value}')`
        : undefined
  })

/** A secret (token, key): redacted everywhere; blank values are refused, never taken as "none". */
export const secret = (name: string, common: Common): Flag<Redacted.Redacted<string> | undefined> =>
  make<Redacted.Redacted<string> | undefined>(name, common, {
    kind: "secret",
    initial: undefined,
    shownDefault: undefined,
    secret: true,
    metavar: "TOKEN",
    decode: (words) => Either.map(nonBlank(last(words)), Redacted.make)
  })

const INTEGER = /^[+-]?\d+$/
const decodeInteger = (word: string): Either.Either<number, string> => {
  const value = Number(word.trim())
  return INTEGER.test(word.trim()) && Number.isSafeInteger(value)
    ? Either.right(value)
    : Either.left(`invalid int value: '${word}'`)
}

const range = (min: number | undefined, max: number | undefined, unit: string) =>
(value: number | undefined, label: string): string | undefined => {
  if (value === undefined) return undefined
  const suffix = (bound: number) => unit === "" ? "" : ` ${bound === 1 ? unit.replace(/s$/, "") : unit}`
  if (min !== undefined && max !== undefined && (value < min || value > max)) {
    return `${label} must be between ${min} and ${max}${suffix(max)} (got ${value})`
  }
  if (min !== undefined && value < min) return `${label} must be at least ${min}${suffix(min)} (got ${value})`
  if (max !== undefined && value > max) return `${label} must be at most ${max}${suffix(max)} (got ${value})`
  return undefined
}

interface Bounds {
  readonly min?: number
  readonly max?: number
  /** Said after a bound in messages, plural: "seconds", "MiB" ("second" after 1). */
  readonly unit?: string
}

/** A whole number with a default, within bounds. */
export const integer = (name: string, common: Common & Bounds & { readonly default: number }): Flag<number> =>
  make(name, common, {
    kind: "integer",
    initial: common.default,
    shownDefault: String(common.default),
    metavar: "N",
    decode: (words) => decodeInteger(last(words)),
    check: range(common.min, common.max, common.unit ?? "")
  })

/** A whole number that may be absent. */
export const optionalInteger = (name: string, common: Common & Bounds): Flag<number | undefined> =>
  make<number | undefined>(name, common, {
    kind: "integer",
    initial: undefined,
    shownDefault: undefined,
    metavar: "N",
    decode: (words) => decodeInteger(last(words)),
    check: range(common.min, common.max, common.unit ?? "")
  })

const decodeNumber = (word: string): Either.Either<number, string> => {
  const value = Number(word.trim())
  return word.trim() !== "" && Number.isFinite(value) ? Either.right(value) : Either.left(`invalid float value: '${word}'`)
}
const positive = (value: number | undefined, label: string) =>
  value !== undefined && !(value > 0) ? `${label} must be greater than 0 (got ${value})` : undefined

/** A positive number (CPUs) with a default. */
export const positiveNumber = (name: string, common: Common & { readonly default: number }): Flag<number> =>
  make(name, common, {
    kind: "number",
    initial: common.default,
    shownDefault: common.default.toFixed(1),
    metavar: "N",
    decode: (words) => decodeNumber(last(words)),
    check: positive
  })

/** A positive number that may be absent. */
export const optionalPositiveNumber = (name: string, common: Common): Flag<number | undefined> =>
  make<number | undefined>(name, common, {
    kind: "number",
    initial: undefined,
    shownDefault: undefined,
    metavar: "N",
    decode: (words) => decodeNumber(last(words)),
    check: positive
  })

/** One of a few words. */
export const choice = <const C extends string>(
  name: string,
  choices: ReadonlyArray<C>,
  common: Common & { readonly default: C }
): Flag<C> =>
  make(name, common, {
    kind: "choice",
    choices,
    initial: common.default,
    shownDefault: common.default,
    metavar: `{${choices.join(",")}}`,
    decode: (words) => {
      const word = last(words)
      return (choices as ReadonlyArray<string>).includes(word)
        ? Either.right(word as C)
        : Either.left(`invalid choice: '${word}' (choose from ${choices.join(", ")})`)
    }
  })

const TRUE = new Set(["true", "1", "yes", "on"])
const FALSE = new Set(["false", "0", "no", "off"])

/** On or off: `--name`, `--name=false`, and `--no-name` when negatable. Off by default. */
export const boolean = (name: string, common: Common & { readonly negatable?: boolean }): Flag<boolean> =>
  make(name, common, {
    kind: "boolean",
    initial: false,
    shownDefault: undefined,
    takesValue: false,
    negatable: common.negatable ?? false,
    decode: (words) => {
      const word = last(words).trim().toLowerCase()
      if (TRUE.has(word)) return Either.right(true)
      if (FALSE.has(word)) return Either.right(false)
      return Either.left(`expected true or false, got '${last(words)}'`)
    }
  })

/** Why one item of a list is wrong (said after the flag's name), or undefined. */
type ItemCheck = (item: string) => string | undefined

const checkItems = (each: ItemCheck | undefined) => (values: ReadonlyArray<string>, label: string): string | undefined => {
  if (each === undefined) return undefined
  for (const value of values) {
    const problem = each(value)
    if (problem !== undefined) return `${label}: ${problem}`
  }
  return undefined
}

/** A repeatable value kept in order (`--docker-run-flag`); `each` checks every item. */
export const list = (name: string, common: Common & { readonly each?: ItemCheck }): Flag<ReadonlyArray<string>> =>
  make<ReadonlyArray<string>>(name, common, {
    kind: "list",
    initial: [],
    shownDefault: undefined,
    repeatable: true,
    decode: (words) => Either.right(words),
    check: checkItems(common.each)
  })

/**
 * A repeatable value whose words may also be comma lists (`--allow-host a.com,b.com`, process-mcp's
 * `SANDBOX_ALLOWED_DOMAINS=a.com,b.com`); blanks are dropped.
 */
export const commaList = (name: string, common: Common & { readonly each?: ItemCheck }): Flag<ReadonlyArray<string>> =>
  make<ReadonlyArray<string>>(name, common, {
    kind: "list",
    initial: [],
    shownDefault: undefined,
    repeatable: true,
    decode: (words) => Either.right(words.flatMap((word) => word.split(",")).map((item) => item.trim()).filter((item) => item !== "")),
    check: checkItems(common.each)
  })

/** Repeatable `KEY=VALUE` pairs (`--env`, `--e2b-metadata`); a later key replaces an earlier one. */
export const pairs = (name: string, common: Common): Flag<Readonly<Record<string, string>>> =>
  make<Readonly<Record<string, string>>>(name, common, {
    kind: "pairs",
    initial: {},
    shownDefault: undefined,
    repeatable: true,
    metavar: "KEY=VALUE",
    decode: (words) => {
      const result: Record<string, string> = {}
      for (const word of words) {
        const at = word.indexOf("=")
        if (at <= 0) return Either.left(`expected KEY=VALUE, got '${word}'`)
        result[word.slice(0, at)] = word.slice(at + 1)
      }
      return Either.right(result)
    }
  })
