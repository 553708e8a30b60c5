/**
 * What the Kubernetes API server does with a custom resource against its structural OpenAPI v3
 * schema, for the fake (FakeKubeApi.ts): defaults are applied, unknown fields are pruned (and
 * named in a warning, as `fieldValidation=Warn`, the default, does; `Strict` refuses them), and
 * every violation of type, required, enum, minimum/maximum, maxLength, pattern or format is a cause
 * of a 422 Invalid. `x-kubernetes-preserve-unknown-fields` keeps a subtree as it is, and
 * `x-kubernetes-int-or-string` takes either. Pure; mutates only the value it is given to default
 * and prune, as the server does with a request body.
 */

export interface Schema {
  readonly type?: "object" | "array" | "string" | "integer" | "number" | "boolean"
  readonly properties?: Readonly<Record<string, Schema>>
  readonly additionalProperties?: Schema
  readonly items?: Schema
  readonly required?: ReadonlyArray<string>
  readonly enum?: ReadonlyArray<string>
  readonly minimum?: number
  readonly maximum?: number
  readonly maxLength?: number
  readonly pattern?: string
  readonly format?: "date-time" | "int32" | "int64"
  readonly default?: unknown
  readonly "x-kubernetes-int-or-string"?: boolean
  readonly "x-kubernetes-preserve-unknown-fields"?: boolean
}

/** One reason the object is invalid, as a Status cause. */
export interface Cause {
  readonly reason: "FieldValueInvalid" | "FieldValueRequired" | "FieldValueNotSupported" | "FieldValueTypeInvalid" | "FieldValueTooLong"
  readonly field: string
  readonly message: string
}

export interface Checked {
  readonly causes: ReadonlyArray<Cause>
  /** Fields dropped because the schema does not know them (`.spec.foo`). */
  readonly unknown: ReadonlyArray<string>
}

const DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/
const typeName = (value: unknown) => (value === null ? "null" : Array.isArray(value) ? "array" : typeof value === "number" && Number.isInteger(value) ? "integer" : typeof value)

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value)

/** Checks `value` at `path` (`spec.replicas`), applying defaults and pruning unknown fields in place. */
const visit = (value: unknown, schema: Schema, path: string, causes: Array<Cause>, unknown: Array<string>): void => {
  const quoted = JSON.stringify(value)
  const invalid = (reason: Cause["reason"], detail: string) =>
    causes.push({ reason, field: path, message: `Invalid value: ${quoted}: ${detail}` })
  if (schema["x-kubernetes-int-or-string"] === true) {
    if (typeof value !== "string" && !Number.isInteger(value)) invalid("FieldValueTypeInvalid", `${path} in body must be of type integer or string: "${typeName(value)}"`)
    return
  }
  if (schema.type !== undefined) {
    const actual = typeName(value)
    const fits = schema.type === "number" ? typeof value === "number" : actual === schema.type
    if (!fits) {
      invalid("FieldValueTypeInvalid", `${path} in body must be of type ${schema.type}: "${actual}"`)
      return
    }
  }
  if (schema.enum !== undefined && !schema.enum.includes(value as string)) {
    causes.push({ reason: "FieldValueNotSupported", field: path, message: `Unsupported value: ${quoted}: supported values: ${schema.enum.map((v) => `"${v}"`).join(", ")}` })
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) invalid("FieldValueInvalid", `${path} in body should be greater than or equal to ${schema.minimum}`)
    if (schema.maximum !== undefined && value > schema.maximum) invalid("FieldValueInvalid", `${path} in body should be less than or equal to ${schema.maximum}`)
    if (schema.format === "int32" && (value < -2147483648 || value > 2147483647)) invalid("FieldValueInvalid", `${path} in body must be of type int32`)
  }
  if (typeof value === "string") {
    if (schema.maxLength !== undefined && value.length > schema.maxLength) {
      causes.push({ reason: "FieldValueTooLong", field: path, message: `Too long: may not be more than ${schema.maxLength} bytes` })
    }
    if (schema.pattern !== undefined && !new RegExp(schema.pattern).test(value)) invalid("FieldValueInvalid", `${path} in body should match '${schema.pattern}'`)
    if (schema.format === "date-time" && (!DATE_TIME.test(value) || Number.isNaN(Date.parse(value)))) {
      invalid("FieldValueInvalid", `${path} in body must be of type date-time: ${quoted}`)
    }
  }
  if (Array.isArray(value) && schema.items !== undefined) {
    value.forEach((item, index) => visit(item, schema.items!, `${path}[${index}]`, causes, unknown))
  }
  if (isObject(value)) {
    if (schema["x-kubernetes-preserve-unknown-fields"] === true && schema.properties === undefined) return
    for (const [name, child] of Object.entries(schema.properties ?? {})) {
      if (!(name in value) && child.default !== undefined) value[name] = structuredClone(child.default)
    }
    for (const name of schema.required ?? []) {
      if (!(name in value)) causes.push({ reason: "FieldValueRequired", field: `${path}.${name}`, message: "Required value" })
    }
    for (const [name, child] of Object.entries(value)) {
      const declared = schema.properties?.[name] ?? schema.additionalProperties
      if (declared !== undefined) visit(child, declared, `${path}.${name}`, causes, unknown)
      else if (schema["x-kubernetes-preserve-unknown-fields"] !== true) {
        unknown.push(`${path}.${name}`)
        delete value[name]
      }
    }
  }
}

