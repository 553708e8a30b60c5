/**
 * The agent-sandbox controllers, as the fake runs them (kubernetes-sigs/agent-sandbox v0.4.6,
 * `controllers/sandbox_controller.go`, `extensions/controllers/sandbox{claim,warmpool}_controller.go`),
 * on the fake's store, with each pod a container of a PodRuntime:
 *
 *   SandboxClaim   adopts a Ready Sandbox of a warm pool of its template (unless `warmpool: none`;
 *                  a pool's name picks that pool): the claim is labelled
 *                  `agents.x-k8s.io/sandbox-name`, the Sandbox loses its pool labels and becomes
 *                  the claim's (ownerReference, `agents.x-k8s.io/claim-uid`, the pod-name
 *                  annotation). Otherwise a Sandbox of the claim's name is made from the template's
 *                  podTemplate. Status: `sandbox.name`, podIPs and Ready mirrored from the Sandbox.
 *                  At `lifecycle.shutdownTime`: Delete deletes the claim (and, owned, the rest),
 *                  Retain deletes its Sandbox and says ClaimExpired.
 *   Sandbox        keeps one pod (named as the Sandbox, or by its pod-name annotation) while
 *                  replicas is 1, none at 0 (SandboxSuspended); Ready once the pod runs; at
 *                  `shutdownTime` the pod goes and the policy applies (Delete, or Retain: expired).
 *   SandboxWarmPool keeps `replicas` Sandboxes of its template (`<pool>-xxxxx`), the pool's own.
 *   Pod            a container of the runtime; a pod deleted from outside is made again by its
 *                  Sandbox (a fresh container: nothing of the old one is left); a container that
 *                  ended makes the pod Failed and the Sandbox Finished.
 */
import { createHash } from "node:crypto"
import { KubeFailure, type KubeObject, type KubeStore, type WatchEvent } from "./KubeStore.js"
import type { PodHandle, PodRuntime } from "./PodRuntime.js"
import { AGENTS, EXTENSIONS, resourceOf, VERSION } from "./SandboxCrds.js"

export const SANDBOX_NAME_LABEL = "agents.x-k8s.io/sandbox-name"
export const CLAIM_UID_LABEL = "agents.x-k8s.io/claim-uid"
export const POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name"
export const WARM_POOL_LABEL = "agents.x-k8s.io/warm-pool-sandbox"
export const TEMPLATE_HASH_LABEL = "agents.x-k8s.io/sandbox-template-ref-hash"

const SANDBOXES = resourceOf(AGENTS, VERSION, "sandboxes")!
const CLAIMS = resourceOf(EXTENSIONS, VERSION, "sandboxclaims")!
const TEMPLATES = resourceOf(EXTENSIONS, VERSION, "sandboxtemplates")!
const POOLS = resourceOf(EXTENSIONS, VERSION, "sandboxwarmpools")!
const PODS = resourceOf("", "v1", "pods")!

export const nameHash = (name: string) => createHash("sha256").update(name).digest("hex").slice(0, 8)

const owner = (object: KubeObject) => ({
  apiVersion: object["apiVersion"],
  kind: object["kind"],
  name: object["metadata"]["name"],
  uid: object["metadata"]["uid"],
  controller: true,
  blockOwnerDeletion: true
})
const controllerOf = (object: KubeObject) => (object["metadata"]["ownerReferences"] ?? []).find((ref: KubeObject) => ref["controller"] === true)
const conditionOf = (object: KubeObject, type: string) => (object["status"]?.["conditions"] ?? []).find((c: KubeObject) => c["type"] === type)
const isReady = (object: KubeObject) => conditionOf(object, "Ready")?.["status"] === "True"
const expired = (iso: unknown, now: number) => typeof iso === "string" && Date.parse(iso) <= now

const condition = (type: string, status: "True" | "False", reason: string, message: string, previous?: KubeObject) => ({
  type,
  status,
  reason,
  message,
  observedGeneration: 1,
  lastTransitionTime: previous?.["status"] === status ? previous["lastTransitionTime"] : new Date().toISOString().replace(/\.\d+Z$/, "Z")
})

