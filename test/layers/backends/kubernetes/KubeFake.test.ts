// The fake cluster against the Kubernetes API's semantics, through plain HTTPS requests and
// kubectl: what the backend relies on must be what a real API server does.
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { afterAll, beforeAll } from "vitest"
import { Agent, request } from "node:https"
import type { KubeFake } from "../../../support/kube/KubeFake.js"
import { startKubeFake } from "../../../support/kube/KubeFake.js"
import { describeIf } from "../../../support/Requirements.js"
import { kubectlWorks, kubeFakeWorks, requirement } from "./KubeTestKit.js"

let fake: KubeFake
let agent: Agent
beforeAll(async () => {
  if (!kubeFakeWorks) return
  fake = await startKubeFake()
  const config = (await import("node:fs")).readFileSync(fake.kubeconfig, "utf8")
  agent = new Agent({ ca: Buffer.from(/certificate-authority-data: (\S+)/.exec(config)![1]!, "base64") })
}, 60_000)
afterAll(async () => {
  await fake?.close()
})

interface Answer {
  readonly status: number
  readonly body: any
  readonly headers: Record<string, string | Array<string> | undefined>
}

const call = (method: string, path: string, body?: unknown, contentType = "application/json") =>
  new Promise<Answer>((resolve, reject) => {
    const req = request(new URL(path, fake.url), {
      method,
      agent,
      headers: { authorization: `Bearer ${fake.token}`, ...(body === undefined ? {} : { "content-type": contentType }) }
    }, (res) => {
      const chunks: Array<Buffer> = []
      res.on("data", (chunk: Buffer) => chunks.push(chunk))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}"), headers: res.headers }))
    })
    req.on("error", reject)
    if (body !== undefined) req.write(JSON.stringify(body))
    req.end()
  })

const claims = () => `/apis/extensions.agents.x-k8s.io/v1alpha1/namespaces/${fake.namespace}/sandboxclaims`
const claim = (name: string, spec: Record<string, unknown> = { sandboxTemplateRef: { name: "absent" } }) => ({
  apiVersion: "extensions.agents.x-k8s.io/v1alpha1",
  kind: "SandboxClaim",
  metadata: { name, labels: { suite: "kube-fake" } },
  spec
})

