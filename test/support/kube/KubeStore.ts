/**
 * The object store of the Kubernetes fake, with the API server's semantics for what it holds:
 *
 *   - one resourceVersion counter for everything; every write bumps it, and an update or patch
 *     whose `metadata.resourceVersion` is not the current one is a 409 Conflict;
 *   - create: 409 AlreadyExists on a taken name, `generateName` (5 random characters), uid,
 *     creationTimestamp, generation 1; custom resources defaulted, pruned and checked against their
 *     schema (SchemaCheck.ts: 422 Invalid with its causes); metadata checked (names, labels);
 *   - the status subresource: writes to the object keep its status, writes to `/status` keep the
 *     rest; `generation` moves with the spec only;
 *   - delete: the object goes at once (no finalizers here), and so, after it, every object whose
 *     ownerReferences name its uid (background cascading deletion, the garbage collector's);
 *   - watch: every change is an event (ADDED, MODIFIED, DELETED) kept in a bounded history; a watch
 *     from a resourceVersion replays what came after it, or is told 410 Gone when that is older
 *     than the history.
 *
 * Label selectors: `a=b`, `a!=b`, `a`, `!a`, comma-separated. Errors are `KubeFailure`s, which the
 * HTTP layer writes as Status objects.
 */
import { randomBytes, randomUUID } from "node:crypto"
import { check, checkMetadata, type Cause } from "./SchemaCheck.js"
import type { ResourceType } from "./SandboxCrds.js"

export type KubeObject = Record<string, any>

export class KubeFailure extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: Record<string, unknown>
  ) {
    super(message)
  }
}

export interface WatchEvent {
  readonly type: "ADDED" | "MODIFIED" | "DELETED"
  readonly object: KubeObject
  readonly rv: number
  readonly resource: ResourceType
}

type Listener = (event: WatchEvent) => void

const HISTORY = 20_000

const qualified = (type: ResourceType) => (type.group === "" ? type.plural : `${type.plural}.${type.group}`)
const kindName = (type: ResourceType) => (type.group === "" ? type.kind : `${type.kind}.${type.group}`)

export const notFound = (type: ResourceType, name: string) =>
  new KubeFailure(404, "NotFound", `${qualified(type)} "${name}" not found`, { name, group: type.group, kind: type.plural })

const invalid = (type: ResourceType, name: string, causes: ReadonlyArray<Cause>) =>
  new KubeFailure(
    422,
    "Invalid",
    `${kindName(type)} "${name}" is invalid: ${causes.map((cause) => `${cause.field}: ${cause.message}`).join(", ")}`,
    { name, group: type.group, kind: type.kind, causes }
  )

/** Does this object's labels satisfy the selector? */
export const matchesSelector = (labels: Record<string, string> | undefined, selector: string | null | undefined): boolean => {
  if (!selector) return true
  const have = labels ?? {}
  return selector.split(",").map((term) => term.trim()).filter((term) => term !== "").every((term) => {
    const unequal = /^([^!=]+)!=(.*)$/.exec(term)
    if (unequal) return have[unequal[1]!.trim()] !== unequal[2]!.trim()
    const equal = /^([^!=]+)==?(.*)$/.exec(term)
    if (equal) return have[equal[1]!.trim()] === equal[2]!.trim()
    if (term.startsWith("!")) return !(term.slice(1) in have)
    return term in have
  })
}

export class KubeStore {
  private rv = 1
  private readonly objects = new Map<string, KubeObject>()
  /** The type of each stored object, by the same key. */
  private readonly types = new Map<string, ResourceType>()
  private readonly history: Array<WatchEvent> = []
  private readonly listeners = new Set<Listener>()

  /** The current resourceVersion of the store (a list's). */
  get resourceVersion(): string {
    return String(this.rv)
  }

  private key(type: ResourceType, namespace: string | undefined, name: string) {
    return `${type.group}/${type.plural}/${type.namespaced ? namespace ?? "" : ""}/${name}`
  }

