/**
 * Shell arithmetic (`$((…))`) of the toolset shell: 64-bit signed integers with C's operators
 * and precedence — `+ - * / % **`, `<< >>`, comparisons, `== !=`, `& ^ |`, `&& ||`, `! ~`, unary
 * `+ -`, `?:`, `,` and assignments (`= += -= *= /= %= <<= >>= &= ^= |=`) to variables, which
 * read as 0 when unset or empty.
 */

export class ArithmeticError extends Error {}

type Token = { readonly t: "num"; readonly v: bigint } | { readonly t: "name"; readonly v: string } | { readonly t: "op"; readonly v: string }

const OPERATORS = [
  "<<=", ">>=", "**", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "&=", "^=", "|=",
  "+", "-", "*", "/", "%", "<", ">", "&", "^", "|", "!", "~", "?", ":", "(", ")", "=", ","
]

const tokenize = (text: string): Array<Token> => {
  const tokens: Array<Token> = []
  let i = 0
  while (i < text.length) {
    const c = text[i]!
    if (/\s/.test(c)) {
      i++
      continue
    }
    const number = /^(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)/.exec(text.slice(i))
    if (number !== null && /[0-9]/.test(c)) {
      const raw = number[1]!
      if (/[0-9a-zA-Z_]/.test(text[i + raw.length] ?? "")) throw new ArithmeticError(`${text.slice(i).split(/\s/)[0]}: invalid number`)
      tokens.push({ t: "num", v: /^0[0-7]+$/.test(raw) ? BigInt("0o" + raw.slice(1)) : BigInt(raw) })
      i += raw.length
      continue
    }
    const name = /^[A-Za-z_][A-Za-z0-9_]*/.exec(text.slice(i))
    if (name !== null) {
      tokens.push({ t: "name", v: name[0] })
      i += name[0].length
      continue
    }
    const op = OPERATORS.find((candidate) => text.startsWith(candidate, i))
    if (op === undefined) throw new ArithmeticError(`syntax error: invalid arithmetic operator (error token is "${text.slice(i)}")`)
    tokens.push({ t: "op", v: op })
    i += op.length
  }
  return tokens
}

const BINARY: ReadonlyArray<ReadonlyArray<string>> = [
  ["||"], ["&&"], ["|"], ["^"], ["&"], ["==", "!="], ["<", "<=", ">", ">="], ["<<", ">>"], ["+", "-"], ["*", "/", "%"]
]

const int = (value: bigint) => BigInt.asIntN(64, value)
const truth = (value: boolean) => (value ? 1n : 0n)

const apply = (op: string, a: bigint, b: bigint): bigint => {
  switch (op) {
    case "+": return int(a + b)
    case "-": return int(a - b)
    case "*": return int(a * b)
    case "/":
    case "%":
      if (b === 0n) throw new ArithmeticError("division by 0")
      return int(op === "/" ? a / b : a % b)
    case "**":
      if (b < 0n) throw new ArithmeticError("exponent less than 0")
      return int(a ** b)
    case "<<": return int(a << (b & 63n))
    case ">>": return int(a >> (b & 63n))
    case "<": return truth(a < b)
    case "<=": return truth(a <= b)
    case ">": return truth(a > b)
    case ">=": return truth(a >= b)
    case "==": return truth(a === b)
    case "!=": return truth(a !== b)
    case "&": return int(a & b)
    case "^": return int(a ^ b)
    case "|": return int(a | b)
    default: throw new ArithmeticError(`unknown operator ${op}`)
  }
}

/** Evaluates `text`; `get`/`set` read and assign variables. */
export const evaluate = (text: string, get: (name: string) => string | undefined, set: (name: string, value: string) => void): bigint => {
  const tokens = tokenize(text)
  if (tokens.length === 0) return 0n
  let at = 0
  const peek = () => tokens[at]
  const isOp = (...ops: Array<string>) => {
    const token = peek()
    return token?.t === "op" && ops.includes(token.v)
  }
  const variable = (name: string): bigint => {
    const value = (get(name) ?? "").trim()
    if (value === "") return 0n
    if (!/^-?(0[xX][0-9a-fA-F]+|[0-9]+)$/.test(value)) throw new ArithmeticError(`${name}: value is not an integer: ${value}`)
    return int(BigInt(value.replace(/^-(.*)$/, "$1")) * (value.startsWith("-") ? -1n : 1n))
  }

  const comma = (): bigint => {
    let value = assignment()
    while (isOp(",")) {
      at++
      value = assignment()
    }
    return value
  }
  const assignment = (): bigint => {
    const token = peek()
    const next = tokens[at + 1]
    if (token?.t === "name" && next?.t === "op" && /^([-+*/%&^|]|<<|>>)?=$/.test(next.v)) {
      at += 2
      const right = assignment()
      const value = next.v === "=" ? right : apply(next.v.slice(0, -1), variable(token.v), right)
      set(token.v, String(value))
      return value
    }
    return conditional()
  }
  const conditional = (): bigint => {
    const test = binary(0)
    if (!isOp("?")) return test
    at++
    const yes = comma()
    if (!isOp(":")) throw new ArithmeticError("syntax error: ':' expected")
    at++
    const no = conditional()
    return test !== 0n ? yes : no
  }
  const binary = (level: number): bigint => {
    if (level === BINARY.length) return power()
    let value = binary(level + 1)
    while (isOp(...BINARY[level]!)) {
      const op = (peek() as { v: string }).v
      at++
      const right = binary(level + 1)
      value = op === "&&" ? truth(value !== 0n && right !== 0n) : op === "||" ? truth(value !== 0n || right !== 0n) : apply(op, value, right)
    }
    return value
  }
  const power = (): bigint => {
    const base = unary()
    if (!isOp("**")) return base
    at++
    return apply("**", base, power())
  }
  const unary = (): bigint => {
    if (isOp("-", "+", "!", "~")) {
      const op = (peek() as { v: string }).v
      at++
      const value = unary()
      return op === "-" ? int(-value) : op === "+" ? value : op === "!" ? truth(value === 0n) : int(~value)
    }
    return primary()
  }
  const primary = (): bigint => {
    const token = peek()
    if (token === undefined) throw new ArithmeticError("syntax error: operand expected")
    at++
    if (token.t === "num") return token.v
    if (token.t === "name") return variable(token.v)
    if (token.v === "(") {
      const value = comma()
      if (!isOp(")")) throw new ArithmeticError("syntax error: ')' expected")
      at++
      return value
    }
    throw new ArithmeticError(`syntax error: operand expected (error token is "${token.v}")`)
  }

  const value = comma()
  if (at < tokens.length) throw new ArithmeticError(`syntax error in expression (error token is "${tokens.slice(at).map((t) => String(t.v)).join(" ")}")`)
  return value
}