export class FakeSandboxController {
  /** Running pods' containers, by `namespace/name`. */
  private readonly pods = new Map<string, PodHandle>()
  private readonly chains = new Map<string, Promise<void>>()
  private readonly unsubscribe: () => void
  private readonly ticker: NodeJS.Timeout
  private closed = false

  constructor(private readonly store: KubeStore, private readonly runtime: PodRuntime) {
    this.unsubscribe = store.subscribe((event) => this.observe(event))
    this.ticker = setInterval(() => this.tick(), 250)
  }

  /** Where a pod's container runs (the exec route), or why it cannot be reached. */
  podHandle(namespace: string, name: string): PodHandle | KubeFailure {
    const pod = this.store.find(PODS, namespace, name)
    if (pod === undefined) return new KubeFailure(404, "NotFound", `pods "${name}" not found`)
    const handle = this.pods.get(`${namespace}/${name}`)
    if (handle === undefined || pod["status"]?.["phase"] !== "Running") {
      return new KubeFailure(400, "BadRequest", `container main is not valid for pod ${name}: the pod is ${pod["status"]?.["phase"] ?? "Pending"}`)
    }
    return handle
  }

  async close() {
    this.closed = true
    this.unsubscribe()
    clearInterval(this.ticker)
    await Promise.allSettled([...this.chains.values()])
    await this.runtime.close()
  }

  /** Runs reconciles of one object one after the other. */
  private enqueue(kind: string, namespace: string, name: string, run: () => Promise<void>) {
    const key = `${kind}/${namespace}/${name}`
    const next = (this.chains.get(key) ?? Promise.resolve()).then(() => (this.closed ? undefined : run())).catch((error: unknown) => {
      if (!(error instanceof KubeFailure && (error.code === 404 || error.code === 409))) process.stderr.write(`fake controller: ${key}: ${String(error)}\n`)
      // A conflict or a vanished object: the next event (or tick) reconciles again.
    })
    this.chains.set(key, next)
    void next.finally(() => this.chains.get(key) === next && this.chains.delete(key))
  }

  private reconcile(kind: "claim" | "sandbox" | "pool", namespace: string, name: string) {
    const run = kind === "claim" ? () => this.claim(namespace, name) : kind === "sandbox" ? () => this.sandbox(namespace, name) : () => this.pool(namespace, name)
    this.enqueue(kind, namespace, name, run)
  }

  private observe(event: WatchEvent) {
    const { object, resource } = event
    const namespace = String(object["metadata"]["namespace"] ?? "")
    const name = String(object["metadata"]["name"])
    const owner = controllerOf(object)
    if (resource === CLAIMS) this.reconcile("claim", namespace, name)
    if (resource === SANDBOXES) {
      this.reconcile("sandbox", namespace, name)
      if (owner?.kind === "SandboxClaim") this.reconcile("claim", namespace, owner.name)
      if (owner?.kind === "SandboxWarmPool") this.reconcile("pool", namespace, owner.name)
      // A pool's sandbox now Ready may be what a waiting claim needs.
      if (isReady(object) && object["metadata"]["labels"]?.[WARM_POOL_LABEL] !== undefined) {
        for (const claim of this.store.list(CLAIMS, namespace)) if (!claim["status"]?.["sandbox"]?.["name"]) this.reconcile("claim", namespace, claim["metadata"]["name"])
      }
    }
    if (resource === POOLS) this.reconcile("pool", namespace, name)
    if (resource === PODS) {
      if (event.type === "DELETED") {
        const handle = this.pods.get(`${namespace}/${name}`)
        this.pods.delete(`${namespace}/${name}`)
        if (handle !== undefined) void this.runtime.stop(handle)
      }
      if (owner?.kind === "Sandbox") this.reconcile("sandbox", namespace, owner.name)
    }
  }

