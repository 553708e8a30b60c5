/**
 * The resources the Kubernetes fake serves: agent-sandbox's four custom resources with the part of
 * their published structural schemas that a client can reach, and the core kinds around them.
 *
 * Source of the schemas: kubernetes-sigs/agent-sandbox at tag v0.4.6 (commit d0c124d4, 2026-05-14,
 * the last release whose API is v1alpha1 only; Apache-2.0), `k8s/crds/*.yaml`, transcribed by hand:
 * every field of the four resources' spec and status with its validating keywords (type, required,
 * enum, minimum, maximum, default, format, pattern, maxLength, int-or-string) as published. The
 * embedded PodSpec (4000 lines there) is given for the fields a client of ours sets; the rest of
 * it is accepted as it is (preserve-unknown), so a pod the fake gets is never silently cut.
 */
import type { Schema } from "./SchemaCheck.js"

const str: Schema = { type: "string" }
const bool: Schema = { type: "boolean" }
const int32: Schema = { type: "integer", format: "int32" }
const int64: Schema = { type: "integer", format: "int64" }
const arr = (items: Schema): Schema => ({ type: "array", items })
const obj = (properties: Record<string, Schema>, extra: Partial<Schema> = {}): Schema => ({ type: "object", properties, ...extra })
const map = (values: Schema): Schema => ({ type: "object", additionalProperties: values })
const open: Schema = { type: "object", "x-kubernetes-preserve-unknown-fields": true }
const quantity: Schema = { "x-kubernetes-int-or-string": true }

/** metav1.Condition, as every status here has it. */
const condition = obj({
  lastTransitionTime: { type: "string", format: "date-time" },
  message: { type: "string", maxLength: 32768 },
  observedGeneration: { type: "integer", format: "int64", minimum: 0 },
  reason: { type: "string", maxLength: 1024, pattern: "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$" },
  status: { type: "string", enum: ["True", "False", "Unknown"] },
  type: { type: "string", maxLength: 316, pattern: "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$" }
}, { required: ["lastTransitionTime", "message", "reason", "status", "type"] })

const container = obj({
  name: str,
  image: str,
  imagePullPolicy: { type: "string" },
  command: arr(str),
  args: arr(str),
  workingDir: str,
  env: arr(obj({ name: str, value: str, valueFrom: open }, { required: ["name"] })),
  resources: obj({ limits: map(quantity), requests: map(quantity), claims: arr(open) }),
  securityContext: open,
  volumeMounts: arr(obj({ name: str, mountPath: str, readOnly: bool, subPath: str }, { required: ["mountPath", "name"] })),
  ports: arr(open),
  stdin: bool,
  tty: bool,
  livenessProbe: open,
  readinessProbe: open,
  startupProbe: open,
  lifecycle: open
}, { required: ["name"] })

const podSpec = obj({
  containers: arr(container),
  initContainers: arr(container),
  runtimeClassName: str,
  nodeSelector: map(str),
  tolerations: arr(open),
  affinity: open,
  restartPolicy: str,
  terminationGracePeriodSeconds: int64,
  automountServiceAccountToken: bool,
  enableServiceLinks: bool,
  serviceAccountName: str,
  hostname: str,
  securityContext: open,
  volumes: arr(open),
  dnsPolicy: str,
  priorityClassName: str
}, { required: ["containers"], "x-kubernetes-preserve-unknown-fields": true })

const podTemplate = obj({ metadata: obj({ annotations: map(str), labels: map(str) }), spec: podSpec }, { required: ["spec"] })
const volumeClaimTemplates = arr(obj({ metadata: obj({ name: str, labels: map(str), annotations: map(str) }), spec: open }, { required: ["spec"] }))
const root = (spec: Schema, status: Schema): Schema =>
  obj({ apiVersion: str, kind: str, metadata: { type: "object" }, spec, status }, { required: ["spec"] })

export const sandboxSchema = root(
  obj({
    podTemplate,
    volumeClaimTemplates,
    replicas: { ...int32, minimum: 0, maximum: 1, default: 1 },
    service: bool,
    shutdownTime: { type: "string", format: "date-time" },
    shutdownPolicy: { type: "string", enum: ["Delete", "Retain"], default: "Retain" }
  }, { required: ["podTemplate"] }),
  obj({
    conditions: arr(condition),
    podIPs: arr(str),
    replicas: { ...int32, minimum: 0 },
    selector: str,
    service: str,
    serviceFQDN: str
  })
)

export const sandboxClaimSchema = root(
  obj({
    sandboxTemplateRef: obj({ name: str }, { required: ["name"] }),
    lifecycle: obj({
      shutdownTime: { type: "string", format: "date-time" },
      shutdownPolicy: { type: "string", enum: ["Delete", "DeleteForeground", "Retain"], default: "Retain" },
      ttlSecondsAfterFinished: { ...int32, minimum: 0 }
    }),
    warmpool: { type: "string", default: "default" },
    additionalPodMetadata: obj({ annotations: map(str), labels: map(str) }),
    env: arr(obj({ name: str, value: str, containerName: str }, { required: ["name", "value"] }))
  }, { required: ["sandboxTemplateRef"] }),
  obj({ conditions: arr(condition), sandbox: obj({ name: str, podIPs: arr(str) }) })
)

const peer = obj({ ipBlock: obj({ cidr: str, except: arr(str) }, { required: ["cidr"] }), namespaceSelector: open, podSelector: open })
const port = obj({ endPort: int32, port: quantity, protocol: str })

