/**
 * What was wrong with a tool call's arguments, in a line a model can act on:
 * `invalid arguments for spawn: cols must be an integer from 2 to 1000 (got a string); bogus is not
 * an argument of spawn (it takes command, cwd, …)`. Read off the tool's JSON Schema (what the
 * client was shown in tools/list) at each path the decoder rejected, or, where the input's Schema
 * has a check of its own (a filter or a parse with its message: "command must not be empty"), in
 * that check's words. Values are never repeated: the caller knows what it sent, and the line goes
 * to traces and logs (only kinds: "a string"); a check's own message says no more than its rule.
 */
import type * as ParseResult from "effect/ParseResult"
import { ArrayFormatter } from "effect/ParseResult"

type Node = Readonly<Record<string, unknown>>

const isNode = (value: unknown): value is Node => typeof value === "object" && value !== null && !Array.isArray(value)

/** "a string", "an array", "null": what a value is, never what it holds. */
export const kindOf = (value: unknown) =>
  value === null ? "null" : Array.isArray(value) ? "an array" : `${/^[aeiou]/.test(typeof value) ? "an" : "a"} ${typeof value}`

const resolve = (root: Node, node: Node): Node => {
  const ref = node["$ref"]
  if (typeof ref !== "string" || !ref.startsWith("#/")) return node
  const target = ref.slice(2).split("/").reduce<unknown>((at, key) => (isNode(at) ? at[key] : undefined), root)
  return isNode(target) ? target : node
}

const child = (root: Node, node: Node | undefined, key: PropertyKey): Node | undefined => {
  if (node === undefined) return undefined
  const at = resolve(root, node)
  const properties = at["properties"]
  if (typeof key === "string" && isNode(properties) && isNode(properties[key])) return properties[key]
  if (typeof key === "number" && isNode(at["items"])) return at["items"]
  return isNode(at["additionalProperties"]) ? at["additionalProperties"] : undefined
}

const range = (noun: string, node: Node) => {
  const min = node["minimum"] ?? node["exclusiveMinimum"]
  const max = node["maximum"] ?? node["exclusiveMaximum"]
  const above = node["exclusiveMinimum"] !== undefined ? ">" : "≥"
  const below = node["exclusiveMaximum"] !== undefined ? "<" : "≤"
  if (typeof min === "number" && typeof max === "number") {
    return above === "≥" && below === "≤" ? `${noun} from ${min} to ${max}` : `${noun} ${above} ${min} and ${below} ${max}`
  }
  if (typeof min === "number") return `${noun} ${above} ${min}`
  if (typeof max === "number") return `${noun} ${below} ${max}`
  return noun
}

/** What a JSON Schema node accepts, in words. */
const expected = (root: Node, node: Node | undefined, depth = 0): string => {
  if (node === undefined || depth > 4) return "a valid value"
  const at = resolve(root, node)
  if (Array.isArray(at["enum"])) return `one of ${at["enum"].map((v) => JSON.stringify(v)).join(", ")}`
  if ("const" in at) return JSON.stringify(at["const"])
  for (const key of ["anyOf", "oneOf"]) {
    const options = at[key]
    if (Array.isArray(options)) return options.filter(isNode).map((o) => expected(root, o, depth + 1)).join(" or ")
  }
  switch (at["type"]) {
    case "integer":
      return range("an integer", at)
    case "number":
      return range("a number", at)
    case "string":
      return typeof at["minLength"] === "number" && at["minLength"] > 0 ? "a non-empty string" : "a string"
    case "boolean":
      return "true or false"
    case "array":
      return isNode(at["items"]) ? `an array of ${expected(root, at["items"], depth + 1).replace(/^an? /, "")}s` : "an array"
    case "object": {
      const values = at["additionalProperties"]
      return isNode(values) && !isNode(at["properties"]) ? `an object of ${expected(root, values, depth + 1).replace(/^an? /, "")} values` : "an object"
    }
    default:
      return "a valid value"
  }
}

const valueAt = (args: unknown, path: ReadonlyArray<PropertyKey>) =>
  path.reduce<unknown>((at, key) => (isNode(at) || Array.isArray(at) ? (at as Record<PropertyKey, unknown>)[key] : undefined), args)

const pathText = (path: ReadonlyArray<PropertyKey>) =>
  path.map((key, i) => (typeof key === "number" ? `[${key}]` : i === 0 ? String(key) : `.${String(key)}`)).join("")

/** The sentence for a decoding error of `tool`'s arguments against its input's JSON Schema. */
export const describe = (tool: string, schema: Node, args: unknown, error: ParseResult.ParseError): string => {
  const issues = ArrayFormatter.formatErrorSync(error)
  const byPath = new Map<string, { path: ReadonlyArray<PropertyKey>; tags: Set<string>; own: string | undefined }>()
  for (const issue of issues) {
    const key = pathText(issue.path)
    const entry = byPath.get(key) ?? { path: issue.path, tags: new Set<string>(), own: undefined }
    entry.tags.add(issue._tag)
    // Effect's generic messages begin "Expected …"; anything else is a check's own sentence.
    if (entry.own === undefined && !issue.message.startsWith("Expected ") && (issue._tag === "Refinement" || issue._tag === "Transformation")) {
      entry.own = issue.message
    }
    byPath.set(key, entry)
  }
  const properties = isNode(schema["properties"]) ? Object.keys(schema["properties"]) : []
  // A value rejected inside (env.A) is the problem; its container's other alternatives (`| undefined`) are not.
  const keys = [...byPath.keys()]
  const innermost = [...byPath.entries()].filter(([key]) =>
    !keys.some((other) => other !== key && (key === "" || other.startsWith(`${key}.`) || other.startsWith(`${key}[`)))
  )
  const problems = innermost.map(([, { path, tags, own }]) => {
    const name = pathText(path)
    if (own !== undefined) return own
    if (path.length === 0) return `arguments must be ${expected(schema, schema)}`
    if (tags.has("Unexpected")) {
      return path.length === 1 && properties.length > 0
        ? `${name} is not an argument of ${tool} (it takes ${properties.join(", ")})`
        : `${name} is not expected here`
    }
    const node = path.reduce<Node | undefined>((at, key) => child(schema, at, key), schema)
    const wanted = expected(schema, node)
    if (tags.has("Missing")) return `${name} is required: ${wanted}`
    const value = valueAt(args, path)
    const type = node === undefined ? undefined : resolve(schema, node)["type"]
    const sameType = typeof value === (type === "integer" ? "number" : type) && value !== null && !Array.isArray(value)
    const got = sameType ? "" : ` (got ${kindOf(value)})`
    return `${name} must be ${wanted}${got}`
  })
  return `invalid arguments for ${tool}: ${problems.join("; ")}`
}
