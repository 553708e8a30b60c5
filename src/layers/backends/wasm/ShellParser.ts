/**
 * A small POSIX-shell parser for the toolset backend: lists (`;`, newline, `&`), `&&`/`||`,
 * pipelines (`|`, `!`), simple commands with assignments and redirections (`<`, `>`, `>>`, `2>`,
 * `2>>`, `2>&1`, `>&2`, `&>`, here-documents `<<`), `if/elif/else/fi`, `for … in … do … done`,
 * `while/until`, `case … in … esac`, functions `name() { …; }`, `{ …; }` and `( … )`. Words keep
 * their raw text (quotes, `$…`, `$(…)`); Shell.ts expands them. Tokens come from ShellLexer.ts.
 */
import { ParseError, tokenize, type Token } from "./ShellLexer.js"

export type Redirect =
  | { readonly fd: number; readonly op: "<" | ">" | ">>" | ">&" | "<&" | "&>"; readonly target: string }
  /** A here-document: `target` is its body, expanded (parameters, `$(…)`, `$((…))`) unless its delimiter was quoted. */
  | { readonly fd: number; readonly op: "<<"; readonly target: string; readonly expand: boolean }

export type Command =
  | { readonly _tag: "Simple"; readonly assigns: ReadonlyArray<string>; readonly words: ReadonlyArray<string>; readonly redirects: ReadonlyArray<Redirect> }
  | { readonly _tag: "If"; readonly branches: ReadonlyArray<{ readonly cond: List; readonly body: List }>; readonly otherwise: List | undefined; readonly redirects: ReadonlyArray<Redirect> }
  | { readonly _tag: "For"; readonly name: string; readonly items: ReadonlyArray<string> | undefined; readonly body: List; readonly redirects: ReadonlyArray<Redirect> }
  | { readonly _tag: "While"; readonly until: boolean; readonly cond: List; readonly body: List; readonly redirects: ReadonlyArray<Redirect> }
  | { readonly _tag: "Group"; readonly subshell: boolean; readonly body: List; readonly redirects: ReadonlyArray<Redirect> }
  | { readonly _tag: "Case"; readonly word: string; readonly items: ReadonlyArray<CaseItem>; readonly redirects: ReadonlyArray<Redirect> }
  | { readonly _tag: "Function"; readonly name: string; readonly body: Command; readonly redirects: ReadonlyArray<Redirect> }

export interface CaseItem {
  readonly patterns: ReadonlyArray<string>
  readonly body: List
}

export interface Pipeline {
  readonly negate: boolean
  readonly commands: ReadonlyArray<Command>
}
export interface AndOr {
  readonly first: Pipeline
  readonly rest: ReadonlyArray<{ readonly op: "&&" | "||"; readonly pipeline: Pipeline }>
  readonly background: boolean
}
export type List = ReadonlyArray<AndOr>

export { ParseError }

const RESERVED_END = new Set(["then", "else", "elif", "fi", "do", "done", "}", "esac"])

