/**
 * The Kubernetes backend: a computer is an agent-sandbox Sandbox (kubernetes-sigs/agent-sandbox,
 * v1alpha1) made through a SandboxClaim from a SandboxTemplate, so that a SandboxWarmPool of that
 * template gives warm starts; its processes run through the kt-agent in its pod, reached by
 * `pods/exec`. The cluster and credentials are found as kubectl finds them (KubeApi.ts).
 *
 * The folder, one concept per module:
 *   KubernetesBackend.ts  the options, the startup checks, the capabilities, the Backend
 *   KubeApi.ts            the kubeconfig (@kubernetes/client-node) and JSON requests, bounded
 *   KubeError.ts          a Status as a ProviderError
 *   SandboxObjects.ts     computers as claims; our template and warm pool
 *   ClaimWatch.ts         one list-and-watch of our claims
 *   KubeProvider.ts       find, create, start, restart, remove, renew
 *   KubeConnection.ts     a computer's connection: its agent, its held processes, the loss of its claim
 *   KubeAgent.ts          the kt-agent in the pod: copied in when missing, started (durable or bound), attached
 *   PodExec.ts            pods/exec over WebSocket (v5.channel.k8s.io, else v4)
 *
 * At startup: agent-sandbox's API must be served (else: not installed), the namespace reachable,
 * and what the flags ask for must exist in the cluster — a RuntimeClass (gVisor, Kata), the
 * user's SandboxTemplate — or it is refused with Unsupported. Our template (`kilntainers`) is made
 * or brought up to date from the flags, and with --k8s-warm-pool N so is our SandboxWarmPool.
 *
 * Temporary computers carry a lease (`lifecycle.shutdownTime`, policy Delete) that the kernel
 * renews every third of it while it holds them (`renewal`): a dead server's computers are deleted
 * by agent-sandbox's controller at the end of their lease, whether or not a server starts again.
 * Pods have the cluster's network: `network: false` cannot be enforced here (a NetworkPolicy of
 * the cluster's own can), so networkControl is not declared.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { type ProviderError, Unsupported } from "../../../domain/Errors.js"
import { Backend, type Capabilities, capabilitiesWithout } from "../../../services/Backend.js"
import * as NativeBinaries from "../agent/NativeBinaries.js"
import * as ClaimWatch from "./ClaimWatch.js"
import * as KubeApi from "./KubeApi.js"
import * as KubeConnection from "./KubeConnection.js"
import { BACKEND, kubeError, statusReason } from "./KubeError.js"
import * as KubeProvider from "./KubeProvider.js"
import * as Objects from "./SandboxObjects.js"

export interface KubernetesBackendOptions {
  /** --k8s-kubeconfig (else KUBECONFIG, ~/.kube/config, in-cluster). */
  readonly kubeconfig?: string | undefined
  /** --k8s-context */
  readonly context?: string | undefined
  /** --k8s-namespace; else the context's namespace. */
  readonly namespace?: string | undefined
  /** --k8s-template: an existing SandboxTemplate to claim from; else ours, made from the flags below. */
  readonly template?: string | undefined
  /** --k8s-image, for our template. */
  readonly image: string
  /** --k8s-runtime-class (gvisor, kata, …): must exist in the cluster. */
  readonly runtimeClass?: string | undefined
  /** --k8s-cpu, --k8s-memory: Kubernetes quantities, requests and limits. */
  readonly cpu?: string | undefined
  readonly memory?: string | undefined
  /** --k8s-node-selector k=v */
  readonly nodeSelector: Readonly<Record<string, string>>
  /** --k8s-warm-pool N: our SandboxWarmPool's replicas (0: none is made). */
  readonly warmPool: number
  readonly network: boolean
  /** The lease of temporary computers (default 10 minutes), renewed every third of it. */
  readonly leaseMs?: number | undefined
  readonly requestTimeoutMs?: number | undefined
  /** The longest a computer may take to be Ready (default 5 minutes: an image pull). */
  readonly startTimeoutMs?: number | undefined
}

export const DEFAULT_IMAGE = "debian:bookworm-slim"
export const HOME = Objects.HOME
const DEFAULT_LEASE_MS = 10 * 60_000

/** What works on Kubernetes (see the header for networkControl). */
export const capabilities: Capabilities = capabilitiesWithout({ networkControl: false, checkpoints: false, previews: false })

const QUANTITY = /^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$/

/** A reason why the options cannot work, or undefined. */
export const invalidOptions = (options: KubernetesBackendOptions): string | undefined => {
  if (options.cpu !== undefined && !QUANTITY.test(options.cpu)) return `--k8s-cpu ${options.cpu} is not a Kubernetes quantity (500m, 2)`
  if (options.memory !== undefined && !QUANTITY.test(options.memory)) return `--k8s-memory ${options.memory} is not a Kubernetes quantity (512Mi, 2Gi)`
  if (!Number.isInteger(options.warmPool) || options.warmPool < 0) return `--k8s-warm-pool must be a whole number ≥ 0, got ${options.warmPool}`
  if (options.image.trim() === "") return "--k8s-image must not be empty"
  return undefined
}