  /** Expiries, and containers that ended. */
  private tick() {
    const now = Date.now()
    for (const claim of this.store.peek(CLAIMS, undefined)) {
      if (expired(claim["spec"]?.["lifecycle"]?.["shutdownTime"], now) && conditionOf(claim, "Ready")?.["reason"] !== "ClaimExpired") {
        this.reconcile("claim", claim["metadata"]["namespace"], claim["metadata"]["name"])
      }
    }
    for (const sandbox of this.store.peek(SANDBOXES, undefined)) {
      if (expired(sandbox["spec"]?.["shutdownTime"], now) && conditionOf(sandbox, "Ready")?.["reason"] !== "SandboxExpired") {
        this.reconcile("sandbox", sandbox["metadata"]["namespace"], sandbox["metadata"]["name"])
      }
    }
    for (const [key, handle] of this.pods) {
      void this.runtime.running(handle).then((running) => {
        if (running || this.pods.get(key) !== handle) return
        const [namespace, name] = key.split("/") as [string, string]
        const pod = this.store.find(PODS, namespace, name)
        if (pod === undefined || pod["status"]?.["phase"] !== "Running") return
        this.store.update(PODS, namespace, name, { ...pod, status: { ...pod["status"], phase: "Failed", conditions: [condition("Ready", "False", "PodFailed", "the container ended")] } }, { status: true })
      })
    }
  }

  private setStatus(resource: typeof CLAIMS, object: KubeObject, status: KubeObject) {
    if (JSON.stringify(object["status"] ?? {}) === JSON.stringify(status)) return
    this.store.update(resource, object["metadata"]["namespace"], object["metadata"]["name"], { ...object, status }, { status: true })
  }

  private async claim(namespace: string, name: string) {
    const claim = this.store.find(CLAIMS, namespace, name)
    if (claim === undefined) return
    const lifecycle = claim["spec"]["lifecycle"] ?? {}
    const current = claim["status"]?.["sandbox"]?.["name"] || claim["metadata"]["labels"]?.[SANDBOX_NAME_LABEL]
    const ready = conditionOf(claim, "Ready")
    if (expired(lifecycle["shutdownTime"], Date.now())) {
      if (lifecycle["shutdownPolicy"] === "Delete" || lifecycle["shutdownPolicy"] === "DeleteForeground") {
        this.store.delete(CLAIMS, namespace, name)
        return
      }
      if (current && this.store.find(SANDBOXES, namespace, current) !== undefined) this.store.delete(SANDBOXES, namespace, current)
      return this.setStatus(CLAIMS, claim, { conditions: [condition("Ready", "False", "ClaimExpired", "Claim expired", ready)] })
    }
    let sandbox = current ? this.store.find(SANDBOXES, namespace, current) : undefined
    if (sandbox !== undefined && controllerOf(sandbox)?.uid !== claim["metadata"]["uid"]) sandbox = undefined
    if (sandbox === undefined) sandbox = this.adopt(claim) ?? this.createFor(claim)
    if (sandbox === undefined) return
    const mirrored = conditionOf(sandbox, "Ready")
    this.setStatus(CLAIMS, claim, {
      conditions: [mirrored === undefined
        ? condition("Ready", "False", "SandboxNotReady", "Sandbox is not ready", ready)
        : { ...mirrored, lastTransitionTime: ready?.["status"] === mirrored["status"] ? ready["lastTransitionTime"] : mirrored["lastTransitionTime"] }],
      sandbox: { name: sandbox["metadata"]["name"], ...(sandbox["status"]?.["podIPs"] ? { podIPs: sandbox["status"]["podIPs"] } : {}) }
    })
  }

