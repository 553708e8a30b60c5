/**
 * kilntainers' computers as agent-sandbox objects (kubernetes-sigs/agent-sandbox, API v1alpha1):
 *
 *   SandboxTemplate  the pod a computer is (image, resources, runtime class, node selector), ours
 *                    (`kilntainers`, made at startup from the flags) or the user's (--k8s-template)
 *   SandboxClaim     one per computer, `kt-<computer id>`: the controller gives it a Sandbox — a
 *                    Ready one of a SandboxWarmPool of the template when there is one, else a new
 *                    one — and the Sandbox a pod. A temporary computer's claim carries
 *                    `lifecycle.shutdownTime` (policy Delete), the lease the server renews: a dead
 *                    server's computers end by themselves. A permanent one has no end.
 *   SandboxWarmPool  `kilntainers`, with --k8s-warm-pool replicas: warm starts.
 *
 * Labels select (`kilntainers`, `kilntainers-computer-id`, `kilntainers-temporary`: label values
 * are short and plain); everything the kernel records (ComputerMetadata) is in annotations, whose
 * values may be anything (times, image references). A permanent computer's claim also carries its
 * agent's key (AGENT_KEY_ANNOTATION): servers read claims (their Role lists them); the pod reads
 * no claim (no service-account token in our template, no downward API, and the controller copies no
 * claim annotation to the Sandbox or the pod). Pure.
 */
import * as Option from "effect/Option"
import { type ComputerMetadata, fromLabels, type LabelStyle, selector, toLabels } from "../../../domain/ComputerMetadata.js"
import type { Instance, Query } from "../../../services/Backend.js"

export const STYLE: LabelStyle = "dashed"
export const AGENTS_API = "agents.x-k8s.io/v1alpha1"
export const EXTENSIONS_API = "extensions.agents.x-k8s.io/v1alpha1"
/** The name of what this backend makes itself: the template and the warm pool. */
export const OWN_NAME = "kilntainers"
/** agent-sandbox's annotation of the pod a Sandbox runs as (else: the Sandbox's own name). */
export const POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name"
/** A permanent computer's agent key (64 hex digits), which a server proves to attach to its agent. */
export const AGENT_KEY_ANNOTATION = "kilntainers-agent-key"
/** Where processes start, and HOME. */
export const HOME = "/home/agent"

/** A JSON object of the API. */
export type KubeObject = { readonly [key: string]: any }

export const claimName = (computerId: string) => `kt-${computerId}`

export const claimsPath = (namespace: string, name?: string) =>
  `/apis/extensions.agents.x-k8s.io/v1alpha1/namespaces/${encodeURIComponent(namespace)}/sandboxclaims${name === undefined ? "" : `/${encodeURIComponent(name)}`}`
export const templatesPath = (namespace: string, name?: string) =>
  `/apis/extensions.agents.x-k8s.io/v1alpha1/namespaces/${encodeURIComponent(namespace)}/sandboxtemplates${name === undefined ? "" : `/${encodeURIComponent(name)}`}`
export const warmPoolsPath = (namespace: string, name?: string) =>
  `/apis/extensions.agents.x-k8s.io/v1alpha1/namespaces/${encodeURIComponent(namespace)}/sandboxwarmpools${name === undefined ? "" : `/${encodeURIComponent(name)}`}`
export const sandboxPath = (namespace: string, name: string) =>
  `/apis/agents.x-k8s.io/v1alpha1/namespaces/${encodeURIComponent(namespace)}/sandboxes/${encodeURIComponent(name)}`
export const execPath = (namespace: string, pod: string) => `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods/${encodeURIComponent(pod)}/exec`

/** A label selector (`a=b,c=d`) for a query. */
export const labelSelector = (query: Query) =>
  Object.entries(selector(STYLE, query)).map(([key, value]) => `${key}=${value}`).join(",")

/**
 * The pod's main process: a shell that waits until it is told to stop, in any image with /bin/sh
 * (no `sleep infinity`, which busybox lacks). Everything of ours runs beside it through exec.
 */
export const KEEPALIVE = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"

export interface TemplateSpec {
  readonly image: string
  readonly runtimeClass?: string | undefined
  readonly nodeSelector: Readonly<Record<string, string>>
  /** CPU and memory as Kubernetes quantities (`500m`, `1Gi`): requests and limits alike. */
  readonly cpu?: string | undefined
  readonly memory?: string | undefined
}

