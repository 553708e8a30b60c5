/**
 * Checks HTTP exchanges against Fly's published Machines OpenAPI document (the subset in
 * machines-openapi.json, with its source): the request's path, query and body must be what an
 * operation declares, and the response's status and body what it declares for that status — or
 * one of the statuses Fly answers any call with (Response Codes, Rate Limits, and the 409/412 of
 * leases, capacity and preconditions), with an ErrorResponse body. What Fly says only in prose is
 * checked too (`x-kilntainers-documented`): a query parameter required in some cases (`instance_id`
 * when waiting for `stopped`), and the memory a guest may have for its CPU kind and count.
 *
 * Stricter than the document in one way, on purpose: an object may not carry properties its
 * schema does not declare. Fly's server ignores unknown fields, so a misspelt field of ours would
 * silently do nothing; and a fake that invents fields would teach the adapter to rely on them.
 * `allOf` with a sibling `type` (a Swagger 2 conversion artifact: `type: object` beside a
 * reference to a string enum) is checked against the `allOf` members only.
 */
import { readFileSync } from "node:fs"

type Schema = {
  readonly type?: string
  readonly properties?: Record<string, Schema>
  readonly additionalProperties?: Schema
  readonly items?: Schema
  readonly enum?: ReadonlyArray<unknown>
  readonly required?: ReadonlyArray<string>
  readonly allOf?: ReadonlyArray<Schema>
  readonly $ref?: string
}

interface Parameter {
  readonly name: string
  readonly in: "path" | "query" | "header"
  readonly required?: boolean
  readonly schema: Schema
}

interface Operation {
  readonly operationId: string
  readonly parameters: ReadonlyArray<Parameter>
  readonly requestBody?: { readonly required: boolean; readonly content: Record<string, { readonly schema: Schema }> }
  readonly responses: Record<string, { readonly content: Record<string, { readonly schema: Schema }> }>
}

interface DescriptionRule {
  readonly operation: string
  readonly when: { readonly query: string; readonly equals: string }
  readonly requires: { readonly query: string }
}

interface GuestSizing {
  readonly operations: ReadonlyArray<string>
  readonly multipleOfMb: number
  readonly perCpuMb: Readonly<Record<string, { readonly min: number; readonly max: number }>>
}

interface Document {
  readonly "x-kilntainers-documented": {
    readonly "generic-responses": { readonly statuses: ReadonlyArray<number | string> }
    readonly "rate-limit": { readonly statuses: ReadonlyArray<number> }
    readonly "conflicts": { readonly statuses: ReadonlyArray<number> }
    readonly "description-rules": { readonly rules: ReadonlyArray<DescriptionRule> }
    readonly "guest-sizing": GuestSizing
    readonly "list-metadata-filter": { readonly operation: string; readonly queryPrefix: string }
  }
  readonly paths: Record<string, Record<string, Operation>>
  readonly components: { readonly schemas: Record<string, Schema> }
}

export const document: Document = JSON.parse(readFileSync(new URL("./machines-openapi.json", import.meta.url), "utf8"))

const resolve = (schema: Schema): Schema => {
  if (schema.$ref === undefined) return schema
  const name = schema.$ref.replace("#/components/schemas/", "")
  const target = document.components.schemas[name]
  if (target === undefined) throw new Error(`the contract refers to a schema it does not have: ${name}`)
  return resolve(target)
}

/** Violations of a value against a schema, each with its JSON path. */
export const validate = (value: unknown, schema: Schema, at = "$"): Array<string> => {
  const resolved = resolve(schema)
  if (resolved.allOf !== undefined) return resolved.allOf.flatMap((member) => validate(value, member, at))
  const problems: Array<string> = []
  if (resolved.enum !== undefined && !resolved.enum.includes(value)) {
    return [`${at}: ${JSON.stringify(value)} is not one of ${JSON.stringify(resolved.enum)}`]
  }
  switch (resolved.type) {
    case "string":
      if (typeof value !== "string") problems.push(`${at}: expected a string, got ${JSON.stringify(value)}`)
      break
    case "integer":
      if (!Number.isInteger(value)) problems.push(`${at}: expected an integer, got ${JSON.stringify(value)}`)
      break
    case "number":
      if (typeof value !== "number") problems.push(`${at}: expected a number, got ${JSON.stringify(value)}`)
      break
    case "boolean":
      if (typeof value !== "boolean") problems.push(`${at}: expected a boolean, got ${JSON.stringify(value)}`)
      break
    case "array":
      if (!Array.isArray(value)) problems.push(`${at}: expected an array`)
      else if (resolved.items) value.forEach((item, index) => problems.push(...validate(item, resolved.items!, `${at}[${index}]`)))
      break
    case "object": {
      if (typeof value !== "object" || value === null || Array.isArray(value)) {
        problems.push(`${at}: expected an object, got ${JSON.stringify(value)}`)
        break
      }
      const record = value as Record<string, unknown>
      for (const name of resolved.required ?? []) if (!(name in record)) problems.push(`${at}: ${name} is required`)
      for (const [name, item] of Object.entries(record)) {
        const declared = resolved.properties?.[name]
        if (declared !== undefined) problems.push(...validate(item, declared, `${at}.${name}`))
        else if (resolved.additionalProperties !== undefined) problems.push(...validate(item, resolved.additionalProperties, `${at}.${name}`))
        else if (resolved.properties !== undefined) problems.push(`${at}.${name}: not a property of this object in Fly's contract`)
      }
      break
    }
  }
  return problems
}

