/**
 * A small POSIX-shell parser for the toolset backend: lists (`;`, newline, `&`), `&&`/`||`,
 * pipelines (`|`, `!`), simple commands with assignments and redirections (`<`, `>`, `>>`, `2>`,
 * `2>>`, `2>&1`, `>&2`, `&>`), `if/elif/else/fi`, `for … in … do … done`, `while/until`, `{ …; }`
 * and `( … )`. Words keep their raw text (quotes, `$…`, `$(…)`); Shell.ts expands them.
 */

export type Redirect = {
  readonly fd: number
  readonly op: "<" | ">" | ">>" | ">&" | "<&" | "&>"
  readonly target: string
}

export type Command =
  | { readonly _tag: "Simple"; readonly assigns: ReadonlyArray<string>; readonly words: ReadonlyArray<string>; readonly redirects: ReadonlyArray<Redirect> }
  | { readonly _tag: "If"; readonly branches: ReadonlyArray<{ readonly cond: List; readonly body: List }>; readonly otherwise: List | undefined; readonly redirects: ReadonlyArray<Redirect> }
  | { readonly _tag: "For"; readonly name: string; readonly items: ReadonlyArray<string> | undefined; readonly body: List; readonly redirects: ReadonlyArray<Redirect> }
  | { readonly _tag: "While"; readonly until: boolean; readonly cond: List; readonly body: List; readonly redirects: ReadonlyArray<Redirect> }
  | { readonly _tag: "Group"; readonly subshell: boolean; readonly body: List; readonly redirects: ReadonlyArray<Redirect> }

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

type Token =
  | { readonly t: "word"; readonly v: string }
  | { readonly t: "op"; readonly v: string }
  | { readonly t: "redir"; readonly fd: number | undefined; readonly v: string }

export class ParseError extends Error {}

const OPERATORS = ["&&", "||", ";;", "&>", ">>", ">&", "<&", "<<", ";", "&", "|", "(", ")", "<", ">", "\n"]

/** Copies a `$(…)` or `${…}` (with nesting and quotes) starting at `i` (the `$`); returns the end. */
const skipDollar = (src: string, i: number): number => {
  const open = src[i + 1]
  const close = open === "(" ? ")" : "}"
  let depth = 0
  let j = i + 1
  while (j < src.length) {
    const c = src[j]!
    if (c === "\\") j += 2
    else if (c === "'" && open === "(") {
      const end = src.indexOf("'", j + 1)
      if (end < 0) throw new ParseError("unterminated quote")
      j = end + 1
    } else if (c === "\"") j = skipDouble(src, j)
    else if (c === "$" && (src[j + 1] === "(" || src[j + 1] === "{")) j = skipDollar(src, j)
    else {
      if (c === open) depth++
      else if (c === close) {
        depth--
        if (depth === 0) return j + 1
      }
      j++
    }
  }
  throw new ParseError(`unterminated $${open}`)
}

const skipDouble = (src: string, i: number): number => {
  let j = i + 1
  while (j < src.length) {
    const c = src[j]!
    if (c === "\\") j += 2
    else if (c === "\"") return j + 1
    else if (c === "$" && (src[j + 1] === "(" || src[j + 1] === "{")) j = skipDollar(src, j)
    else if (c === "`") {
      const end = src.indexOf("`", j + 1)
      if (end < 0) throw new ParseError("unterminated `")
      j = end + 1
    } else j++
  }
  throw new ParseError("unterminated double quote")
}

export const tokenize = (src: string): Array<Token> => {
  const tokens: Array<Token> = []
  let word = ""
  let inWord = false
  const flush = () => {
    if (inWord) tokens.push({ t: "word", v: word })
    word = ""
    inWord = false
  }
  let i = 0
  while (i < src.length) {
    const c = src[i]!
    if (c === " " || c === "\t") {
      flush()
      i++
      continue
    }
    if (c === "#" && !inWord) {
      while (i < src.length && src[i] !== "\n") i++
      continue
    }
    if (c === "\\") {
      if (src[i + 1] === "\n") {
        i += 2
        continue
      }
      word += src.slice(i, i + 2)
      inWord = true
      i += 2
      continue
    }
    if (c === "'") {
      const end = src.indexOf("'", i + 1)
      if (end < 0) throw new ParseError("unterminated single quote")
      word += src.slice(i, end + 1)
      inWord = true
      i = end + 1
      continue
    }
    if (c === "\"") {
      const end = skipDouble(src, i)
      word += src.slice(i, end)
      inWord = true
      i = end
      continue
    }
    if (c === "`") {
      const end = src.indexOf("`", i + 1)
      if (end < 0) throw new ParseError("unterminated `")
      word += src.slice(i, end + 1)
      inWord = true
      i = end + 1
      continue
    }
    if (c === "$" && (src[i + 1] === "(" || src[i + 1] === "{")) {
      const end = skipDollar(src, i)
      word += src.slice(i, end)
      inWord = true
      i = end
      continue
    }
    const op = OPERATORS.find((candidate) => src.startsWith(candidate, i))
    if (op !== undefined) {
      if (op === "<<") throw new ParseError("here-documents (<<) are not supported")
      if (op === "<" || op === ">" || op === ">>" || op === ">&" || op === "<&" || op === "&>") {
        const fd = inWord && /^\d$/.test(word) ? Number(word) : undefined
        if (fd !== undefined) {
          word = ""
          inWord = false
        } else flush()
        tokens.push({ t: "redir", fd, v: op })
      } else {
        flush()
        tokens.push({ t: "op", v: op })
      }
      i += op.length
      continue
    }
    word += c
    inWord = true
    i++
  }
  flush()
  return tokens
}

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
  const describe = (token: Token) => token.v === "\n" ? "newline" : token.v

  const list = (): List => {
    const items: Array<AndOr> = []
    for (;;) {
      while (isOp("\n") || isOp(";")) at++
      const token = peek()
      if (token === undefined) break
      if (token.t === "op" && token.v === ")") break
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
      if (after.t === "op" && after.v === ")") break
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
      const op = peek()!.v as "&&" | "||"
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
    while (peek()?.t === "redir") {
      const token = peek() as Extract<Token, { t: "redir" }>
      at++
      const target = peek()
      if (target?.t !== "word") throw new ParseError(`syntax error: a file name must follow '${token.v}'`)
      at++
      const op = token.v as Redirect["op"]
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
      if (token.v === "case") throw new ParseError("case … esac is not supported")
    }
    const assigns: Array<string> = []
    const words: Array<string> = []
    const redirs: Array<Redirect> = []
    for (;;) {
      const next = peek()
      if (next === undefined) break
      if (next.t === "redir") {
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