  private emit(type: WatchEvent["type"], resource: ResourceType, object: KubeObject) {
    const event: WatchEvent = { type, object: structuredClone(object), rv: this.rv, resource }
    this.history.push(event)
    if (this.history.length > HISTORY) this.history.splice(0, this.history.length - HISTORY)
    for (const listener of [...this.listeners]) listener(event)
  }

  private bump(object: KubeObject) {
    object["metadata"]["resourceVersion"] = String(++this.rv)
  }

  get(type: ResourceType, namespace: string | undefined, name: string): KubeObject {
    const found = this.objects.get(this.key(type, namespace, name))
    if (found === undefined) throw notFound(type, name)
    return structuredClone(found)
  }

  find(type: ResourceType, namespace: string | undefined, name: string): KubeObject | undefined {
    const found = this.objects.get(this.key(type, namespace, name))
    return found === undefined ? undefined : structuredClone(found)
  }

  /**
   * The stored objects of a type themselves, unsorted and not copied: for a controller's periodic
   * look (at a thousand objects, copying them all four times a second was most of the fake's work).
   * Read only; the next write replaces what they say.
   */
  *peek(type: ResourceType, namespace: string | undefined): Iterable<Readonly<KubeObject>> {
    const prefix = `${type.group}/${type.plural}/${type.namespaced && namespace !== undefined ? `${namespace}/` : ""}`
    for (const [key, object] of this.objects) if (key.startsWith(prefix)) yield object
  }

  list(type: ResourceType, namespace: string | undefined, selector?: string | null): Array<KubeObject> {
    const prefix = `${type.group}/${type.plural}/${type.namespaced && namespace !== undefined ? `${namespace}/` : ""}`
    const out: Array<KubeObject> = []
    for (const [key, object] of this.objects) {
      if (!key.startsWith(prefix)) continue
      if (matchesSelector(object["metadata"]["labels"], selector)) out.push(structuredClone(object))
    }
    return out.sort((a, b) => String(a["metadata"]["name"]).localeCompare(String(b["metadata"]["name"])))
  }

  /** Defaults, prunes and checks a body; answers the warnings to send back. */
  private admit(type: ResourceType, body: KubeObject, name: string, strict: boolean): Array<string> {
    const causes = checkMetadata(body["metadata"] ?? {})
    let unknown: ReadonlyArray<string> = []
    if (type.schema !== undefined) {
      const checked = check(body, type.schema)
      causes.push(...checked.causes)
      unknown = checked.unknown
    }
    if (strict && unknown.length > 0) {
      throw new KubeFailure(400, "BadRequest", `strict decoding error: ${unknown.map((field) => `unknown field "${field.slice(1)}"`).join(", ")}`)
    }
    if (causes.length > 0) throw invalid(type, name, causes)
    return unknown.map((field) => `unknown field "${field.slice(1)}"`)
  }

  create(type: ResourceType, namespace: string | undefined, input: KubeObject, options: { readonly strict?: boolean; readonly dryRun?: boolean } = {}) {
    const body = structuredClone(input)
    const metadata: KubeObject = (body["metadata"] ??= {})
    if (!metadata["name"] && typeof metadata["generateName"] === "string") {
      metadata["name"] = `${metadata["generateName"]}${randomBytes(4).toString("hex").slice(0, 5)}`
    }
    const name = String(metadata["name"] ?? "")
    if (name === "") throw invalid(type, name, [{ reason: "FieldValueRequired", field: "metadata.name", message: "Required value: name or generateName is required" }])
    const warnings = this.admit(type, body, name, options.strict === true)
    const key = this.key(type, namespace, name)
    if (this.objects.has(key)) {
      throw new KubeFailure(409, "AlreadyExists", `${qualified(type)} "${name}" already exists`, { name, group: type.group, kind: type.plural })
    }
    body["apiVersion"] = type.group === "" ? type.version : `${type.group}/${type.version}`
    body["kind"] = type.kind
    Object.assign(metadata, {
      uid: randomUUID(),
      creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
      generation: 1,
      ...(type.namespaced ? { namespace } : {})
    })
    delete metadata["resourceVersion"]
    if (type.statusSubresource) delete body["status"]
    if (options.dryRun === true) return { object: body, warnings }
    this.bump(body)
    this.objects.set(key, body)
    this.types.set(key, type)
    this.emit("ADDED", type, body)
    return { object: structuredClone(body), warnings }
  }

