/**
 * Word expansion of the toolset shell: single and double quotes, backslash escapes, `$VAR`,
 * `${VAR}`, `${VAR:-x}`, `${VAR:=x}`, `${VAR:+x}`, `${VAR:?x}`, `${#VAR}`, `$1…$9`, `$@`, `$*`, `$#`,
 * `$?`, `$0`, `$(…)` and backquotes, `$((…))` (Arithmetic.ts), `~`, field splitting of unquoted
 * expansions, and globbing
 * (`*`, `?`, `[…]`) against the computer's filesystem.
 */
import { ArithmeticError, evaluate } from "./Arithmetic.js"
import { settle, type Sink } from "./Feed.js"
import { cloneState, ExitSignal, type ShellState } from "./ShellControl.js"
import { write, type Io, type ShellFs } from "./ShellIo.js"
import { ParseError } from "./ShellParser.js"

/** Most output a `$(…)` may produce (it becomes a string in the shell's memory). */
export const MAX_SUBSTITUTION_BYTES = 16 * 1024 * 1024

const decoder = new TextDecoder()

/** Where `$((…))` starting at `i` ends (its last `)`), or undefined when the parentheses say it is `$( (…) )`. */
const arithmeticEnd = (raw: string, i: number): number | undefined => {
  let depth = 0
  for (let j = i + 1; j < raw.length; j++) {
    if (raw[j] === "(") depth++
    else if (raw[j] === ")" && --depth === 0) return raw[j - 1] === ")" ? j : undefined
  }
  return undefined
}

interface Piece {
  readonly s: string
  readonly q: boolean
}

/** A glob pattern (`\\x` is a literal x) as a regular expression; `anything`: `*` and `?` match `/` too (case patterns). */
export const globRegex = (pattern: string, anything = false) => {
  let re = "^"
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!
    if (c === "\\") re += (pattern[++i] ?? "\\").replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")
    else if (c === "*") re += anything ? "[\\s\\S]*" : "[^/]*"
    else if (c === "?") re += anything ? "[\\s\\S]" : "[^/]"
    else if (c === "[") {
      const end = pattern.indexOf("]", i + 2)
      if (end < 0) re += "\\["
      else {
        let body = pattern.slice(i + 1, end)
        if (body.startsWith("!")) body = "^" + body.slice(1)
        re += `[${body.replace(/\\/g, "\\\\")}]`
        i = end
      }
    } else re += c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")
  }
  return new RegExp(re + "$")
}

/** Expands words for one shell; `script` runs a command substitution's source. */
export class Expander {
  constructor(
    private readonly fs: ShellFs,
    private readonly script: (source: string, state: ShellState, io: Io) => Promise<number>
  ) {}

  variable(name: string, state: ShellState): string | undefined {
    if (name === "?") return String(state.status)
    if (name === "#") return String(state.positional.length)
    if (name === "@" || name === "*") return state.positional.join(" ")
    if (name === "$") return "1"
    if (name === "!") return ""
    if (name === "0") return state.argv0
    if (/^\d+$/.test(name)) return state.positional[Number(name) - 1]
    return state.vars.get(name)
  }

  private async substitute(source: string, state: ShellState, io: Io): Promise<string> {
    const chunks: Array<Uint8Array> = []
    let size = 0
    const sub = cloneState(state)
    const collect: Sink = (data, credit) => {
      size += data.byteLength
      if (size <= MAX_SUBSTITUTION_BYTES) chunks.push(new Uint8Array(data))
      settle(credit)
    }
    try {
      await this.script(source, sub, { stdin: io.stdin, stdout: { kind: "sink", write: collect }, stderr: io.stderr })
    } catch (error) {
      if (!(error instanceof ExitSignal)) throw error
      sub.status = error.code
    }
    state.status = sub.status
    if (size > MAX_SUBSTITUTION_BYTES) throw new ParseError(`command substitution: more than ${MAX_SUBSTITUTION_BYTES / 1024 / 1024} MiB of output`)
    let bytes: Uint8Array = Buffer.concat(chunks)
    if (bytes.includes(0)) {
      // As bash does: NUL cannot be part of a word; it is dropped, and said so.
      write(io, 2, "sh: warning: command substitution: ignored null byte in input\n")
      bytes = bytes.filter((byte) => byte !== 0)
    }
    return decoder.decode(bytes).replace(/\n+$/, "")
  }