/** Defaults, prunes and checks `body` (a whole object) against its schema; `metadata` is the server's own. */
export const check = (body: Record<string, unknown>, schema: Schema): Checked => {
  const causes: Array<Cause> = []
  const unknown: Array<string> = []
  for (const [name, child] of Object.entries(schema.properties ?? {})) {
    if (name === "metadata" || name === "apiVersion" || name === "kind") continue
    if (!(name in body)) {
      if (child.default !== undefined) body[name] = structuredClone(child.default)
      else if (schema.required?.includes(name)) causes.push({ reason: "FieldValueRequired", field: name, message: "Required value" })
      continue
    }
    visit(body[name], child, name, causes, unknown)
  }
  for (const name of Object.keys(body)) {
    if (!(name in (schema.properties ?? {})) && name !== "metadata" && name !== "apiVersion" && name !== "kind") {
      unknown.push(`.${name}`)
      delete body[name]
    }
  }
  return { causes, unknown: unknown.map((field) => (field.startsWith(".") ? field : `.${field}`)) }
}

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/

/** The API server's own checks of `metadata` (names and labels: apimachinery's validation). */
export const checkMetadata = (metadata: Record<string, unknown>): Array<Cause> => {
  const causes: Array<Cause> = []
  const name = metadata["name"]
  if (typeof name === "string" && (name.length > 253 || !DNS_SUBDOMAIN.test(name))) {
    causes.push({
      reason: "FieldValueInvalid",
      field: "metadata.name",
      message: `Invalid value: "${name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character`
    })
  }
  const labels = metadata["labels"]
  if (isObject(labels)) {
    for (const [key, value] of Object.entries(labels)) {
      const [prefix, local] = key.includes("/") ? key.split("/", 2) as [string, string] : [undefined, key]
      if ((prefix !== undefined && !DNS_SUBDOMAIN.test(prefix)) || local.length > 63 || !LABEL_NAME.test(local)) {
        causes.push({ reason: "FieldValueInvalid", field: "metadata.labels", message: `Invalid value: "${key}": name part must consist of alphanumeric characters, '-', '_' or '.'` })
      }
      if (typeof value !== "string" || value.length > 63 || !LABEL_VALUE.test(value)) {
        causes.push({ reason: "FieldValueInvalid", field: "metadata.labels", message: `Invalid value: ${JSON.stringify(value)}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63)` })
      }
    }
  }
  return causes
}
