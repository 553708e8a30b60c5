import { assert, describe, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import protobuf from "protobufjs"
import { root } from "../../../support/contracts/modal/ModalSchema.js"
import { SERVED } from "../../../support/ModalFake.js"

/**
 * The fake's schema (vendored protos + additions) against the code the `modal` SDK was generated
 * from: for every message reachable from the RPCs the fake answers, each field must have the same
 * number and wire type as in the SDK's encoder, and a field the SDK sends that the schema lacks must
 * be one the fake knowingly does without.
 */
const sdkSource = readFileSync(createRequire(import.meta.url).resolve("modal").replace(/index\.cjs$/, "index.js"), "utf8")

/** Fields the SDK has that the fake does not need (request options it ignores, response parts it leaves out). */
const NOT_NEEDED = new Set([
  "modal.client.AppGetOrCreateResponse.handleMetadata",
  "modal.client.EnvironmentSettings.blockUnauthenticatedResources",
  "modal.client.Image.arch",
  "modal.client.Sandbox.experimentalOutboundPolicy",
  "modal.client.Sandbox.includeX509Svid",
  "modal.client.Sandbox.outboundPolicy",
  // Names a sidecar container; the sandbox's own snapshot sends "" (not on the wire in proto3).
  "modal.task_command_router.TaskSnapshotFilesystemRequest.containerId"
])

/** message name → field name → wire tag, parsed from the SDK's ts-proto encoders. */
const sdkEncoders = () => {
  const encoders = new Map<string, Map<string, number>>()
  const pattern = /^var (\w+) = \{\n {2}encode\(message, writer = new BinaryWriter\(\)\) \{\n([\s\S]*?)\n {4}return writer;/gm
  for (const match of sdkSource.matchAll(pattern)) {
    const fields = new Map<string, number>()
    let field: string | undefined
    for (const line of match[2]!.split("\n")) {
      field = /message\.(\w+)/.exec(line)?.[1] ?? field
      for (const tag of line.matchAll(/writer\.uint32\((\d+)\)/g)) if (field !== undefined) fields.set(field, Number(tag[1]))
    }
    encoders.set(match[1]!, fields)
  }
  return encoders
}

const WIRE: Record<string, number> = {
  double: 1, float: 5, int32: 0, int64: 0, uint32: 0, uint64: 0, sint32: 0, sint64: 0,
  fixed32: 5, fixed64: 1, sfixed32: 5, sfixed64: 1, bool: 0, string: 2, bytes: 2
}
const wireType = (field: protobuf.Field) => {
  if (field instanceof protobuf.MapField || field.resolvedType instanceof protobuf.Type) return 2
  if (field.repeated && field.type !== "string" && field.type !== "bytes") return 2 // packed
  if (field.resolvedType instanceof protobuf.Enum) return 0
  return WIRE[field.type]!
}
const same = (a: string, b: string) => a.replace(/_/g, "").toLowerCase() === b.replace(/_/g, "").toLowerCase()

describe("the Modal fake's schema matches the modal SDK's generated code", () => {
  it("field numbers and wire types agree for every message the fake serves", () => {
    const encoders = sdkEncoders()
    assert.isAbove(encoders.size, 500, "the SDK's encoders were found")
    const problems: Array<string> = []
    const seen = new Set<string>()
    const check = (type: protobuf.Type) => {
      if (seen.has(type.fullName)) return
      seen.add(type.fullName)
      const name = type.fullName.replace(/^\./, "")
      const sdk = encoders.get(type.name)
      for (const field of type.fieldsArray) {
        if (field.resolvedType instanceof protobuf.Type) check(field.resolvedType)
        const sdkName = sdk === undefined ? undefined : [...sdk.keys()].find((key) => same(key, field.name))
        const tag = (field.id << 3) | wireType(field)
        if (sdk !== undefined && sdkName !== undefined && sdk.get(sdkName) !== tag) {
          problems.push(`${name}.${field.name}: schema tag ${tag}, SDK tag ${sdk.get(sdkName)}`)
        }
      }
      for (const [field, tag] of sdk ?? []) {
        if (type.fieldsArray.some((f) => same(f.name, field))) continue
        if (!NOT_NEEDED.has(`${name}.${field}`)) problems.push(`${name}.${field} (field ${tag >> 3}) is sent by the SDK but missing from the schema`)
      }
    }
    for (const [service, methods] of Object.entries(SERVED)) {
      for (const method of methods) {
        const rpc = root.lookupService(service).methods[method]
        assert.isDefined(rpc, `${service}/${method} is in the schema`)
        rpc!.resolve()
        check(rpc!.resolvedRequestType!)
        check(rpc!.resolvedResponseType!)
      }
    }
    assert.isAbove(seen.size, 40)
    assert.deepStrictEqual(problems, [])
  })

  it("an exec's environment travels in secret_sources, which the schema carries", () => {
    const start = root.lookupType("modal.task_command_router.TaskExecStartRequest")
    const bytes = start.encode(start.fromObject({ taskId: "ta", secretSources: [{ env: { contents: { KT_W: "x" } } }] })).finish()
    const decoded = start.toObject(start.decode(bytes)) as { secretSources: Array<{ env: { contents: Record<string, string> } }> }
    assert.deepStrictEqual(decoded.secretSources[0]!.env.contents, { KT_W: "x" })
    assert.match(sdkSource, /secretSources: secretSources\(params\?\.secrets \?\? \[\], params\?\.env\)/, "the SDK sends exec env as secret sources")
  })
})