  /**
   * Replaces an object (PUT, or a patch already applied to it): its resourceVersion must be the
   * current one when it names one. `subresource: "status"` changes the status only.
   */
  update(type: ResourceType, namespace: string | undefined, name: string, input: KubeObject, options: { readonly status?: boolean; readonly strict?: boolean } = {}) {
    const key = this.key(type, namespace, name)
    const current = this.objects.get(key)
    if (current === undefined) throw notFound(type, name)
    const body = structuredClone(input)
    const metadata: KubeObject = (body["metadata"] ??= {})
    const asked = metadata["resourceVersion"]
    if (asked !== undefined && asked !== "" && asked !== current["metadata"]["resourceVersion"]) {
      throw new KubeFailure(
        409,
        "Conflict",
        `Operation cannot be fulfilled on ${qualified(type)} "${name}": the object has been modified; please apply your changes to the latest version and try again`,
        { name, group: type.group, kind: type.plural }
      )
    }
    let next: KubeObject
    let warnings: Array<string> = []
    if (options.status === true) {
      next = { ...structuredClone(current), status: body["status"] }
      warnings = this.admit(type, next, name, false)
    } else {
      warnings = this.admit(type, body, name, options.strict === true)
      next = body
      if (type.statusSubresource) next["status"] = structuredClone(current["status"])
      const specChanged = JSON.stringify(body["spec"]) !== JSON.stringify(current["spec"])
      next["metadata"] = {
        ...metadata,
        uid: current["metadata"]["uid"],
        creationTimestamp: current["metadata"]["creationTimestamp"],
        generation: current["metadata"]["generation"] + (specChanged ? 1 : 0),
        name,
        ...(type.namespaced ? { namespace } : {})
      }
    }
    next["apiVersion"] = current["apiVersion"]
    next["kind"] = current["kind"]
    if (next["status"] === undefined) delete next["status"]
    this.bump(next)
    this.objects.set(key, next)
    this.emit("MODIFIED", type, next)
    return { object: structuredClone(next), warnings }
  }

  /** Removes the object, then (background cascading, as the garbage collector does) every object it owns. */
  delete(type: ResourceType, namespace: string | undefined, name: string): KubeObject {
    const key = this.key(type, namespace, name)
    const current = this.objects.get(key)
    if (current === undefined) throw notFound(type, name)
    this.objects.delete(key)
    this.types.delete(key)
    this.bump(current)
    this.emit("DELETED", type, current)
    const uid = current["metadata"]["uid"]
    const owned = [...this.objects].filter(([, object]) =>
      (object["metadata"]["ownerReferences"] ?? []).some((owner: KubeObject) => owner["uid"] === uid)
    )
    for (const [childKey, child] of owned) {
      const childType = this.types.get(childKey)
      if (childType !== undefined && this.objects.has(childKey)) this.delete(childType, child["metadata"]["namespace"], child["metadata"]["name"])
    }
    return structuredClone(current)
  }

  /** Events after `since` (a resourceVersion); 410 Gone when the history no longer reaches back to it. */
  since(since: number): Array<WatchEvent> {
    const oldest = this.history[0]?.rv ?? this.rv
    if (since < oldest - 1 && this.history.length >= HISTORY) {
      throw new KubeFailure(410, "Expired", `too old resource version: ${since} (${oldest - 1})`)
    }
    return this.history.filter((event) => event.rv > since)
  }

  subscribe(listener: Listener): () => void {
    this.listeners.add(listener)
    return () => void this.listeners.delete(listener)
  }
}