  /** A Ready sandbox of a warm pool of the claim's template, made the claim's own. */
  private adopt(claim: KubeObject): KubeObject | undefined {
    const policy = claim["spec"]["warmpool"] ?? "default"
    if (policy === "none") return undefined
    const namespace = claim["metadata"]["namespace"]
    const templateHash = nameHash(claim["spec"]["sandboxTemplateRef"]["name"])
    const candidates = this.store.list(SANDBOXES, namespace, `${WARM_POOL_LABEL},${TEMPLATE_HASH_LABEL}=${templateHash}`)
      .filter((sb) => controllerOf(sb)?.kind === "SandboxWarmPool" && isReady(sb))
      .filter((sb) => policy === "default" || sb["metadata"]["labels"][WARM_POOL_LABEL] === nameHash(policy))
      .sort((a, b) => String(a["metadata"]["creationTimestamp"]).localeCompare(String(b["metadata"]["creationTimestamp"])))
    const chosen = candidates[0]
    if (chosen === undefined) return undefined
    const sandboxName = chosen["metadata"]["name"]
    this.store.update(CLAIMS, namespace, claim["metadata"]["name"], {
      ...claim,
      metadata: { ...claim["metadata"], labels: { ...claim["metadata"]["labels"], [SANDBOX_NAME_LABEL]: sandboxName } }
    })
    const labels = { ...chosen["metadata"]["labels"], [CLAIM_UID_LABEL]: claim["metadata"]["uid"] }
    delete labels[WARM_POOL_LABEL]
    delete labels[TEMPLATE_HASH_LABEL]
    // The pool has one fewer: it makes another.
    this.reconcile("pool", namespace, controllerOf(chosen).name)
    return this.store.update(SANDBOXES, namespace, sandboxName, {
      ...chosen,
      metadata: {
        ...chosen["metadata"],
        labels,
        annotations: { ...chosen["metadata"]["annotations"], [POD_NAME_ANNOTATION]: sandboxName },
        ownerReferences: [owner(claim)]
      }
    }).object
  }

  private createFor(claim: KubeObject): KubeObject | undefined {
    const namespace = claim["metadata"]["namespace"]
    const templateName = claim["spec"]["sandboxTemplateRef"]["name"]
    const template = this.store.find(TEMPLATES, namespace, templateName)
    if (template === undefined) {
      this.setStatus(CLAIMS, claim, { conditions: [condition("Ready", "False", "TemplateNotFound", `SandboxTemplate "${templateName}" not found`, conditionOf(claim, "Ready"))] })
      return undefined
    }
    const podTemplate = structuredClone(template["spec"]["podTemplate"])
    podTemplate.metadata = { ...podTemplate.metadata, labels: { ...podTemplate.metadata?.labels, [CLAIM_UID_LABEL]: claim["metadata"]["uid"], [TEMPLATE_HASH_LABEL]: nameHash(templateName) } }
    return this.store.create(SANDBOXES, namespace, {
      metadata: {
        name: claim["metadata"]["name"],
        labels: { [CLAIM_UID_LABEL]: claim["metadata"]["uid"] },
        annotations: { "agents.x-k8s.io/sandbox-template-ref": templateName },
        ownerReferences: [owner(claim)]
      },
      spec: { podTemplate, replicas: 1, ...(template["spec"]["volumeClaimTemplates"] ? { volumeClaimTemplates: template["spec"]["volumeClaimTemplates"] } : {}) }
    }).object
  }

