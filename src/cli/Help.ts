/**
 * `--help` in the shape of Kilntainers' argparse help: a usage line, then the options grouped by
 * section with their defaults, plain text (no ANSI codes, whatever the output is). `--help` lists
 * the flags of Kilntainers and its fork plus the essentials; `--help-all` adds kilntainers' own.
 */
import { actions } from "./ArgvParser.js"
import * as Flag from "./Flag.js"

const DESCRIPTION = "Isolated Linux computers and full process control for AI agents, served over MCP (stdio by default)."
const HELP_COLUMN = 30

const wrap = (text: string, width: number): Array<string> => {
  const lines: Array<string> = []
  let line = ""
  for (const word of text.split(/\s+/).filter((w) => w !== "")) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line)
      line = word
    } else {
      line = line === "" ? word : `${line} ${word}`
    }
  }
  if (line !== "") lines.push(line)
  return lines
}

const entry = (invocation: string, help: string, width: number): Array<string> => {
  const indent = " ".repeat(HELP_COLUMN)
  const body = wrap(help, Math.max(20, width - HELP_COLUMN))
  const head = `  ${invocation}`
  if (head.length <= HELP_COLUMN - 2) {
    return [head.padEnd(HELP_COLUMN) + (body[0] ?? ""), ...body.slice(1).map((line) => indent + line)]
  }
  return [head, ...body.map((line) => indent + line)]
}

const invocation = (flag: Flag.AnyFlag) => {
  const names = flag.negatable ? `--${flag.name}, --no-${flag.name}` : `--${flag.name}`
  return flag.metavar === undefined ? names : `${names} ${flag.metavar}`
}

const helpOf = (flag: Flag.AnyFlag) => flag.shownDefault === undefined ? flag.help : `${flag.help} (default: ${flag.shownDefault})`

export interface RenderOptions {
  /** Include the options that only `--help-all` lists. */
  readonly all: boolean
  /** The line length. */
  readonly width: number
  /** A subcommand's own usage lines, description, actions and closing paragraph instead of the server's. */
  readonly command?: {
    readonly usage: ReadonlyArray<string>
    readonly description: string
    readonly actions: ReadonlyArray<{ readonly names: ReadonlyArray<string>; readonly help: string }>
    readonly footer: string
  }
}

const SERVER_USAGE = [
  "usage: kilntainers [-h] [--help-all] [--backend BACKEND] [--transport {stdio,http}] [options]",
  "       kilntainers image build [--engine ENGINE] [--docker-host URL] [--tag TAG] [--base IMAGE]"
]
const SERVER_FOOTER = "Every option can also come from a variable: --output-limit from KILNTAINERS_OUTPUT_LIMIT (true or false " +
  "for switches, one value per line for repeatable options); the command line wins."

/** A usage line wrapped, keeping its indentation (the second form lines up under the first). */
const usageLines = (usage: string, width: number) => {
  const indent = /^ */.exec(usage)![0]
  return wrap(usage, width - indent.length).map((line) => indent + line)
}

/** The help text. */
export const render = (flags: ReadonlyArray<Flag.AnyFlag>, options: RenderOptions) => {
  const width = Math.max(60, options.width)
  const shown = flags.filter((flag) => options.all || !flag.more)
  const lines: Array<string> = [
    ...(options.command?.usage ?? SERVER_USAGE).flatMap((usage) => usageLines(usage, width)),
    "",
    ...wrap(options.command?.description ?? DESCRIPTION, width)
  ]
  for (const group of Flag.groups) {
    const entries = group === "options"
      ? (options.command?.actions ?? actions).map((action) => entry(action.names.join(", "), action.help, width))
      : shown.filter((flag) => flag.group === group).map((flag) => entry(invocation(flag), helpOf(flag), width))
    if (entries.length === 0) continue
    lines.push("", `${group}:`, ...entries.flat())
  }
  const hidden = flags.length - shown.length
  lines.push("", ...wrap(options.command?.footer ?? SERVER_FOOTER, width))
  if (hidden > 0) lines.push(...wrap(`--help-all lists ${hidden} more options.`, width))
  return lines.join("\n") + "\n"
}