export const sandboxTemplateSchema = root(
  obj({
    podTemplate,
    volumeClaimTemplates,
    service: bool,
    envVarsInjectionPolicy: { type: "string", enum: ["Allowed", "Overrides", "Disallowed"], default: "Disallowed" },
    networkPolicyManagement: { type: "string", enum: ["Managed", "Unmanaged"], default: "Managed" },
    networkPolicy: obj({ egress: arr(obj({ ports: arr(port), to: arr(peer) })), ingress: arr(obj({ ports: arr(port), from: arr(peer) })) })
  }, { required: ["podTemplate"] }),
  { type: "object" }
)

export const sandboxWarmPoolSchema = root(
  obj({
    replicas: { ...int32, minimum: 0 },
    sandboxTemplateRef: obj({ name: str }, { required: ["name"] }),
    updateStrategy: obj({ type: { type: "string", enum: ["Recreate", "OnReplenish"], default: "OnReplenish" } })
  }, { required: ["replicas", "sandboxTemplateRef"] }),
  obj({ readyReplicas: int32, replicas: int32, selector: str })
)

/** A printer column (`additionalPrinterColumns`): what `kubectl get` shows besides NAME. */
export interface Column {
  readonly name: string
  readonly type: "string" | "integer" | "date"
  /** A path into the object: `status.readyReplicas`. */
  readonly path: string
}

/** A resource the fake serves. */
export interface ResourceType {
  readonly group: string
  readonly version: string
  readonly plural: string
  readonly singular: string
  readonly kind: string
  readonly namespaced: boolean
  readonly shortNames: ReadonlyArray<string>
  /** Checked against this on create and update (custom resources); core kinds are taken as sent. */
  readonly schema?: Schema
  /** Writes to the main resource leave status alone; `/status` writes only status. */
  readonly statusSubresource: boolean
  readonly columns: ReadonlyArray<Column>
  readonly verbs: ReadonlyArray<string>
}

const AGE: Column = { name: "Age", type: "date", path: "metadata.creationTimestamp" }
const ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

export const AGENTS = "agents.x-k8s.io"
export const EXTENSIONS = "extensions.agents.x-k8s.io"
export const VERSION = "v1alpha1"

export const RESOURCES: ReadonlyArray<ResourceType> = [
  { group: AGENTS, version: VERSION, plural: "sandboxes", singular: "sandbox", kind: "Sandbox", namespaced: true, shortNames: ["sandbox"], schema: sandboxSchema, statusSubresource: true, columns: [AGE], verbs: ALL_VERBS },
  { group: EXTENSIONS, version: VERSION, plural: "sandboxclaims", singular: "sandboxclaim", kind: "SandboxClaim", namespaced: true, shortNames: ["sandboxclaim"], schema: sandboxClaimSchema, statusSubresource: true, columns: [AGE], verbs: ALL_VERBS },
  { group: EXTENSIONS, version: VERSION, plural: "sandboxtemplates", singular: "sandboxtemplate", kind: "SandboxTemplate", namespaced: true, shortNames: ["sandboxtemplate"], schema: sandboxTemplateSchema, statusSubresource: true, columns: [AGE], verbs: ALL_VERBS },
  {
    group: EXTENSIONS, version: VERSION, plural: "sandboxwarmpools", singular: "sandboxwarmpool", kind: "SandboxWarmPool", namespaced: true, shortNames: ["swp"],
    schema: sandboxWarmPoolSchema, statusSubresource: true, columns: [{ name: "Ready", type: "integer", path: "status.readyReplicas" }, AGE], verbs: ALL_VERBS
  },
  { group: "", version: "v1", plural: "pods", singular: "pod", kind: "Pod", namespaced: true, shortNames: ["po"], statusSubresource: true, columns: [{ name: "Status", type: "string", path: "status.phase" }, AGE], verbs: ALL_VERBS },
  { group: "", version: "v1", plural: "events", singular: "event", kind: "Event", namespaced: true, shortNames: ["ev"], statusSubresource: false, columns: [AGE], verbs: ALL_VERBS },
  { group: "", version: "v1", plural: "namespaces", singular: "namespace", kind: "Namespace", namespaced: false, shortNames: ["ns"], statusSubresource: true, columns: [AGE], verbs: ALL_VERBS },
  { group: "", version: "v1", plural: "secrets", singular: "secret", kind: "Secret", namespaced: true, shortNames: [], statusSubresource: false, columns: [AGE], verbs: ALL_VERBS },
  { group: "", version: "v1", plural: "services", singular: "service", kind: "Service", namespaced: true, shortNames: ["svc"], statusSubresource: true, columns: [AGE], verbs: ALL_VERBS },
  { group: "", version: "v1", plural: "serviceaccounts", singular: "serviceaccount", kind: "ServiceAccount", namespaced: true, shortNames: ["sa"], statusSubresource: false, columns: [AGE], verbs: ALL_VERBS },
  { group: "apps", version: "v1", plural: "deployments", singular: "deployment", kind: "Deployment", namespaced: true, shortNames: ["deploy"], statusSubresource: true, columns: [AGE], verbs: ALL_VERBS },
  { group: "rbac.authorization.k8s.io", version: "v1", plural: "roles", singular: "role", kind: "Role", namespaced: true, shortNames: [], statusSubresource: false, columns: [AGE], verbs: ALL_VERBS },
  { group: "rbac.authorization.k8s.io", version: "v1", plural: "rolebindings", singular: "rolebinding", kind: "RoleBinding", namespaced: true, shortNames: [], statusSubresource: false, columns: [AGE], verbs: ALL_VERBS },
  { group: "node.k8s.io", version: "v1", plural: "runtimeclasses", singular: "runtimeclass", kind: "RuntimeClass", namespaced: false, shortNames: [], statusSubresource: false, columns: [AGE], verbs: ALL_VERBS }
]

export const resourceOf = (group: string, version: string, plural: string) =>
  RESOURCES.find((type) => type.group === group && type.version === version && type.plural === plural)
