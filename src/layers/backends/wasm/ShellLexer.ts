/**
 * The tokenizer of the toolset shell: words keep their raw text (quotes, `$…`, `$(…)`, `$((…))`),
 * operators and redirections are tokens, and a here-document (`<<WORD`, `<<-WORD`, `<<'WORD'`)
 * becomes one token holding its body, read from the lines after its operator's line.
 */

export class ParseError extends Error {}

export type Token =
  | { readonly t: "word"; readonly v: string }
  | { readonly t: "op"; readonly v: string }
  | { readonly t: "redir"; readonly fd: number | undefined; readonly v: string }
  /** A here-document: its body (read from the lines after the operator's line) and whether it is expanded. */
  | { readonly t: "heredoc"; readonly fd: number | undefined; readonly body: string; readonly expand: boolean }

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

/** A here-document whose body is still to be read (its token is filled in then). */
interface Pending {
  readonly index: number
  readonly fd: number | undefined
  readonly delimiter: string
  readonly strip: boolean
  readonly expand: boolean
}

/** Reads `<<[-]WORD` (at `i`, after `<<`); the token is completed when the line ends. */
const hereDocument = (src: string, start: number, fd: number | undefined, tokens: Array<Token>, pending: Array<Pending>): number => {
  let i = start
  const strip = src[i] === "-"
  if (strip) i++
  while (src[i] === " " || src[i] === "\t") i++
  let delimiter = ""
  let quoted = false
  while (i < src.length && !/[\s;&|<>()]/.test(src[i]!)) {
    const c = src[i]!
    if (c === "'" || c === "\"") {
      const end = src.indexOf(c, i + 1)
      if (end < 0) throw new ParseError("unterminated quote in a here-document delimiter")
      delimiter += src.slice(i + 1, end)
      quoted = true
      i = end + 1
    } else if (c === "\\") {
      delimiter += src[i + 1] ?? ""
      quoted = true
      i += 2
    } else {
      delimiter += c
      i++
    }
  }
  if (delimiter === "") throw new ParseError("syntax error: a here-document needs a delimiter after '<<'")
  pending.push({ index: tokens.length, fd, delimiter, strip, expand: !quoted })
  tokens.push({ t: "heredoc", fd, body: "", expand: !quoted })
  return i
}

/** Reads the bodies of the pending here-documents from `i` (a line start); returns where the script goes on. */
const readBodies = (src: string, start: number, pending: Array<Pending>, tokens: Array<Token>): number => {
  let i = start
  for (const doc of pending.splice(0)) {
    const lines: Array<string> = []
    for (;;) {
      if (i >= src.length) throw new ParseError(`here-document delimited by end of input (wanted '${doc.delimiter}')`)
      const end = src.indexOf("\n", i)
      let line = end < 0 ? src.slice(i) : src.slice(i, end)
      i = end < 0 ? src.length : end + 1
      if (doc.strip) line = line.replace(/^\t+/, "")
      if (line === doc.delimiter) break
      lines.push(line + "\n")
    }
    tokens[doc.index] = { t: "heredoc", fd: doc.fd, body: lines.join(""), expand: doc.expand }
  }
  return i
}

export const tokenize = (src: string): Array<Token> => {
  const tokens: Array<Token> = []
  const pending: Array<Pending> = []
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
      if (op === "<<") {
        const fd = inWord && /^\d$/.test(word) ? Number(word) : undefined
        if (fd !== undefined) {
          word = ""
          inWord = false
        } else flush()
        i = hereDocument(src, i + 2, fd, tokens, pending)
        continue
      }
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
      // The bodies of this line's here-documents follow it.
      if (op === "\n" && pending.length > 0) i = readBodies(src, i, pending, tokens)
      continue
    }
    word += c
    inWord = true
    i++
  }
  flush()
  if (pending.length > 0) throw new ParseError(`here-document delimited by end of input (wanted '${pending[0]!.delimiter}')`)
  return tokens
}
