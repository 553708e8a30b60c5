/**
 * Modal's gRPC contract as the fake serves it: the vendored protos of modal-labs/modal-client
 * (see README.md in this folder for source, commit and date), plus the few fields that the
 * `modal@0.11.1` SDK sends and that those protos predate. The additions are read off the SDK's own
 * generated code; `test/layers/backends/modal/ModalContract.test.ts` checks that every message the
 * fake serves has the same field numbers and wire types here as in the SDK's generated encoders.
 */
import type { ServiceDefinition } from "@grpc/grpc-js"
import protobuf from "protobufjs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))

/** Fields modal@0.11.1 sends that the vendored protos lack: [message, field name, number, type, rule]. */
export const ADDITIONS: ReadonlyArray<readonly [string, string, number, string, "repeated" | undefined]> = [
  ["modal.task_command_router.TaskExecStartRequest", "secret_sources", 13, "modal.client.SecretSource", "repeated"],
  ["modal.client.SandboxCreateV2Request", "secret_sources", 6, "modal.client.SecretSource", "repeated"],
  ["modal.client.SandboxCreateV2Response", "sandbox_token", 6, "string", undefined],
  ["modal.client.SandboxGetFromNameRequest", "include_terminated", 4, "bool", undefined]
]

const load = (): protobuf.Root => {
  const root = new protobuf.Root()
  // google/protobuf/* come with protobufjs; everything else from this folder.
  root.resolvePath = (_origin, target) => (target.startsWith("google/protobuf/") ? target : join(here, target))
  root.loadSync(["modal_proto/api.proto", "modal_proto/task_command_router.proto"], { keepCase: false })
  // SecretSource is new in the SDK: { oneof source { string secret_id = 1; StringMap env = 2; } }
  const secretSource = new protobuf.Type("SecretSource")
    .add(new protobuf.Field("secretId", 1, "string"))
    .add(new protobuf.Field("env", 2, "StringMap"))
  secretSource.add(new protobuf.OneOf("source", ["secretId", "env"]))
  const client = root.lookup("modal.client") as protobuf.Namespace
  client.add(secretSource)
  for (const [message, name, id, type, rule] of ADDITIONS) {
    const camel = name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())
    root.lookupType(message).add(new protobuf.Field(camel, id, type, rule))
  }
  root.resolveAll()
  return root
}

export const root = load()

/** Plain objects in the shape ts-proto uses on the SDK side: camelCase, numbers for longs and enums. */
const toObject = (type: protobuf.Type, message: protobuf.Message) =>
  type.toObject(message, { longs: Number, enums: Number, defaults: true, oneofs: false, bytes: Buffer }) as Record<string, any>

/** A grpc-js service definition for one of the services, with protobufjs codecs. */
export const serviceDefinition = (fullName: string): ServiceDefinition => {
  const service = root.lookupService(fullName)
  const definition: Record<string, any> = {}
  for (const method of service.methodsArray) {
    method.resolve()
    const request = method.resolvedRequestType!
    const response = method.resolvedResponseType!
    definition[method.name] = {
      path: `/${fullName}/${method.name}`,
      requestStream: method.requestStream === true,
      responseStream: method.responseStream === true,
      requestSerialize: (value: object) => Buffer.from(request.encode(request.fromObject(value)).finish()),
      requestDeserialize: (bytes: Buffer) => toObject(request, request.decode(bytes)),
      responseSerialize: (value: object) => Buffer.from(response.encode(response.fromObject(value)).finish()),
      responseDeserialize: (bytes: Buffer) => toObject(response, response.decode(bytes)),
      originalName: method.name
    }
  }
  return definition as ServiceDefinition
}
