/** The text builtins' escapes and formats: `echo -e` and `printf` of the toolset shell. */

/** Backslash escapes of `echo -e` and printf formats: \\n \\t \\0NNN \\xHH … */
export const unescape = (s: string) =>
  s.replace(/\\(0[0-7]{0,3}|x[0-9a-fA-F]{1,2}|.)/g, (_, e: string) => {
    switch (e[0]) {
      case "n": return "\n"
      case "t": return "\t"
      case "r": return "\r"
      case "a": return "\x07"
      case "b": return "\b"
      case "f": return "\f"
      case "v": return "\v"
      case "e": return "\x1b"
      case "\\": return "\\"
      case "0": return String.fromCharCode(parseInt(e.slice(1) || "0", 8))
      case "x": return String.fromCharCode(parseInt(e.slice(1), 16))
      default: return "\\" + e
    }
  })

/** printf with %s %b %d %i %u %x %X %o %c %f %e %g %%, flags/width/precision, the format reused for extra arguments. */
export const printf = (format: string, args: ReadonlyArray<string>): string => {
  let out = ""
  let next = 0
  const spec = /%([-+ 0#]*)(\d+|\*)?(?:\.(\d+|\*))?([sbdiuxXocfeEgG%])/g
  do {
    const start = next
    let last = 0
    spec.lastIndex = 0
    for (let m = spec.exec(format); m !== null; m = spec.exec(format)) {
      out += unescape(format.slice(last, m.index))
      last = m.index + m[0].length
      const [, flags = "", widthRaw, precisionRaw, conv] = m
      if (conv === "%") {
        out += "%"
        continue
      }
      const width = widthRaw === "*" ? Number(args[next++] ?? 0) : widthRaw === undefined ? 0 : Number(widthRaw)
      const precision = precisionRaw === "*" ? Number(args[next++] ?? 0) : precisionRaw === undefined ? undefined : Number(precisionRaw)
      const arg = args[next++] ?? ""
      let value: string
      switch (conv) {
        case "s": value = precision === undefined ? arg : arg.slice(0, precision); break
        case "b": value = unescape(arg); break
        case "c": value = arg.slice(0, 1); break
        case "d": case "i": case "u": value = String(Math.trunc(Number(arg) || 0)); break
        case "x": value = (Math.trunc(Number(arg)) || 0).toString(16); break
        case "X": value = (Math.trunc(Number(arg)) || 0).toString(16).toUpperCase(); break
        case "o": value = (Math.trunc(Number(arg)) || 0).toString(8); break
        case "f": value = (Number(arg) || 0).toFixed(precision ?? 6); break
        case "e": case "E": value = (Number(arg) || 0).toExponential(precision ?? 6); break
        default: value = String(Number(arg) || 0)
      }
      if (flags.includes("+") && /[dif]/.test(conv!) && !value.startsWith("-")) value = "+" + value
      if (value.length < width) {
        value = flags.includes("-") ? value.padEnd(width) : flags.includes("0") && !/[sbc]/.test(conv!) ? value.padStart(width, "0") : value.padStart(width)
      }
      out += value
    }
    out += unescape(format.slice(last))
    if (next === start) break
  } while (next < args.length)
  return out
}