const BASE = "/v1"

/** The operation of a method and path (`/v1/apps/…`), with its path parameters. */
export const operationOf = (method: string, pathname: string) => {
  if (!pathname.startsWith(BASE)) return undefined
  const path = pathname.slice(BASE.length)
  for (const [template, operations] of Object.entries(document.paths)) {
    const names: Array<string> = []
    const pattern = new RegExp(`^${template.replace(/\{([^}]+)\}/g, (_, name: string) => (names.push(name), "([^/]+)"))}$`)
    const match = pattern.exec(path)
    const operation = operations[method.toLowerCase()]
    if (match && operation) return { operation, template, params: Object.fromEntries(names.map((name, i) => [name, decodeURIComponent(match[i + 1]!)])) }
  }
  return undefined
}

const queryValue = (raw: string, schema: Schema): unknown => {
  const type = resolve(schema).type
  if (type === "boolean") return raw === "true" ? true : raw === "false" ? false : raw
  if (type === "integer" || type === "number") return /^-?\d+(\.\d+)?$/.test(raw) ? Number(raw) : raw
  return raw
}

/** What the docs say of a guest's memory that the schema cannot: a range per CPU kind and count. */
export const guestProblems = (guest: unknown, at: string): Array<string> => {
  if (typeof guest !== "object" || guest === null) return []
  const { cpu_kind: kind = "shared", cpus = 1, memory_mb: memory } = guest as { cpu_kind?: unknown; cpus?: unknown; memory_mb?: unknown }
  if (typeof memory !== "number" || typeof cpus !== "number" || typeof kind !== "string") return []
  const sizing = document["x-kilntainers-documented"]["guest-sizing"]
  const range = sizing.perCpuMb[kind]
  const problems: Array<string> = []
  if (memory % sizing.multipleOfMb !== 0) problems.push(`${at}.memory_mb: ${memory} is not a multiple of ${sizing.multipleOfMb}`)
  if (range !== undefined && (memory < range.min * cpus || memory > range.max * cpus)) {
    problems.push(`${at}.memory_mb: ${memory} MB is outside ${range.min * cpus}–${range.max * cpus} MB for ${cpus} ${kind} CPU(s)`)
  }
  return problems
}

/** What is wrong with a request, by Fly's contract (empty when nothing). */
export const checkRequest = (request: {
  readonly method: string
  readonly pathname: string
  readonly query: URLSearchParams
  readonly body: unknown
}): Array<string> => {
  const found = operationOf(request.method, request.pathname)
  if (found === undefined) return [`${request.method} ${request.pathname}: no such operation in Fly's Machines API`]
  const { operation } = found
  const where = `${operation.operationId} request`
  const problems: Array<string> = []
  const extension = document["x-kilntainers-documented"]["list-metadata-filter"]
  for (const [name, raw] of request.query) {
    if (operation.operationId === extension.operation && name.startsWith(extension.queryPrefix)) continue
    const parameter = operation.parameters.find((candidate) => candidate.in === "query" && candidate.name === name)
    if (parameter === undefined) problems.push(`${where}: query parameter ${name} is not declared`)
    else problems.push(...validate(queryValue(raw, parameter.schema), parameter.schema, `${where} query ${name}`))
  }
  for (const rule of document["x-kilntainers-documented"]["description-rules"].rules) {
    if (rule.operation !== operation.operationId || request.query.get(rule.when.query) !== rule.when.equals) continue
    if (!request.query.get(rule.requires.query)) {
      problems.push(`${where}: query parameter ${rule.requires.query} is required when ${rule.when.query}=${rule.when.equals} (Fly's docs)`)
    }
  }
  const declared = operation.requestBody?.content["application/json"]?.schema
  if (request.body !== undefined) {
    if (declared === undefined) problems.push(`${where}: a body is sent but none is declared`)
    else problems.push(...validate(request.body, declared, `${where} body`))
    if (document["x-kilntainers-documented"]["guest-sizing"].operations.includes(operation.operationId)) {
      problems.push(...guestProblems((request.body as { config?: { guest?: unknown } } | null)?.config?.guest, `${where} body.config.guest`))
    }
  } else if (operation.requestBody?.required === true) problems.push(`${where}: the body is required`)
  return problems
}

const isGeneric = (status: number) => {
  const documented = document["x-kilntainers-documented"]
  return documented["rate-limit"].statuses.includes(status) || documented["conflicts"].statuses.includes(status) ||
    documented["generic-responses"].statuses.some((entry) => entry === status || (entry === "5xx" && status >= 500 && status < 600))
}

/** What is wrong with a response, by Fly's contract (empty when nothing). */
export const checkResponse = (response: {
  readonly method: string
  readonly pathname: string
  readonly status: number
  readonly body: unknown
}): Array<string> => {
  const found = operationOf(response.method, response.pathname)
  if (found === undefined) return [`${response.method} ${response.pathname}: no such operation`]
  const where = `${found.operation.operationId} response ${response.status}`
  const declared = found.operation.responses[String(response.status)]
  if (declared !== undefined) {
    const schema = declared.content["application/json"]?.schema
    if (schema === undefined) return []
    return validate(response.body, schema, where)
  }
  if (!isGeneric(response.status)) return [`${where}: status ${response.status} is not documented for this operation nor for every call`]
  return response.status >= 400 ? validate(response.body, { $ref: "#/components/schemas/ErrorResponse" }, where) : []
}