describeIf(kubeFakeWorks, requirement)("the fake cluster follows the Kubernetes API", () => {
  it.live("create answers 201 with uid, resourceVersion and defaults; a taken name is 409 AlreadyExists; a missing one 404", () =>
    Effect.promise(async () => {
      const made = await call("POST", claims(), claim("api-a"))
      assert.strictEqual(made.status, 201)
      assert.match(made.body.metadata.uid, /^[0-9a-f-]{36}$/)
      assert.isString(made.body.metadata.resourceVersion)
      assert.strictEqual(made.body.spec.warmpool, "default", "the schema's default")
      const again = await call("POST", claims(), claim("api-a"))
      assert.strictEqual(again.status, 409)
      assert.strictEqual(again.body.reason, "AlreadyExists")
      const missing = await call("GET", `${claims()}/api-none`)
      assert.strictEqual(missing.status, 404)
      assert.deepInclude(missing.body, { kind: "Status", reason: "NotFound", code: 404 })
    }))

  it.live("an update with a stale resourceVersion is 409 Conflict; a merge patch applies to the current object", () =>
    Effect.promise(async () => {
      await call("POST", claims(), claim("api-b"))
      // The controller writes the claim's status too: what we update is what is there now.
      const made = (await call("GET", `${claims()}/api-b`)).body
      const first = await call("PUT", `${claims()}/api-b`, { ...made, metadata: { ...made.metadata, labels: { one: "1" } } })
      assert.strictEqual(first.status, 200)
      assert.notStrictEqual(first.body.metadata.resourceVersion, made.metadata.resourceVersion)
      const stale = await call("PUT", `${claims()}/api-b`, { ...made, metadata: { ...made.metadata, labels: { two: "2" } } })
      assert.strictEqual(stale.status, 409)
      assert.strictEqual(stale.body.reason, "Conflict")
      const patched = await call("PATCH", `${claims()}/api-b`, { spec: { lifecycle: { shutdownTime: "2031-01-02T03:04:05Z" } } }, "application/merge-patch+json")
      assert.strictEqual(patched.status, 200)
      assert.strictEqual(patched.body.spec.lifecycle.shutdownTime, "2031-01-02T03:04:05Z")
      assert.strictEqual(patched.body.spec.lifecycle.shutdownPolicy, "Retain", "defaulted inside the patched field")
      const strategic = await call("PATCH", `${claims()}/api-b`, { spec: {} }, "application/strategic-merge-patch+json")
      assert.strictEqual(strategic.status, 415, "no strategic merge on a custom resource")
    }))

  it.live("agent-sandbox's schema: a wrong field is 422 Invalid with its causes; an unknown one is pruned with a warning, or 400 when strict", () =>
    Effect.promise(async () => {
      const bad = await call("POST", claims(), claim("api-c", { sandboxTemplateRef: {}, lifecycle: { shutdownTime: "tomorrow", shutdownPolicy: "Never" } }))
      assert.strictEqual(bad.status, 422)
      assert.strictEqual(bad.body.reason, "Invalid")
      const fields = bad.body.details.causes.map((cause: { field: string }) => cause.field).sort()
      assert.deepStrictEqual(fields, ["spec.lifecycle.shutdownPolicy", "spec.lifecycle.shutdownTime", "spec.sandboxTemplateRef.name"])
      const badName = await call("POST", claims(), claim("Api_C"))
      assert.strictEqual(badName.status, 422)
      const extra = await call("POST", claims(), claim("api-d", { sandboxTemplateRef: { name: "t" }, colour: "red" }))
      assert.strictEqual(extra.status, 201)
      assert.isUndefined(extra.body.spec.colour)
      assert.include(String(extra.headers["warning"]), "unknown field \\\"spec.colour\\\"")
      const strict = await call("POST", `${claims()}?fieldValidation=Strict`, claim("api-e", { sandboxTemplateRef: { name: "t" }, colour: "red" }))
      assert.strictEqual(strict.status, 400)
    }))

  it.live("a watch from a resourceVersion replays what came after it, then follows", () =>
    Effect.promise(async () => {
      const from = (await call("GET", claims())).body.metadata.resourceVersion
      await call("POST", claims(), claim("api-w"))
      const lines: Array<any> = []
      await new Promise<void>((resolve) => {
        const req = request(new URL(`${claims()}?watch=true&resourceVersion=${from}&labelSelector=suite%3Dkube-fake`, fake.url), {
          agent,
          headers: { authorization: `Bearer ${fake.token}` }
        }, (res) => {
          res.setEncoding("utf8")
          res.on("data", (text: string) => {
            for (const line of text.split("\n").filter((l) => l !== "")) {
              lines.push(JSON.parse(line))
              if (lines.length === 1) void call("DELETE", `${claims()}/api-w`)
              if (lines[lines.length - 1].type === "DELETED") {
                req.destroy()
                resolve()
              }
            }
          })
        })
        req.end()
      })
      // ADDED first (replayed), the controller's status writes (MODIFIED) between, DELETED last.
      assert.deepStrictEqual([lines[0].type, lines[lines.length - 1].type], ["ADDED", "DELETED"])
      assert.isTrue(lines.every((l) => l.object.metadata.name === "api-w" && ["ADDED", "MODIFIED", "DELETED"].includes(l.type)))
      const versions = lines.map((l) => Number(l.object.metadata.resourceVersion))
      assert.deepStrictEqual(versions, [...versions].sort((a, b) => a - b), "in resourceVersion order")
    }))

  it.live("without the token: 401", () =>
    Effect.promise(async () => {
      const answer = await new Promise<number>((resolve) => request(new URL(claims(), fake.url), { agent }, (res) => resolve(res.statusCode ?? 0)).end())
      assert.strictEqual(answer, 401)
    }))
})

