/** The `test` / `[` builtin of the toolset shell, over the computer's filesystem. */

/** test / [ : file tests, string and integer comparisons, !, -a, -o, parentheses not supported. */
export const test = (args: ReadonlyArray<string>, lookup: (path: string) => { readonly kind: string; readonly data?: Uint8Array } | undefined): boolean | string => {
  const orParts = split(args, "-o")
  if (orParts.length > 1) {
    const results = orParts.map((part) => test(part, lookup))
    const error = results.find((r) => typeof r === "string")
    return error ?? results.some((r) => r === true)
  }
  const andParts = split(args, "-a")
  if (andParts.length > 1) {
    const results = andParts.map((part) => test(part, lookup))
    const error = results.find((r) => typeof r === "string")
    return error ?? results.every((r) => r === true)
  }
  if (args[0] === "!" && args.length > 1) {
    const inner = test(args.slice(1), lookup)
    return typeof inner === "string" ? inner : !inner
  }
  if (args.length === 0) return false
  if (args.length === 1) return args[0] !== ""
  if (args.length === 2) {
    const [op, operand] = args as [string, string]
    const node = () => lookup(operand)
    switch (op) {
      case "-n": return operand !== ""
      case "-z": return operand === ""
      case "-e": case "-r": case "-w": return node() !== undefined
      case "-x": return node()?.kind === "dir"
      case "-f": return node()?.kind === "file"
      case "-d": return node()?.kind === "dir"
      case "-s": {
        const found = node()
        return found !== undefined && (found.kind !== "file" || (found.data?.byteLength ?? 0) > 0)
      }
      case "-L": case "-h": return false
      case "-t": return false
      default: return `${op}: unary operator expected`
    }
  }
  if (args.length === 3) {
    const [a, op, b] = args as [string, string, string]
    const num = (s: string) => (/^\s*-?\d+\s*$/.test(s) ? Number(s) : NaN)
    switch (op) {
      case "=": case "==": return a === b
      case "!=": return a !== b
      case "<": return a < b
      case ">": return a > b
      case "-eq": case "-ne": case "-lt": case "-le": case "-gt": case "-ge": {
        const x = num(a)
        const y = num(b)
        if (Number.isNaN(x) || Number.isNaN(y)) return "integer expression expected"
        return { "-eq": x === y, "-ne": x !== y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y }[op]
      }
      default: return `${op}: binary operator expected`
    }
  }
  return "too many arguments"
}

const split = (args: ReadonlyArray<string>, op: string) => {
  const parts: Array<Array<string>> = [[]]
  args.forEach((arg, i) => {
    // an operator only between operands
    if (arg === op && i > 0 && i < args.length - 1) parts.push([])
    else parts[parts.length - 1]!.push(arg)
  })
  return parts
}