  private async sandbox(namespace: string, name: string) {
    const sandbox = this.store.find(SANDBOXES, namespace, name)
    if (sandbox === undefined) return
    const podName = sandbox["metadata"]["annotations"]?.[POD_NAME_ANNOTATION] || name
    const pod = this.store.find(PODS, namespace, podName)
    const ready = conditionOf(sandbox, "Ready")
    if (expired(sandbox["spec"]["shutdownTime"], Date.now())) {
      if (pod !== undefined) this.store.delete(PODS, namespace, podName)
      if (sandbox["spec"]["shutdownPolicy"] === "Delete") return void this.store.delete(SANDBOXES, namespace, name)
      return this.setStatus(SANDBOXES, sandbox, { conditions: [condition("Ready", "False", "SandboxExpired", "Sandbox has expired", ready)] })
    }
    if ((sandbox["spec"]["replicas"] ?? 1) === 0) {
      if (pod !== undefined) this.store.delete(PODS, namespace, podName)
      return this.setStatus(SANDBOXES, sandbox, {
        conditions: [condition("Ready", "False", "SandboxSuspended", "Sandbox is suspended", ready), condition("Suspended", "True", "PodTerminated", "the pod is terminated", conditionOf(sandbox, "Suspended"))],
        replicas: 0
      })
    }
    if (pod === undefined) return this.startPod(sandbox, podName)
    const phase = pod["status"]?.["phase"]
    const base = { replicas: 1, selector: `${CLAIM_UID_LABEL}=${sandbox["metadata"]["labels"]?.[CLAIM_UID_LABEL] ?? ""}` }
    if (phase === "Running") {
      return this.setStatus(SANDBOXES, sandbox, { ...base, conditions: [condition("Ready", "True", "DependenciesReady", "Pod is Ready", ready)], podIPs: pod["status"]["podIPs"].map((p: KubeObject) => p["ip"]) })
    }
    if (phase === "Failed" || phase === "Succeeded") {
      const reason = phase === "Failed" ? "PodFailed" : "PodSucceeded"
      return this.setStatus(SANDBOXES, sandbox, { ...base, conditions: [condition("Ready", "False", reason, `the pod ${phase.toLowerCase()}`, ready), condition("Finished", "True", reason, `the pod ${phase.toLowerCase()}`, conditionOf(sandbox, "Finished"))] })
    }
    return this.setStatus(SANDBOXES, sandbox, { ...base, conditions: [condition("Ready", "False", "DependenciesNotReady", "Pod is not ready", ready)] })
  }

  private async startPod(sandbox: KubeObject, podName: string) {
    const namespace = sandbox["metadata"]["namespace"]
    const template = sandbox["spec"]["podTemplate"]
    const pod = this.store.create(PODS, namespace, {
      metadata: { name: podName, labels: template["metadata"]?.["labels"] ?? {}, annotations: template["metadata"]?.["annotations"] ?? {}, ownerReferences: [owner(sandbox)] },
      spec: template["spec"]
    }).object
    const handle = await this.runtime.start(namespace, pod)
    const now = this.store.find(PODS, namespace, podName)
    if (now === undefined || now["metadata"]["uid"] !== pod["metadata"]["uid"] || this.closed) return void this.runtime.stop(handle)
    this.pods.set(`${namespace}/${podName}`, handle)
    this.store.update(PODS, namespace, podName, {
      ...now,
      status: { phase: "Running", podIP: handle.ip, podIPs: [{ ip: handle.ip }], conditions: [condition("Ready", "True", "ContainersReady", "")] }
    }, { status: true })
  }

  private async pool(namespace: string, name: string) {
    const pool = this.store.find(POOLS, namespace, name)
    if (pool === undefined) return
    const owned = this.store.list(SANDBOXES, namespace).filter((sb) => controllerOf(sb)?.uid === pool["metadata"]["uid"])
    const templateName = pool["spec"]["sandboxTemplateRef"]["name"]
    const template = this.store.find(TEMPLATES, namespace, templateName)
    const wanted = Number(pool["spec"]["replicas"])
    if (template !== undefined) {
      for (let i = owned.length; i < wanted; i++) {
        const podTemplate = structuredClone(template["spec"]["podTemplate"])
        const labels = { [WARM_POOL_LABEL]: nameHash(name), [TEMPLATE_HASH_LABEL]: nameHash(templateName) }
        podTemplate.metadata = { ...podTemplate.metadata, labels: { ...podTemplate.metadata?.labels, ...labels } }
        owned.push(this.store.create(SANDBOXES, namespace, { metadata: { generateName: `${name}-`, labels, ownerReferences: [owner(pool)] }, spec: { podTemplate, replicas: 1 } }).object)
      }
    }
    for (const extra of owned.splice(Math.max(0, wanted))) this.store.delete(SANDBOXES, namespace, extra["metadata"]["name"])
    this.setStatus(POOLS, pool, { replicas: owned.length, readyReplicas: owned.filter(isReady).length, selector: `${WARM_POOL_LABEL}=${nameHash(name)}` })
  }
}
