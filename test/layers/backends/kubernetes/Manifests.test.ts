// deploy/kubernetes: what kubectl makes of the manifests (apply --dry-run=client against the fake
// cluster), what they promise (replicas, probes on /healthz, the token from a Secret, a non-root
// read-only server), and that the Role is least privilege: exactly what the backend asks of the
// API while its computers live, and nothing more.
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { afterAll, beforeAll } from "vitest"
import * as KubernetesBackend from "../../../../src/layers/backends/kubernetes/KubernetesBackend.js"
import { Backend, forEachEventChunk } from "../../../../src/services/Backend.js"
import type { KubeFake } from "../../../support/kube/KubeFake.js"
import { startKubeFake } from "../../../support/kube/KubeFake.js"
import { route } from "../../../support/kube/FakeKubeApi.js"
import { describeIf } from "../../../support/Requirements.js"
import { kubectlWorks, kubeFakeWorks, options, requirement } from "./KubeTestKit.js"

let fake: KubeFake
beforeAll(async () => {
  if (kubeFakeWorks) fake = await startKubeFake()
}, 60_000)
afterAll(async () => {
  await fake?.close()
})

type Obj = Record<string, any>

const manifests = async (): Promise<Array<Obj>> => {
  const applied = await fake.kubectl("apply", "--dry-run=client", "--validate=false", "-f", "deploy/kubernetes", "-o", "json")
  assert.strictEqual(applied.code, 0, applied.stderr)
  const parsed = JSON.parse(applied.stdout)
  return parsed.kind === "List" ? parsed.items : [parsed]
}

/** The verb an API request is authorized as (the WebSocket exec is a GET, checked as create). */
const verbOf = (method: string, path: string, named: boolean) =>
  path.endsWith("(watch)") ? "watch" : method === "GET" ? (path.endsWith("/exec") ? "create" : named ? "get" : "list") : method === "POST" ? "create" : method === "PUT" ? "update" : method === "PATCH" ? "patch" : "delete"

describeIf(kubeFakeWorks && kubectlWorks, `${requirement} and kubectl`)("the deploy manifests", () => {
  it.live("kubectl takes them: a Deployment of replicas with /healthz probes and the token from a Secret, a Service, the RBAC", () =>
    Effect.promise(async () => {
      const objects = await manifests()
      assert.deepStrictEqual(objects.map((o) => o.kind).sort(), ["Deployment", "Role", "RoleBinding", "Service", "ServiceAccount"])
      const deployment = objects.find((o) => o.kind === "Deployment")!
      assert.isAtLeast(deployment.spec.replicas, 2)
      const pod = deployment.spec.template.spec
      assert.strictEqual(pod.serviceAccountName, "kilntainers")
      assert.isTrue(pod.securityContext.runAsNonRoot)
      const server = pod.containers[0]
      const env = Object.fromEntries(server.env.map((e: Obj) => [e.name, e]))
      assert.strictEqual(env["KILNTAINERS_BACKEND"].value, "kubernetes")
      assert.deepStrictEqual(env["KILNTAINERS_AUTH_TOKEN"].valueFrom, { secretKeyRef: { name: "kilntainers-auth", key: "token" } })
      assert.deepStrictEqual(env["KILNTAINERS_K8S_NAMESPACE"].valueFrom, { fieldRef: { fieldPath: "metadata.namespace" } })
      for (const probe of [server.readinessProbe, server.livenessProbe]) assert.deepStrictEqual(probe.httpGet, { path: "/healthz", port: "mcp" })
      assert.deepStrictEqual(server.ports, [{ name: "mcp", containerPort: 8435 }])
      assert.isTrue(server.securityContext.readOnlyRootFilesystem)
      assert.isFalse(server.securityContext.allowPrivilegeEscalation)
      const service = objects.find((o) => o.kind === "Service")!
      assert.deepStrictEqual(service.spec.selector, deployment.spec.selector.matchLabels)
      assert.strictEqual(service.spec.ports[0].targetPort, "mcp")
      const binding = objects.find((o) => o.kind === "RoleBinding")!
      assert.deepStrictEqual(binding.subjects, [{ kind: "ServiceAccount", name: "kilntainers" }])
      assert.strictEqual(binding.roleRef.name, "kilntainers")
    }), 60_000)

  it.live("the Role is least privilege: every request the backend makes is allowed, and every rule is used", () =>
    Effect.gen(function*() {
      const rules: Array<Obj> = (yield* Effect.promise(manifests)).find((o) => o.kind === "Role")!.rules
      for (const rule of rules) {
        assert.notInclude(rule.verbs, "*")
        assert.notInclude(rule.resources, "*")
        assert.notInclude(rule.resources, "secrets")
      }
      const from = fake.api.requests.length
      yield* Effect.scoped(Effect.gen(function*() {
        const backend = yield* Backend
        const instance = yield* backend.create({ id: "rbac-probe", temporary: true, image: "x", created: new Date().toISOString(), instance: "rbac" })
        yield* backend.renewal!.renew(instance, Date.now() + 60_000)
        yield* Effect.scoped(Effect.gen(function*() {
          const connection = yield* backend.connect(instance)
          yield* forEachEventChunk(yield* connection.spawn({ argv: ["true"], cwd: "/", env: {} }), () => Effect.void)
        }))
        yield* backend.restart(instance)
        yield* backend.remove(instance)
      })).pipe(Effect.provide(KubernetesBackend.layer(options(fake, { warmPool: 1 }))))
      const used = new Set<string>()
      for (const request of fake.api.requests.slice(from)) {
        const path = request.path.replace(/ \(watch\)$/, "")
        const target = route(path)
        if (target === undefined) continue // discovery: every authenticated user may read it
        const resource = target.subresource === undefined ? target.type.plural : `${target.type.plural}/${target.subresource}`
        const verb = verbOf(request.method, request.path, target.name !== undefined)
        const rule = rules.findIndex((r) => r.apiGroups.includes(target.type.group) && r.resources.includes(resource) && r.verbs.includes(verb))
        assert.isAtLeast(rule, 0, `${request.method} ${request.path} (${verb} ${resource}) is allowed by the Role`)
        used.add(`${target.type.group}/${resource}/${verb}`)
      }
      const granted = rules.flatMap((r) => r.apiGroups.flatMap((g: string) => r.resources.flatMap((res: string) => r.verbs.map((v: string) => `${g}/${res}/${v}`))))
      // The WebSocket exec is checked as get by clusters before 1.30; an existing template or pool is updated, not made.
      const unused = granted.filter((g) => !used.has(g) && g !== "/pods/exec/get" && !g.endsWith("/update"))
      assert.deepStrictEqual(unused, [], "no rule the backend never needs")
    }), 120_000)
})