/** Serves `group/version`? (agent-sandbox installed) */
const serves = (api: KubeApi.KubeApi, groupVersion: string) =>
  api.call({ method: "GET", path: `/apis/${groupVersion}`, operation: `read the cluster's ${groupVersion} API` }).pipe(
    Effect.catchIf((error) => error.reason === "NotFound", () =>
      Effect.fail(new Unsupported({ backend: BACKEND, feature: `agent-sandbox: the cluster does not serve ${groupVersion} (install kubernetes-sigs/agent-sandbox with its extensions)` })))
  )

/** Our template (and warm pool) made, or brought up to date from the options. */
const ensure = (api: KubeApi.KubeApi, path: string, object: Objects.KubeObject, what: string) =>
  api.call<Objects.KubeObject>({ method: "GET", path, operation: `read ${what}` }).pipe(
    Effect.flatMap((current) =>
      JSON.stringify(current["spec"]) === JSON.stringify({ ...current["spec"], ...object["spec"] })
        ? Effect.void
        : api.call({ method: "PUT", path, body: { ...object, metadata: { ...object["metadata"], resourceVersion: current["metadata"]["resourceVersion"] } }, operation: `update ${what}` })
    ),
    Effect.catchIf((error) => error.reason === "NotFound", () =>
      api.call({ method: "POST", path: path.slice(0, path.lastIndexOf("/")), body: object, operation: `create ${what}` }).pipe(
        // Made meanwhile (another server starting, or our own create resent): it is there.
        Effect.catchIf((error) => statusReason(error) === "AlreadyExists", () => Effect.void)
      )),
    Effect.asVoid
  )

export const make = (options: KubernetesBackendOptions) =>
  Effect.gen(function*() {
    const invalid = invalidOptions(options)
    if (invalid !== undefined) return yield* kubeError("use these settings", "Invalid", invalid)
    const api = yield* KubeApi.make({ kubeconfig: options.kubeconfig, context: options.context, requestTimeoutMs: options.requestTimeoutMs ?? 30_000 })
    const namespace = options.namespace ?? api.namespace
    yield* serves(api, Objects.AGENTS_API)
    yield* serves(api, Objects.EXTENSIONS_API)
    yield* api.call({ method: "GET", path: Objects.claimsPath(namespace), query: { limit: "1" }, operation: `list the SandboxClaims of namespace ${namespace}` })
    if (options.runtimeClass !== undefined) {
      yield* api.call({ method: "GET", path: `/apis/node.k8s.io/v1/runtimeclasses/${encodeURIComponent(options.runtimeClass)}`, operation: `read RuntimeClass ${options.runtimeClass}` }).pipe(
        Effect.catchIf((error) => error.reason === "NotFound", () =>
          Effect.fail(new Unsupported({ backend: BACKEND, feature: `--k8s-runtime-class ${options.runtimeClass}: the cluster has no such RuntimeClass` }))),
        // RuntimeClasses are cluster-wide: a server with its namespace's rights only (deploy/kubernetes) cannot read them.
        Effect.catchIf((error) => error._tag === "ProviderError" && error.reason === "Denied", () =>
          Effect.logInfo(`kubernetes backend: cannot read RuntimeClass ${options.runtimeClass} (no rights outside the namespace); pods that name a missing one will not start`))
      )
    }
    const template = options.template ?? Objects.OWN_NAME
    if (options.template !== undefined) {
      yield* api.call({ method: "GET", path: Objects.templatesPath(namespace, options.template), operation: `read SandboxTemplate ${options.template}` }).pipe(
        Effect.catchIf((error) => error.reason === "NotFound", () =>
          Effect.fail(new Unsupported({ backend: BACKEND, feature: `--k8s-template ${options.template}: namespace ${namespace} has no such SandboxTemplate` })))
      )
    } else {
      yield* ensure(api, Objects.templatesPath(namespace, template), Objects.template(namespace, options), `SandboxTemplate ${template}`)
    }
    if (options.warmPool > 0) {
      yield* ensure(api, Objects.warmPoolsPath(namespace, Objects.OWN_NAME), Objects.warmPool(namespace, template, options.warmPool), `SandboxWarmPool ${Objects.OWN_NAME}`)
    }
    const binaries = yield* NativeBinaries.locate(BACKEND)
    const watch = yield* ClaimWatch.make(api, namespace, Objects.labelSelector({}))
    const startTimeoutMs = options.startTimeoutMs ?? 300_000
    const leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS
    const provider = KubeProvider.make({ api, namespace, watch, template, startTimeoutMs })
    if (!options.network) {
      yield* Effect.logInfo("kubernetes backend: pods have the cluster's network; --network off cannot be enforced here (use a NetworkPolicy)")
    }
    return Backend.of({
      name: BACKEND,
      capabilities,
      labelStyle: Objects.STYLE,
      image: options.template === undefined ? options.image : `sandboxtemplate/${options.template}`,
      find: provider.find,
      create: (metadata) => provider.create(metadata, leaseMs),
      start: provider.start,
      connect: KubeConnection.connect({ api, namespace, watch, binaries, startTimeoutMs: 150_000 }),
      restart: provider.restart,
      remove: provider.remove,
      renewal: { everyMs: leaseMs / 3, leaseMs, renew: provider.renew }
    })
  })

/** The Kubernetes backend as a Layer: fails when the cluster cannot be reached or lacks what is asked. */
export const layer = (options: KubernetesBackendOptions): Layer.Layer<Backend, ProviderError | Unsupported> => Layer.scoped(Backend, make(options))
