/**
 * A Kubernetes API server fake on 127.0.0.1 (HTTPS with its own CA, a bearer token: kubectl sends
 * no token over plain HTTP) that follows the API's
 * semantics for what kilntainers and kubectl use, over the store (KubeStore.ts) and the resources
 * of SandboxCrds.ts:
 *
 *   discovery    /version, /api, /api/v1, /apis, /apis/{group}/{version} (no OpenAPI document:
 *                kubectl's client-side validation wants it as protobuf, so tests run kubectl apply
 *                with --validate=false and the server's own checks, the 422s, still apply)
 *   CRUD         GET (one, list with labelSelector and a `metadata.name=`/`involvedObject.name=`
 *                fieldSelector), POST (create; `dryRun=All`; `fieldValidation=Strict`), PUT
 *                (update; `/status`), PATCH (merge-patch and json-patch; strategic merge only on
 *                core kinds: 415 on a custom resource, as the server answers), DELETE (the object
 *                back; its dependents follow)
 *   errors       Status objects: 401, 404 NotFound, 409 AlreadyExists / Conflict, 410 Expired,
 *                415, 422 Invalid with causes; warnings in `Warning` headers
 *   watch        `?watch=true` on a list: JSON lines of events from `resourceVersion`, until
 *                `timeoutSeconds` or the client goes
 *   tables       `Accept: …;as=Table;…` (what kubectl get asks for): a meta.k8s.io/v1 Table with
 *                NAME, the printer columns and AGE
 *   exec         `pods/{name}/exec` upgraded to a WebSocket (FakeKubeExec.ts)
 *
 * The controller (FakeSandboxController.ts) works on the same store, in process.
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { createServer, type Server } from "node:https"
import type { AddressInfo } from "node:net"
import type { Duplex } from "node:stream"
import { type ExecTarget, FakeKubeExec } from "./FakeKubeExec.js"
import { KubeFailure, type KubeObject, KubeStore, matchesSelector, type WatchEvent } from "./KubeStore.js"
import { RESOURCES, type ResourceType } from "./SandboxCrds.js"

export interface Route {
  readonly type: ResourceType
  readonly namespace: string | undefined
  readonly name: string | undefined
  readonly subresource: string | undefined
}

const groupVersion = (type: ResourceType) => (type.group === "" ? type.version : `${type.group}/${type.version}`)

/** `/api/v1/...` or `/apis/g/v/...` → the resource addressed. */
export const route = (pathname: string): Route | undefined => {
  const parts = pathname.split("/").filter((p) => p !== "").map(decodeURIComponent)
  let group: string
  let version: string
  let rest: Array<string>
  if (parts[0] === "api" && parts.length >= 3) [group, version, rest] = ["", parts[1]!, parts.slice(2)]
  else if (parts[0] === "apis" && parts.length >= 4) [group, version, rest] = [parts[1]!, parts[2]!, parts.slice(3)]
  else return undefined
  let namespace: string | undefined
  if (rest[0] === "namespaces" && rest.length >= 3) {
    namespace = rest[1]
    rest = rest.slice(2)
  }
  const type = RESOURCES.find((t) => t.group === group && t.version === version && t.plural === rest[0])
  if (type === undefined) {
    // `namespaces/{name}` itself.
    if (namespace !== undefined && rest.length === 0) return { type: RESOURCES.find((t) => t.plural === "namespaces")!, namespace: undefined, name: namespace, subresource: undefined }
    return undefined
  }
  return { type, namespace: type.namespaced ? namespace : undefined, name: rest[1], subresource: rest[2] }
}

const statusOf = (failure: KubeFailure) => ({
  kind: "Status",
  apiVersion: "v1",
  metadata: {},
  status: "Failure",
  message: failure.message,
  reason: failure.reason,
  ...(failure.details === undefined ? {} : { details: failure.details }),
  code: failure.code
})

/** RFC 7386 merge patch. */
export const mergePatch = (target: unknown, patch: unknown): unknown => {
  if (typeof patch !== "object" || patch === null || Array.isArray(patch)) return patch
  const base: Record<string, unknown> = typeof target === "object" && target !== null && !Array.isArray(target) ? { ...(target as object) } : {}
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete base[key]
    else base[key] = mergePatch(base[key], value)
  }
  return base
}