/** Our SandboxTemplate: one container that idles; no service account token, no service links. */
export const template = (namespace: string, spec: TemplateSpec): KubeObject => {
  const resources = {
    ...(spec.cpu === undefined ? {} : { cpu: spec.cpu }),
    ...(spec.memory === undefined ? {} : { memory: spec.memory })
  }
  return {
    apiVersion: EXTENSIONS_API,
    kind: "SandboxTemplate",
    metadata: { name: OWN_NAME, namespace, labels: { [OWN_NAME]: "true" } },
    spec: {
      podTemplate: {
        metadata: { labels: { [OWN_NAME]: "true" } },
        spec: {
          ...(spec.runtimeClass === undefined ? {} : { runtimeClassName: spec.runtimeClass }),
          ...(Object.keys(spec.nodeSelector).length === 0 ? {} : { nodeSelector: { ...spec.nodeSelector } }),
          automountServiceAccountToken: false,
          enableServiceLinks: false,
          terminationGracePeriodSeconds: 5,
          containers: [{
            name: "computer",
            image: spec.image,
            command: ["/bin/sh", "-c", KEEPALIVE],
            ...(Object.keys(resources).length === 0 ? {} : { resources: { requests: resources, limits: resources } })
          }]
        }
      }
    }
  }
}

/** Our SandboxWarmPool of `replicas` ready Sandboxes of a template. */
export const warmPool = (namespace: string, templateName: string, replicas: number): KubeObject => ({
  apiVersion: EXTENSIONS_API,
  kind: "SandboxWarmPool",
  metadata: { name: OWN_NAME, namespace, labels: { [OWN_NAME]: "true" } },
  spec: { replicas, sandboxTemplateRef: { name: templateName } }
})

/**
 * The claim of a new computer; a temporary one ends at `shutdownTime` unless renewed. `agentKey`: a
 * permanent one's (its agent outlives servers); a temporary one's agent is bound to its server.
 */
export const claim = (
  namespace: string,
  templateName: string,
  metadata: ComputerMetadata,
  shutdownTime: string | undefined,
  agentKey?: string | undefined
): KubeObject => ({
  apiVersion: EXTENSIONS_API,
  kind: "SandboxClaim",
  metadata: {
    name: claimName(metadata.id),
    namespace,
    labels: selector(STYLE, { id: metadata.id, temporary: metadata.temporary }),
    annotations: { ...toLabels(STYLE, metadata), ...(agentKey === undefined ? {} : { [AGENT_KEY_ANNOTATION]: agentKey }) }
  },
  spec: {
    sandboxTemplateRef: { name: templateName },
    ...(shutdownTime === undefined ? {} : { lifecycle: { shutdownTime, shutdownPolicy: "Delete" } })
  }
})

const condition = (object: KubeObject, type: string): KubeObject | undefined =>
  (object["status"]?.["conditions"] ?? []).find((c: KubeObject) => c["type"] === type)

/** Why a claim's computer cannot run any more, or undefined while it can (or is coming up). */
export const ended = (claim: KubeObject): string | undefined => {
  const ready = condition(claim, "Ready")
  if (ready?.["reason"] === "ClaimExpired") return `its SandboxClaim ${claim["metadata"]["name"]} expired`
  if (ready?.["reason"] === "SandboxExpired") return `its Sandbox expired`
  if (condition(claim, "Finished")?.["status"] === "True") return `its pod ended (${condition(claim, "Finished")?.["reason"] ?? "finished"})`
  if (claim["metadata"]["deletionTimestamp"] !== undefined) return `its SandboxClaim ${claim["metadata"]["name"]} is being deleted`
  return undefined
}

/** The agent key a claim carries: none on a temporary computer's, or one made before durable agents. */
export const agentKeyOf = (claim: KubeObject): string | undefined => {
  const key = claim["metadata"]["annotations"]?.[AGENT_KEY_ANNOTATION]
  return typeof key === "string" && /^[0-9a-f]{64}$/.test(key) ? key : undefined
}

export const isReady = (claim: KubeObject) => condition(claim, "Ready")?.["status"] === "True"

/** Why the claim is not Ready yet, in the controller's words. */
export const notReady = (claim: KubeObject) => {
  const ready = condition(claim, "Ready")
  return ready === undefined ? "the controller has not reported on it yet" : `${ready["reason"]}: ${ready["message"]}`
}

/** The computer a claim is, or none when it is not ours. `expires` is its shutdownTime. */
export const instanceOf = (claim: KubeObject): Option.Option<Instance> => {
  const labels = { ...claim["metadata"]["annotations"], ...claim["metadata"]["labels"] }
  return Option.map(fromLabels(STYLE, labels, { created: claim["metadata"]["creationTimestamp"] }), (metadata): Instance => {
    const shutdown = claim["spec"]?.["lifecycle"]?.["shutdownTime"]
    return {
      providerId: claim["metadata"]["name"],
      metadata: typeof shutdown === "string" ? { ...metadata, expires: shutdown } : metadata,
      state: ended(claim) !== undefined ? "gone" : isReady(claim) ? "running" : "creating"
    }
  })
}
