/**
 * Deterministic generator of tool calls for fuzzing the MCP surface: arguments shaped by each
 * tool's input JSON Schema, then mutated (wrong types, missing and unknown fields, NUL, huge and
 * odd strings, non-object arguments, unknown tools). Commands come from a harmless pool, so the
 * same generator can drive a real sandbox.
 */

/** A small, fast PRNG (mulberry32): the same seed gives the same calls. */
export const random = (seed: number) => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

interface JsonSchema {
  readonly type?: string
  readonly enum?: ReadonlyArray<unknown>
  readonly anyOf?: ReadonlyArray<JsonSchema>
  readonly items?: JsonSchema
  readonly properties?: Record<string, JsonSchema>
  readonly required?: ReadonlyArray<string>
}

export interface ListedTool {
  readonly name: string
  readonly inputSchema: unknown
}

export interface FuzzCall {
  readonly name: string
  readonly arguments: unknown
}

const commands = ["true", "echo fuzz", "exit 3", "printf 'a\\0b'", "sleep 0.05", "echo $HOME; pwd", "missing", "cat /dev/null"]
const oddStrings = [
  "", " ", "\t", "a", "A", "p1", "p2", "p999999", "\u0000", "a\u0000b", "-", "-bad-", "UPPER", "ok-computer",
  "a".repeat(63), "a".repeat(64), "x".repeat(70_000), "é∂ƒ😀", "\u202e\u200b\ufeff", "../../etc/passwd", "/tmp", "/",
  "relative/path", "SIGKILL", "SIGNOPE", "9", "-1", "0", "^(a+)+$", "(", "(?=x)", "\\1", "a{1001}", "A=B", "=",
  "$(id)", "`id`", "'\"", "\r\n", "\u001b[31m", "null", "true", "{}", "644", "999", "rwx", "\\x00", "\\q"
]
const oddNumbers = [0, 1, -1, 2, 3, 30, 100, 1000, 0.5, -0.5, 1e9, -1e9, 2 ** 31, 2 ** 53, 1e300]
const wrongTypes: ReadonlyArray<unknown> = [null, 1, "s", true, [], {}, [1, "x"], { nested: { deep: [null] } }]
const envKeys = ["A", "PATH", "X_Y", "", "A=B", "=", "a\u0000", "é", " ", "HOME"]

/** Makes calls for the listed tools; ids seen in earlier results can be fed back with `remember`. */
export const generator = (tools: ReadonlyArray<ListedTool>, seed: number) => {
  const next = random(seed)
  const chance = (p: number) => next() < p
  const pick = <A>(items: ReadonlyArray<A>): A => items[Math.floor(next() * items.length)]!
  const processIds: Array<string> = ["p1"]
  const computerIds: Array<string> = ["fuzz-box"]

  const string = (field: string): string => {
    if (field === "command") return chance(0.8) ? pick(commands) : pick(oddStrings)
    if (field === "id" && chance(0.6)) return pick(processIds)
    if (field === "computer_id" && chance(0.5)) return pick(computerIds)
    if (field === "content" || field === "input" || field === "stdin") {
      return chance(0.5) ? pick(oddStrings) : "data ".repeat(Math.floor(next() * 50))
    }
    if (chance(0.85)) return pick(oddStrings)
    return Array.from({ length: Math.floor(next() * 24) }, () => String.fromCharCode(32 + Math.floor(next() * 95))).join("")
  }

  const value = (field: string, schema: JsonSchema): unknown => {
    if (schema.enum && chance(0.8)) return pick(schema.enum)
    if (schema.anyOf && schema.anyOf.length > 0) return value(field, pick(schema.anyOf))
    switch (schema.type) {
      case "string":
        return string(field)
      case "integer":
      case "number":
        return pick(oddNumbers)
      case "boolean":
        return chance(0.5)
      case "array":
        return Array.from({ length: Math.floor(next() * 4) }, () => field === "args" && chance(0.6) ? pick(commands) : string(field))
      case "object":
        if (field === "env") {
          return Object.fromEntries(Array.from({ length: Math.floor(next() * 3) }, () => [pick(envKeys), string("value")]))
        }
        return {}
      default:
        return pick(wrongTypes)
    }
  }

  const argumentsFor = (schema: JsonSchema): unknown => {
    if (chance(0.03)) return pick<unknown>([null, [], ["x"], "arguments", 42, true])
    const args: Record<string, unknown> = {}
    for (const [field, property] of Object.entries(schema.properties ?? {})) {
      const required = schema.required?.includes(field) ?? false
      if (required ? chance(0.05) : chance(0.5)) continue
      args[field] = chance(0.08) ? pick(wrongTypes) : value(field, property)
    }
    if (chance(0.05)) {
      // defineProperty: a plain assignment to `__proto__` would set the prototype, not send the key.
      Object.defineProperty(args, pick(["extra", "__proto__", "constructor", "Command"]), {
        value: pick(wrongTypes),
        enumerable: true,
        configurable: true,
        writable: true
      })
    }
    return args
  }

  return {
    next: (): FuzzCall => {
      if (chance(0.02)) return { name: pick(["", "nope", "spawn ", "SPAWN", "a\u0000b"]), arguments: {} }
      const tool = pick(tools)
      return { name: tool.name, arguments: argumentsFor(tool.inputSchema as JsonSchema) }
    },
    /** Feeds ids from a result back into later calls, so calls reach real processes and computers. */
    remember: (structured: unknown) => {
      if (typeof structured !== "object" || structured === null) return
      const { computer_id, id } = structured as { id?: unknown; computer_id?: unknown }
      if (typeof id === "string" && processIds.length < 50) processIds.push(id)
      if (typeof computer_id === "string" && computerIds.length < 20) computerIds.push(computer_id)
    }
  }
}