/** RFC 6902 JSON patch (add, remove, replace, test). */
const jsonPatch = (target: KubeObject, ops: ReadonlyArray<{ op: string; path: string; value?: unknown }>): KubeObject => {
  const doc = structuredClone(target)
  for (const { op, path, value } of ops) {
    const keys = path.split("/").slice(1).map((k) => k.replace(/~1/g, "/").replace(/~0/g, "~"))
    const last = keys.pop()!
    let parent: any = doc
    for (const key of keys) parent = parent?.[key]
    if (parent === undefined || parent === null) throw new KubeFailure(422, "Invalid", `the path ${path} does not exist`)
    if (op === "test" && JSON.stringify(parent[last]) !== JSON.stringify(value)) throw new KubeFailure(422, "Invalid", `test failed at ${path}`)
    if (op === "remove" && Array.isArray(parent)) parent.splice(Number(last), 1)
    else if (op === "remove") delete parent[last]
    if (op === "add" && Array.isArray(parent)) parent.splice(last === "-" ? parent.length : Number(last), 0, value)
    else if (op === "add" || op === "replace") parent[last] = value
  }
  return doc
}

const age = (iso: string | undefined) => {
  const seconds = Math.max(0, Math.floor((Date.now() - Date.parse(iso ?? "")) / 1000))
  if (Number.isNaN(seconds)) return "<unknown>"
  return seconds < 120 ? `${seconds}s` : seconds < 7200 ? `${Math.floor(seconds / 60)}m` : `${Math.floor(seconds / 3600)}h`
}

const at = (object: KubeObject, path: string): unknown => path.split(".").reduce<any>((v, k) => v?.[k], object)

const table = (type: ResourceType, objects: ReadonlyArray<KubeObject>, rv: string) => ({
  kind: "Table",
  apiVersion: "meta.k8s.io/v1",
  metadata: { resourceVersion: rv },
  columnDefinitions: [
    { name: "Name", type: "string", format: "name", description: "Name must be unique within a namespace.", priority: 0 },
    ...type.columns.map((c) => ({ name: c.name, type: c.type === "date" ? "string" : c.type, format: "", description: c.path, priority: 0 }))
  ],
  rows: objects.map((object) => ({
    cells: [object["metadata"]["name"], ...type.columns.map((c) => (c.type === "date" ? age(at(object, c.path) as string) : at(object, c.path) ?? (c.type === "integer" ? 0 : "")))],
    object: { kind: "PartialObjectMetadata", apiVersion: "meta.k8s.io/v1", metadata: object["metadata"] }
  }))
})

export interface FakeKubeApiOptions {
  readonly token: string
  /** Runs a pod's exec (the controller knows where pods run). */
  readonly execTarget: (namespace: string, pod: string) => ExecTarget | KubeFailure
  /** The server's certificate and key (PEM), for 127.0.0.1. */
  readonly tls: { readonly cert: string; readonly key: string }
}

export class FakeKubeApi {
  readonly store = new KubeStore()
  readonly exec = new FakeKubeExec()
  /** Every request (method, path, status), for tests. */
  readonly requests: Array<{ readonly method: string; readonly path: string; readonly status: number }> = []
  /** API groups this cluster does not serve (a cluster without agent-sandbox installed). */
  readonly hidden = new Set<string>()
  private readonly server: Server
  private readonly watches = new Set<ServerResponse>()
  url = ""

