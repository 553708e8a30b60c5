/**
 * `--help` in the shape of Kilntainers' argparse help: usage lines, a description, the options
 * grouped by section (name and value in one column, what it does and its default in the next), a
 * closing paragraph; plain text, whatever the output is. `--help` lists the flags of Kilntainers and
 * its fork plus the essentials; `--help-all` adds kilntainers' own.
 *
 * The page is laid out here, not by @effect/cli: its own help lists every option over four lines or
 * more with its type and fallback notes (812 lines for the server's options) and took 2.1 s to
 * render, and @effect/printer, which lays it out, took 2.1 s for this page's 98 lines and
 * overflowed the stack on `--help-all`'s (@effect/cli 0.77.2, @effect/printer 0.51.0, on a busy
 * 2-core machine). A help that answers at once is worth these 60 lines.
 */
import * as Flag from "./Flag.js"

/** Where the explanations start, as argparse's help does. */
const HELP_COLUMN = 30

/** An entry of the first section: an action (`-h, --help`) rather than a setting. */
export interface Action {
  readonly invocation: string
  readonly help: string
}

/** A command's help page. */
export interface Page {
  /** The usage lines; a continuation line is indented under the first. */
  readonly usage: ReadonlyArray<string>
  readonly description: string
  readonly actions: ReadonlyArray<Action>
  readonly flags: ReadonlyArray<Flag.AnyFlag>
  readonly footer: string
}

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

/** `  --name VALUE    what it does`, the explanation in its column, or under a long name. */
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

const explanation = (flag: Flag.AnyFlag) => flag.shownDefault === undefined ? flag.help : `${flag.help} (default: ${flag.shownDefault})`

/** A usage line wrapped, keeping its indentation (the second form lines up under the first). */
const usageLines = (usage: string, width: number) => {
  const indent = /^ */.exec(usage)![0]
  return wrap(usage, width - indent.length).map((line) => indent + line)
}

/** The help text; `all` adds the options only `--help-all` lists. */
export const render = (page: Page, options: { readonly all: boolean; readonly width: number }): string => {
  const width = Math.max(60, options.width)
  const shown = page.flags.filter((flag) => options.all || !flag.more)
  const lines: Array<string> = [...page.usage.flatMap((usage) => usageLines(usage, width)), "", ...wrap(page.description, width)]
  for (const group of Flag.groups) {
    const entries = group === "options"
      ? page.actions.map((action) => entry(action.invocation, action.help, width))
      : shown.filter((flag) => flag.group === group).map((flag) => entry(invocation(flag), explanation(flag), width))
    if (entries.length === 0) continue
    lines.push("", `${group}:`, ...entries.flat())
  }
  const hidden = page.flags.length - shown.length
  lines.push("", ...wrap(page.footer, width))
  if (hidden > 0) lines.push(...wrap(`--help-all lists ${hidden} more options.`, width))
  return lines.join("\n") + "\n"
}