export const parse = (src: string): List => {
  const tokens = tokenize(src)
  let at = 0
  const peek = () => tokens[at]
  const isWord = (v: string) => {
    const token = peek()
    return token?.t === "word" && token.v === v
  }
  const isOp = (v: string) => {
    const token = peek()
    return token?.t === "op" && token.v === v
  }
  const skipNewlines = () => {
    while (isOp("\n")) at++
  }
  const expectWord = (v: string) => {
    skipNewlines()
    if (!isWord(v)) throw new ParseError(`syntax error: expected '${v}'${peek() ? ` near '${describe(peek()!)}'` : " at end"}`)
    at++
  }
  const describe = (token: Token) => token.t === "heredoc" ? "<<" : token.v === "\n" ? "newline" : token.v

  const list = (): List => {
    const items: Array<AndOr> = []
    for (;;) {
      while (isOp("\n") || isOp(";")) at++
      const token = peek()
      if (token === undefined) break
      if (token.t === "op" && (token.v === ")" || token.v === ";;")) break
      if (token.t === "word" && RESERVED_END.has(token.v)) break
      const item = andOr()
      const next = peek()
      if (next?.t === "op" && next.v === "&") {
        at++
        items.push({ ...item, background: true })
      } else items.push(item)
      const after = peek()
      if (after === undefined) break
      if (after.t === "op" && (after.v === ";" || after.v === "\n")) continue
      if (after.t === "op" && (after.v === ")" || after.v === ";;")) break
      if (after.t === "word" && RESERVED_END.has(after.v)) break
      if (items[items.length - 1]!.background) continue
      throw new ParseError(`syntax error near '${describe(after)}'`)
    }
    return items
  }

  const andOr = (): AndOr => {
    const first = pipeline()
    const rest: Array<{ op: "&&" | "||"; pipeline: Pipeline }> = []
    while (isOp("&&") || isOp("||")) {
      const op = isOp("&&") ? "&&" : "||"
      at++
      skipNewlines()
      rest.push({ op, pipeline: pipeline() })
    }
    return { first, rest, background: false }
  }

  const pipeline = (): Pipeline => {
    let negate = false
    if (isWord("!")) {
      negate = true
      at++
    }
    const commands = [command()]
    while (isOp("|")) {
      at++
      skipNewlines()
      commands.push(command())
    }
    return { negate, commands }
  }

  const redirects = (into: Array<Redirect>) => {
    for (let token = peek(); token?.t === "redir" || token?.t === "heredoc"; token = peek()) {
      at++
      if (token.t === "heredoc") {
        into.push({ fd: token.fd ?? 0, op: "<<", target: token.body, expand: token.expand })
        continue
      }
      const target = peek()
      if (target?.t !== "word") throw new ParseError(`syntax error: a file name must follow '${token.v}'`)
      at++
      const op = token.v as "<" | ">" | ">>" | ">&" | "<&" | "&>"
      into.push({ fd: token.fd ?? (op === "<" || op === "<&" ? 0 : 1), op, target: target.v })
    }
  }

  const command = (): Command => {
    skipNewlines()
    const token = peek()
    if (token === undefined) throw new ParseError("syntax error: unexpected end of input")
    if (token.t === "op" && token.v === "(") {
      at++
      const body = list()
      if (!isOp(")")) throw new ParseError("syntax error: expected ')'")
      at++
      const redirs: Array<Redirect> = []
      redirects(redirs)
      return { _tag: "Group", subshell: true, body, redirects: redirs }
    }
    if (token.t === "op") throw new ParseError(`syntax error near '${describe(token)}'`)
    if (token.t === "word") {
      if (token.v === "{") {
        at++
        const body = list()
        expectWord("}")
        const redirs: Array<Redirect> = []
        redirects(redirs)
        return { _tag: "Group", subshell: false, body, redirects: redirs }
      }
      if (token.v === "if") {
        at++
        const branches: Array<{ cond: List; body: List }> = []
        const cond = list()
        expectWord("then")
        branches.push({ cond, body: list() })
        let otherwise: List | undefined
        for (;;) {
          skipNewlines()
          if (isWord("elif")) {
            at++
            const c = list()
            expectWord("then")
            branches.push({ cond: c, body: list() })
          } else if (isWord("else")) {
            at++
            otherwise = list()
          } else break
        }
        expectWord("fi")
        const redirs: Array<Redirect> = []
        redirects(redirs)
        return { _tag: "If", branches, otherwise, redirects: redirs }
      }
      if (token.v === "for") {
        at++
        const name = peek()
        if (name?.t !== "word" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name.v)) throw new ParseError("syntax error: for needs a name")
        at++
        let items: Array<string> | undefined
        skipNewlines()
        if (isWord("in")) {
          at++
          items = []
          for (let next = peek(); next?.t === "word"; next = peek()) {
            items.push(next.v)
            at++
          }
        }
        while (isOp(";") || isOp("\n")) at++
        expectWord("do")
        const body = list()
        expectWord("done")
        const redirs: Array<Redirect> = []
        redirects(redirs)
        return { _tag: "For", name: name.v, items, body, redirects: redirs }
      }
      if (token.v === "while" || token.v === "until") {
        at++
        const cond = list()
        expectWord("do")
        const body = list()
        expectWord("done")
        const redirs: Array<Redirect> = []
        redirects(redirs)
        return { _tag: "While", until: token.v === "until", cond, body, redirects: redirs }
      }
      if (token.v === "case") {
        at++
        const word = peek()
        if (word?.t !== "word") throw new ParseError("syntax error: case needs a word")
        at++
        skipNewlines()
        expectWord("in")
        const items: Array<CaseItem> = []
        for (;;) {
          while (isOp("\n") || isOp(";")) at++
          if (isWord("esac") || peek() === undefined) break
          if (isOp("(")) at++
          const patterns: Array<string> = []
          for (;;) {
            const pattern = peek()
            if (pattern?.t !== "word") throw new ParseError("syntax error: a case pattern is missing")
            patterns.push(pattern.v)
            at++
            if (!isOp("|")) break
            at++
          }
          if (!isOp(")")) throw new ParseError("syntax error: expected ')' after a case pattern")
          at++
          items.push({ patterns, body: list() })
          if (isOp(";;")) at++
          else if (!isWord("esac")) throw new ParseError(`syntax error near '${describe(peek() ?? { t: "op", v: "end of input" })}' in case`)
        }
        expectWord("esac")
        const redirs: Array<Redirect> = []
        redirects(redirs)
        return { _tag: "Case", word: word.v, items, redirects: redirs }
      }
      const open = tokens[at + 1]
      const close = tokens[at + 2]
      if (/^[A-Za-z_][A-Za-z0-9_]*$/.test(token.v) && open?.t === "op" && open.v === "(" && close?.t === "op" && close.v === ")") {
        at += 3
        const body = command()
        if (body._tag === "Simple") throw new ParseError(`syntax error: the body of ${token.v}() must be a compound command such as { …; }`)
        return { _tag: "Function", name: token.v, body, redirects: [] }
      }
    }
    const assigns: Array<string> = []
    const words: Array<string> = []
    const redirs: Array<Redirect> = []
    for (;;) {
      const next = peek()
      if (next === undefined) break
      if (next.t === "redir" || next.t === "heredoc") {
        redirects(redirs)
        continue
      }
      if (next.t !== "word") break
      if (words.length === 0 && /^[A-Za-z_][A-Za-z0-9_]*=/.test(next.v)) assigns.push(next.v)
      else words.push(next.v)
      at++
    }
    if (assigns.length === 0 && words.length === 0 && redirs.length === 0) {
      throw new ParseError(`syntax error near '${describe(peek() ?? { t: "op", v: "end of input" })}'`)
    }
    return { _tag: "Simple", assigns, words, redirects: redirs }
  }

  const result = list()
  if (at < tokens.length) throw new ParseError(`syntax error near '${describe(tokens[at]!)}'`)
  return result
}