  constructor(private readonly options: FakeKubeApiOptions) {
    this.server = createServer({ cert: options.tls.cert, key: options.tls.key }, (req, res) => {
      this.handle(req, res).catch((error: unknown) => {
        const failure = error instanceof KubeFailure ? error : new KubeFailure(500, "InternalError", String((error as Error)?.stack ?? error))
        this.answer(req, res, failure.code, statusOf(failure))
      })
    })
    this.server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => this.upgrade(req, socket, head))
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve))
    this.url = `https://127.0.0.1:${(this.server.address() as AddressInfo).port}`
    return this
  }

  async close(): Promise<void> {
    for (const res of this.watches) res.destroy()
    this.exec.close()
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  private authorized(req: IncomingMessage) {
    return req.headers.authorization === `Bearer ${this.options.token}`
  }

  private answer(req: IncomingMessage, res: ServerResponse, status: number, body: unknown, warnings: ReadonlyArray<string> = []) {
    this.requests.push({ method: req.method ?? "GET", path: (req.url ?? "").split("?")[0]!, status })
    if (res.headersSent) return void res.end()
    const headers: Record<string, string | Array<string>> = { "content-type": "application/json" }
    if (warnings.length > 0) headers["warning"] = warnings.map((w) => `299 - ${JSON.stringify(w)}`)
    res.writeHead(status, headers)
    res.end(JSON.stringify(body))
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer) {
    const url = new URL(req.url ?? "/", "http://fake")
    const target = route(url.pathname)
    const refuse = (code: number, message: string) => {
      this.requests.push({ method: req.method ?? "GET", path: url.pathname, status: code })
      socket.end(`HTTP/1.1 ${code} Refused\r\ncontent-type: application/json\r\n\r\n${JSON.stringify({ kind: "Status", status: "Failure", message, code })}`)
    }
    if (!this.authorized(req)) return refuse(401, "Unauthorized")
    if (target === undefined || target.type.plural !== "pods" || target.subresource !== "exec" || target.name === undefined || target.namespace === undefined) {
      return refuse(404, "the server could not find the requested resource")
    }
    const exec = this.options.execTarget(target.namespace, target.name)
    if (exec instanceof KubeFailure) return refuse(exec.code, exec.message)
    this.requests.push({ method: req.method ?? "GET", path: url.pathname, status: 101 })
    this.exec.upgrade(req, socket, head, url, exec)
  }

  private async body(req: IncomingMessage): Promise<any> {
    const chunks: Array<Buffer> = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const text = Buffer.concat(chunks).toString("utf8")
    if (text.trim() === "") return undefined
    try {
      return JSON.parse(text)
    } catch {
      throw new KubeFailure(400, "BadRequest", "the body of the request was in an unknown format: invalid JSON")
    }
  }

  private discovery(pathname: string): unknown | undefined {
    const groups = [...new Set(RESOURCES.filter((t) => t.group !== "" && !this.hidden.has(t.group)).map((t) => `${t.group}/${t.version}`))]
    if (pathname === "/version") return { major: "1", minor: "32", gitVersion: "v1.32.0-kilntainers-fake", platform: "linux/amd64" }
    if (pathname === "/api") return { kind: "APIVersions", versions: ["v1"], serverAddressByClientCIDRs: [{ clientCIDR: "0.0.0.0/0", serverAddress: this.url.slice("https://".length) }] }
    if (pathname === "/apis") {
      return {
        kind: "APIGroupList",
        apiVersion: "v1",
        groups: groups.map((gv) => {
          const [name, version] = gv.split("/") as [string, string]
          return { name, versions: [{ groupVersion: gv, version }], preferredVersion: { groupVersion: gv, version } }
        })
      }
    }
    const match = /^\/(?:api\/(v1)|apis\/([^/]+)\/([^/]+))$/.exec(pathname)
    if (match === null) return undefined
    const [group, version] = match[1] !== undefined ? ["", "v1"] : [match[2]!, match[3]!]
    const types = RESOURCES.filter((t) => t.group === group && t.version === version && !this.hidden.has(t.group))
    if (types.length === 0) return undefined
    return {
      kind: "APIResourceList",
      apiVersion: "v1",
      groupVersion: group === "" ? version : `${group}/${version}`,
      resources: types.flatMap((t) => [
        { name: t.plural, singularName: t.singular, namespaced: t.namespaced, kind: t.kind, verbs: t.verbs, shortNames: t.shortNames },
        ...(t.statusSubresource ? [{ name: `${t.plural}/status`, singularName: "", namespaced: t.namespaced, kind: t.kind, verbs: ["get", "patch", "update"] }] : []),
        ...(t.plural === "pods" ? [{ name: "pods/exec", singularName: "", namespaced: true, kind: "PodExecOptions", verbs: ["create", "get"] }] : [])
      ])
    }
  }

  private async handle(req: IncomingMessage, res: ServerResponse) {
    const url = new URL(req.url ?? "/", "http://fake")
    const method = req.method ?? "GET"
    if (url.pathname === "/healthz" || url.pathname === "/readyz" || url.pathname === "/livez") {
      res.writeHead(200, { "content-type": "text/plain" })
      return void res.end("ok")
    }
    if (!this.authorized(req)) throw new KubeFailure(401, "Unauthorized", "Unauthorized")
    const found = this.discovery(url.pathname)
    if (found !== undefined) return this.answer(req, res, 200, found)
    const target = route(url.pathname)
    if (target === undefined || this.hidden.has(target.type.group)) throw new KubeFailure(404, "NotFound", "the server could not find the requested resource")
    const { type, namespace, name, subresource } = target
    const params = url.searchParams
    if (subresource !== undefined && subresource !== "status") throw new KubeFailure(400, "BadRequest", `${subresource} needs a WebSocket upgrade`)
    if (method === "GET" && name === undefined) return this.list(req, res, type, namespace, params)
    if (method === "GET") return this.answer(req, res, 200, this.store.get(type, namespace, name!))
    if (method === "POST" && name === undefined) {
      const body = (await this.body(req)) ?? {}
      if (type.namespaced && namespace === undefined) throw new KubeFailure(400, "BadRequest", "the namespace of the object must be given in the path")
      const made = this.store.create(type, namespace, body, {
        strict: params.get("fieldValidation") === "Strict",
        dryRun: params.get("dryRun") === "All"
      })
      return this.answer(req, res, 201, made.object, made.warnings)
    }
    if (name === undefined) throw new KubeFailure(405, "MethodNotAllowed", `${method} is not allowed on a collection`)
    if (method === "PUT") {
      const made = this.store.update(type, namespace, name, (await this.body(req)) ?? {}, { status: subresource === "status", strict: params.get("fieldValidation") === "Strict" })
      return this.answer(req, res, 200, made.object, made.warnings)
    }
    if (method === "PATCH") {
      const kind = String(req.headers["content-type"] ?? "").split(";")[0]!.trim()
      const patch = await this.body(req)
      const current = this.store.get(type, namespace, name)
      let next: KubeObject
      if (kind === "application/merge-patch+json" || (kind === "application/strategic-merge-patch+json" && type.schema === undefined)) {
        next = mergePatch(current, patch) as KubeObject
      } else if (kind === "application/json-patch+json") next = jsonPatch(current, patch ?? [])
      else throw new KubeFailure(415, "UnsupportedMediaType", `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml`)
      // A patch applies to the object as it is now, unless it names a resourceVersion itself.
      if (patch?.metadata?.resourceVersion === undefined) next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
      const made = this.store.update(type, namespace, name, next, { status: subresource === "status" })
      return this.answer(req, res, 200, made.object, made.warnings)
    }
    if (method === "DELETE") return this.answer(req, res, 200, this.store.delete(type, namespace, name))
    throw new KubeFailure(405, "MethodNotAllowed", `${method} is not allowed`)
  }

  private list(req: IncomingMessage, res: ServerResponse, type: ResourceType, namespace: string | undefined, params: URLSearchParams) {
    const selector = params.get("labelSelector")
    const fields = (params.get("fieldSelector") ?? "").split(",").filter((f) => f !== "").map((f) => f.split("=") as [string, string])
    const fits = (object: KubeObject) =>
      matchesSelector(object["metadata"]["labels"], selector) && fields.every(([path, value]) => String(at(object, path.replace(/=$/, "")) ?? "") === value)
    if (params.get("watch") === "true" || params.get("watch") === "1") return this.watch(req, res, type, namespace, params, fits)
    const items = this.store.list(type, namespace, selector).filter(fits)
    const rv = this.store.resourceVersion
    if (String(req.headers.accept ?? "").includes("as=Table")) return this.answer(req, res, 200, table(type, items, rv))
    return this.answer(req, res, 200, { kind: `${type.kind}List`, apiVersion: groupVersion(type), metadata: { resourceVersion: rv }, items })
  }

  private watch(req: IncomingMessage, res: ServerResponse, type: ResourceType, namespace: string | undefined, params: URLSearchParams, fits: (object: KubeObject) => boolean) {
    const matches = (event: WatchEvent) =>
      event.resource === type && (namespace === undefined || event.object["metadata"]["namespace"] === namespace) && fits(event.object)
    const from = Number(params.get("resourceVersion") || this.store.resourceVersion)
    const backlog = this.store.since(from).filter(matches)
    this.requests.push({ method: "GET", path: `${(req.url ?? "").split("?")[0]} (watch)`, status: 200 })
    res.writeHead(200, { "content-type": "application/json", "transfer-encoding": "chunked" })
    this.watches.add(res)
    // An event after the watch's timeout ended the answer (or the client left) is not written.
    const write = (event: WatchEvent) => {
      if (!res.writableEnded && !res.destroyed) res.write(`${JSON.stringify({ type: event.type, object: event.object })}\n`)
    }
    for (const event of backlog) write(event)
    const unsubscribe = this.store.subscribe((event) => matches(event) && write(event))
    const seconds = Number(params.get("timeoutSeconds") ?? "0")
    const timer = seconds > 0 ? setTimeout(() => res.end(), seconds * 1000) : undefined
    res.on("close", () => {
      unsubscribe()
      if (timer) clearTimeout(timer)
      this.watches.delete(res)
    })
  }
}