  private async braced(body: string, state: ShellState, io: Io): Promise<string> {
    if (body.startsWith("#") && body.length > 1) return String((this.variable(body.slice(1), state) ?? "").length)
    const match = /^([A-Za-z_][A-Za-z0-9_]*|\d+|[?#@*$!])(:?[-=+?])?([\s\S]*)$/.exec(body)
    if (match === null) throw new ParseError(`\${${body}}: bad substitution`)
    const [, name, op, rest] = match as unknown as [string, string, string | undefined, string]
    const value = this.variable(name, state)
    if (op === undefined) {
      if (rest !== "") throw new ParseError(`\${${body}}: bad substitution`)
      return value ?? ""
    }
    const unset = op.startsWith(":") ? value === undefined || value === "" : value === undefined
    const word = async () => (await this.expand(rest, state, io, false))[0] ?? ""
    switch (op.replace(":", "")) {
      case "-":
        return unset ? await word() : value!
      case "=": {
        if (!unset) return value!
        const assigned = await word()
        state.vars.set(name, assigned)
        return assigned
      }
      case "+":
        return unset ? "" : await word()
      default: {
        if (!unset) return value!
        throw new ParseError(`${name}: ${(await word()) || "parameter not set"}`)
      }
    }
  }

  /** A `case` pattern: expanded, its quoted parts escaped, matched against `word` as a whole. */
  async matches(pattern: string, word: string, state: ShellState, io: Io): Promise<boolean> {
    const [expanded] = await this.expand(pattern, state, io, false, true)
    return globRegex(expanded ?? "", true).test(word)
  }

  /** Expands a word into fields (split and globbed when `fields`), or one string (a glob pattern when `pattern`). */
  async expand(raw: string, state: ShellState, io: Io, fields: boolean, pattern = false): Promise<Array<string>> {
    const out: Array<Array<Piece>> = [[]]
    const current = () => out[out.length - 1]!
    const addSplit = (value: string) => {
      if (!fields) return current().push({ s: value, q: !pattern })
      const parts = value.split(/[ \t\n]+/)
      parts.forEach((part, i) => {
        if (i > 0) out.push([])
        if (part !== "") current().push({ s: part, q: false })
      })
    }
    let i = 0
    const readDollar = async (quoted: boolean) => {
      // at raw[i] === "$"
      const next = raw[i + 1]
      const arithmetic = next === "(" && raw[i + 2] === "(" ? arithmeticEnd(raw, i) : undefined
      if (arithmetic !== undefined) {
        const expression = (await this.expand(raw.slice(i + 3, arithmetic - 1), state, io, false))[0] ?? ""
        let value: bigint
        try {
          value = evaluate(expression, (name) => this.variable(name, state), (name, set) => void state.vars.set(name, set))
        } catch (error) {
          if (error instanceof ArithmeticError) throw new ParseError(`${expression.trim()}: ${error.message}`)
          throw error
        }
        i = arithmetic + 1
        return quoted ? current().push({ s: String(value), q: true }) : addSplit(String(value))
      }
      if (next === "(") {
        let depth = 0
        let j = i + 1
        for (; j < raw.length; j++) {
          const c = raw[j]
          if (c === "\\") j++
          else if (c === "'" && !quoted) j = raw.indexOf("'", j + 1)
          else if (c === "(") depth++
          else if (c === ")" && --depth === 0) break
        }
        const value = await this.substitute(raw.slice(i + 2, j), state, io)
        i = j + 1
        return quoted ? current().push({ s: value, q: true }) : addSplit(value)
      }
      if (next === "{") {
        let depth = 0
        let j = i + 1
        for (; j < raw.length; j++) {
          if (raw[j] === "{") depth++
          else if (raw[j] === "}" && --depth === 0) break
        }
        const value = await this.braced(raw.slice(i + 2, j), state, io)
        i = j + 1
        return quoted ? current().push({ s: value, q: true }) : addSplit(value)
      }
      const name = /^([A-Za-z_][A-Za-z0-9_]*|[0-9?#@*$!])/.exec(raw.slice(i + 1))
      if (name === null) {
        i++
        return current().push({ s: "$", q: true })
      }
      i += 1 + name[1]!.length
      if (name[1] === "@" && quoted && fields) {
        state.positional.forEach((arg, k) => {
          if (k > 0) out.push([])
          current().push({ s: arg, q: true })
        })
        return
      }
      const value = this.variable(name[1]!, state) ?? ""
      return quoted ? current().push({ s: value, q: true }) : addSplit(value)
    }
    if (raw.startsWith("~") && (raw.length === 1 || raw[1] === "/")) {
      current().push({ s: state.vars.get("HOME") ?? "/", q: true })
      i = 1
    }
    while (i < raw.length) {
      const c = raw[i]!
      if (c === "'") {
        const end = raw.indexOf("'", i + 1)
        current().push({ s: raw.slice(i + 1, end), q: true })
        i = end + 1
      } else if (c === "\\") {
        current().push({ s: raw[i + 1] ?? "", q: true })
        i += 2
      } else if (c === "\"") {
        i++
        if (raw.slice(i, i + 3) !== "$@\"") current().push({ s: "", q: true })
        while (i < raw.length && raw[i] !== "\"") {
          const d = raw[i]!
          if (d === "\\" && "$`\"\\\n".includes(raw[i + 1] ?? "")) {
            current().push({ s: raw[i + 1]!, q: true })
            i += 2
          } else if (d === "$") await readDollar(true)
          else if (d === "`") {
            const end = raw.indexOf("`", i + 1)
            current().push({ s: await this.substitute(raw.slice(i + 1, end), state, io), q: true })
            i = end + 1
          } else {
            current().push({ s: d, q: true })
            i++
          }
        }
        i++
      } else if (c === "$") await readDollar(false)
      else if (c === "`") {
        const end = raw.indexOf("`", i + 1)
        addSplit(await this.substitute(raw.slice(i + 1, end), state, io))
        i = end + 1
      } else {
        current().push({ s: c, q: false })
        i++
      }
    }
    const result: Array<string> = []
    for (const pieces of out) {
      const joined = pieces.map((p) => p.s).join("")
      if (pattern) return [pieces.map((p) => (p.q ? p.s.replace(/[*?[\]\\]/g, "\\$&") : p.s)).join("")]
      if (!fields) return [joined]
      if (pieces.length === 0) continue
      const globbing = pieces.some((p) => !p.q && /[*?[]/.test(p.s))
      if (globbing) {
        const pattern = pieces.map((p) => (p.q ? p.s.replace(/[*?[\]\\]/g, "\\$&") : p.s)).join("")
        const matches = this.glob(pattern, state.cwd)
        if (matches.length > 0) {
          result.push(...matches)
          continue
        }
      }
      result.push(joined)
    }
    return fields ? result : [result.join(" ")]
  }

  private glob(pattern: string, cwd: string): Array<string> {
    const absolute = pattern.startsWith("/")
    const segments = pattern.split("/").filter((s) => s !== "")
    let candidates: Array<{ shown: string; path: string }> = [{ shown: absolute ? "/" : "", path: absolute ? "/" : cwd }]
    for (const segment of segments) {
      const next: Array<{ shown: string; path: string }> = []
      const magic = /(^|[^\\])[*?[]/.test(segment)
      const literal = segment.replace(/\\(.)/g, "$1")
      for (const candidate of candidates) {
        const join = (name: string) => ({
          shown: candidate.shown === "" ? name : candidate.shown.endsWith("/") ? candidate.shown + name : `${candidate.shown}/${name}`,
          path: candidate.path.endsWith("/") ? candidate.path + name : `${candidate.path}/${name}`
        })
        if (!magic) {
          if (this.fs.lookup("/", join(literal).path) !== undefined) next.push(join(literal))
          continue
        }
        const dir = this.fs.lookup("/", candidate.path)
        if (dir?.kind !== "dir") continue
        const re = globRegex(segment)
        const names = [...dir.entries.keys()].filter((name) => re.test(name) && (!name.startsWith(".") || segment.startsWith("."))).sort()
        next.push(...names.map(join))
      }
      candidates = next
    }
    return candidates.map((c) => c.shown)
  }
}