describeIf(kubeFakeWorks && kubectlWorks, `${requirement} and kubectl`)("kubectl against the fake cluster", () => {
  it.live("applies, lists and describes claims and their Sandboxes, and deletes a claim with what it owns", () =>
    Effect.promise(async () => {
      const { writeFileSync } = await import("node:fs")
      const file = `${fake.kubeconfig}.objects.json`
      writeFileSync(file, JSON.stringify({
        apiVersion: "v1",
        kind: "List",
        items: [
          {
            apiVersion: "extensions.agents.x-k8s.io/v1alpha1",
            kind: "SandboxTemplate",
            metadata: { name: "kubectl-t" },
            spec: { podTemplate: { spec: { containers: [{ name: "main", image: "kilntainers-test:bookworm", command: ["sleep", "infinity"] }] } } }
          },
          claim("kubectl-c", { sandboxTemplateRef: { name: "kubectl-t" } })
        ]
      }))
      const applied = await fake.kubectl("apply", "--validate=false", "-f", file)
      assert.strictEqual(applied.code, 0, applied.stderr)
      assert.include(applied.stdout, "sandboxclaim.extensions.agents.x-k8s.io/kubectl-c created")
      let sandboxes = ""
      for (let i = 0; i < 120 && !/kubectl-c/.test(sandboxes); i++) {
        sandboxes = (await fake.kubectl("get", "sandboxes")).stdout
        await new Promise((resolve) => setTimeout(resolve, 250))
      }
      assert.match(sandboxes, /^NAME\s+AGE\nkubectl-c\s+\d+s/m)
      const described = await fake.kubectl("describe", "sandboxclaim", "kubectl-c")
      assert.strictEqual(described.code, 0, described.stderr)
      assert.match(described.stdout, /Sandbox Template Ref:\s+Name:\s+kubectl-t/)
      const listed = await fake.kubectl("get", "sandboxclaims")
      assert.strictEqual(listed.code, 0, listed.stderr)
      assert.match(listed.stdout, /^NAME\s+AGE\n/)
      assert.match(listed.stdout, /^kubectl-c\s+\d+s$/m)
      const sandbox = await fake.kubectl("describe", "sandbox", "kubectl-c")
      assert.strictEqual(sandbox.code, 0, sandbox.stderr)
      assert.match(sandbox.stdout, /^Name:\s+kubectl-c$/m)
      assert.match(sandbox.stdout, /^Kind:\s+Sandbox$/m)
      assert.match(sandbox.stdout, /Image:\s+kilntainers-test:bookworm/, "the Sandbox carries the template's pod")
      const deleted = await fake.kubectl("delete", "sandboxclaim", "kubectl-c")
      assert.strictEqual(deleted.code, 0, deleted.stderr)
      assert.include(deleted.stdout, `sandboxclaim.extensions.agents.x-k8s.io "kubectl-c" deleted`)
      const left = await fake.kubectl("get", "sandboxes,pods", "-o", "name")
      assert.notInclude(left.stdout, "kubectl-c", "the Sandbox and its pod went with their claim")
    }), 120_000)

  it.live("deletes a Sandbox made without a claim, and its pod with it", () =>
    Effect.promise(async () => {
      const { writeFileSync } = await import("node:fs")
      const file = `${fake.kubeconfig}.sandbox.json`
      writeFileSync(file, JSON.stringify({
        apiVersion: "agents.x-k8s.io/v1alpha1",
        kind: "Sandbox",
        metadata: { name: "kubectl-s" },
        spec: { podTemplate: { spec: { containers: [{ name: "main", image: "kilntainers-test:bookworm", command: ["sleep", "infinity"] }] } } }
      }))
      const applied = await fake.kubectl("apply", "--validate=false", "-f", file)
      assert.strictEqual(applied.code, 0, applied.stderr)
      assert.include(applied.stdout, "sandbox.agents.x-k8s.io/kubectl-s created")
      let pods = ""
      for (let i = 0; i < 120 && !/kubectl-s/.test(pods); i++) {
        pods = (await fake.kubectl("get", "pods", "-o", "name")).stdout
        await new Promise((resolve) => setTimeout(resolve, 250))
      }
      assert.include(pods, "pod/kubectl-s", "the controller ran the Sandbox's pod")
      const deleted = await fake.kubectl("delete", "sandbox", "kubectl-s")
      assert.strictEqual(deleted.code, 0, deleted.stderr)
      assert.include(deleted.stdout, `sandbox.agents.x-k8s.io "kubectl-s" deleted`)
      const left = await fake.kubectl("get", "sandboxes,pods", "-o", "name")
      assert.strictEqual(left.code, 0, left.stderr)
      assert.notInclude(left.stdout, "kubectl-s", "the pod went with its Sandbox")
    }), 120_000)
})
