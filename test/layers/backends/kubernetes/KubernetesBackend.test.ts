// The Kubernetes provider against the fake cluster (agent-sandbox's controllers, pods as Docker
// containers, the real kt-agent): what it asks the cluster for, the lease of temporary computers,
// warm starts, the exec protocol's fallback, loss, and what a cluster lacking something is told.
import { assert, it } from "@effect/vitest"
import { Context, Effect, Layer, type Scope, Stream } from "effect"
import { afterAll, beforeAll } from "vitest"
import type { ComputerMetadata } from "../../../../src/domain/ComputerMetadata.js"
import * as KubernetesBackend from "../../../../src/layers/backends/kubernetes/KubernetesBackend.js"
import * as Runtime from "../../../../src/layers/Runtime.js"
import { Backend, type BackendProcess, ownedEvents } from "../../../../src/services/Backend.js"
import { Computers } from "../../../../src/services/Computers.js"
import { Settings } from "../../../../src/services/Settings.js"
import type { KubeFake } from "../../../support/kube/KubeFake.js"
import { startKubeFake } from "../../../support/kube/KubeFake.js"
import { AGENTS, EXTENSIONS, resourceOf, VERSION } from "../../../support/kube/SandboxCrds.js"
import { describeIf } from "../../../support/Requirements.js"
import { kubectlWorks, kubeFakeWorks, options, requirement } from "./KubeTestKit.js"

let fake: KubeFake
beforeAll(async () => {
  if (kubeFakeWorks) fake = await startKubeFake({ runtimeClasses: ["gvisor"] })
}, 60_000)
afterAll(async () => {
  await fake?.close()
})

const CLAIMS = resourceOf(EXTENSIONS, VERSION, "sandboxclaims")!
const SANDBOXES = resourceOf(AGENTS, VERSION, "sandboxes")!
const TEMPLATES = resourceOf(EXTENSIONS, VERSION, "sandboxtemplates")!
let counter = 0
const computerId = (what: string) => `k${process.pid % 10000}-${what}-${counter++}`

const metadata = (id: string, temporary: boolean): ComputerMetadata => ({
  id,
  temporary,
  image: KubernetesBackend.DEFAULT_IMAGE,
  created: new Date().toISOString(),
  instance: `test-${process.pid}`
})

const withBackend = <A, E>(overrides: Partial<KubernetesBackend.KubernetesBackendOptions>, body: (backend: Backend["Type"]) => Effect.Effect<A, E, Scope.Scope>) =>
  Effect.scoped(Effect.flatMap(Backend, body)).pipe(Effect.provide(KubernetesBackend.layer(options(fake, overrides))))

const output = (process: BackendProcess) =>
  ownedEvents(process).pipe(
    Stream.runFold("", (text, event) => (event._tag === "Stdout" ? text + Buffer.from(event.data).toString() : text)),
    Effect.timeout("30 seconds")
  )

const run = (backend: Backend["Type"], instance: Parameters<Backend["Type"]["connect"]>[0], argv: ReadonlyArray<string>) =>
  Effect.scoped(Effect.gen(function*() {
    const connection = yield* backend.connect(instance)
    return yield* output(yield* connection.spawn({ argv, cwd: KubernetesBackend.HOME, env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" } }))
  }))

const until = async (check: () => boolean, what: string, ms = 20_000) => {
  for (let waited = 0; !check(); waited += 100) {
    if (waited > ms) throw new Error(`${what} within ${ms / 1000} s`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

describeIf(kubeFakeWorks, requirement)("the Kubernetes provider against the fake cluster", () => {
  it.live("a computer is a SandboxClaim of our template: labels select, annotations carry the metadata, a temporary one has a lease", () =>
    withBackend({ runtimeClass: "gvisor", cpu: "500m", memory: "256Mi", nodeSelector: { pool: "agents" } }, (backend) =>
      Effect.gen(function*() {
        const id = computerId("shape")
        const instance = yield* backend.create(metadata(id, true))
        const claim = fake.api.store.get(CLAIMS, fake.namespace, `kt-${id}`)
        assert.deepStrictEqual(claim.metadata.labels, { kilntainers: "true", "kilntainers-computer-id": id, "kilntainers-temporary": "true" })
        assert.strictEqual(claim.metadata.annotations["kilntainers-instance"], `test-${process.pid}`)
        assert.deepStrictEqual(claim.spec.sandboxTemplateRef, { name: "kilntainers" })
        assert.strictEqual(claim.spec.lifecycle.shutdownPolicy, "Delete")
        assert.strictEqual(instance.metadata.expires, claim.spec.lifecycle.shutdownTime)
        const pod = fake.api.store.get(TEMPLATES, fake.namespace, "kilntainers").spec.podTemplate.spec
        assert.strictEqual(pod.runtimeClassName, "gvisor")
        assert.deepStrictEqual(pod.nodeSelector, { pool: "agents" })
        assert.deepStrictEqual(pod.containers[0].resources, { requests: { cpu: "500m", memory: "256Mi" }, limits: { cpu: "500m", memory: "256Mi" } })
        assert.isFalse(pod.automountServiceAccountToken, "no service account token in a computer")
        assert.strictEqual(yield* run(backend, instance, ["sh", "-c", "echo in-pod; hostname"]), `in-pod\nkt-${id}\n`)
        const [found] = yield* backend.find({ id })
        assert.strictEqual(found?.state, "running")
        assert.deepStrictEqual(yield* backend.find({ id, temporary: false }), [])
        const permanent = yield* backend.create(metadata(computerId("perm"), false))
        assert.isUndefined(fake.api.store.get(CLAIMS, fake.namespace, permanent.providerId).spec.lifecycle, "a permanent computer never ends by itself")
        yield* backend.remove(permanent)
        yield* backend.remove(instance)
        yield* backend.remove(instance)
        assert.isUndefined(fake.api.store.find(CLAIMS, fake.namespace, `kt-${id}`))
        assert.isUndefined(fake.api.store.find(SANDBOXES, fake.namespace, `kt-${id}`), "the Sandbox went with its claim")
      })), 120_000)

  it.live("a dead server's temporary computers end at their lease, with no server to remove them; a live one's lease is renewed", () =>
    Effect.gen(function*() {
      const dead = computerId("dead")
      // A server that created it and died: no renewal ever comes.
      yield* withBackend({ leaseMs: 8_000 }, (backend) => backend.create(metadata(dead, true)))
      assert.isDefined(fake.api.store.find(CLAIMS, fake.namespace, `kt-${dead}`))
      yield* Effect.promise(() => until(() => fake.api.store.find(CLAIMS, fake.namespace, `kt-${dead}`) === undefined, "the controller deleted the expired claim"))
      assert.isUndefined(fake.api.store.find(SANDBOXES, fake.namespace, `kt-${dead}`))
      // A live server renews: past the first lease, the computer is still there, its end moved on.
      const live = computerId("live")
      yield* Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(Runtime.layer(Settings.make({ killGraceMs: 500 }), KubernetesBackend.layer(options(fake, { leaseMs: 8_000 })), `lease-${process.pid}`))
        yield* Context.get(context, Computers).create("s", { computer_id: live })
        const first = fake.api.store.get(CLAIMS, fake.namespace, `kt-${live}`).spec.lifecycle.shutdownTime
        yield* Effect.sleep("10 seconds")
        const later = fake.api.store.find(CLAIMS, fake.namespace, `kt-${live}`)
        assert.isDefined(later, "renewed, not expired")
        assert.isAbove(Date.parse(later!.spec.lifecycle.shutdownTime), Date.parse(first))
      }))
      // The server ended: it removed its temporary computer.
      assert.isUndefined(fake.api.store.find(CLAIMS, fake.namespace, `kt-${live}`))
    }), 120_000)

  it.live("with a warm pool, a claim takes a ready Sandbox of it: a warm start", () =>
    withBackend({ warmPool: 1 }, (backend) =>
      Effect.gen(function*() {
        const pool = () => fake.api.store.list(SANDBOXES, fake.namespace, "agents.x-k8s.io/warm-pool-sandbox")
        yield* Effect.promise(() => until(() => pool().some((sb) => sb.status?.conditions?.some((c: { type: string; status: string }) => c.type === "Ready" && c.status === "True")), "the pool has a Ready Sandbox", 60_000))
        const warm = pool()[0]!.metadata.name as string
        const id = computerId("warm")
        const started = Date.now()
        const instance = yield* backend.create(metadata(id, true))
        const took = Date.now() - started
        const claim = fake.api.store.get(CLAIMS, fake.namespace, `kt-${id}`)
        assert.strictEqual(claim.status.sandbox.name, warm, "the pool's Sandbox, not a new one")
        assert.strictEqual(yield* run(backend, instance, ["hostname"]), `${warm}\n`)
        assert.isBelow(took, 3_000, `a warm start takes no pod start (${took} ms)`)
        yield* backend.remove(instance)
        // The pool makes another.
        yield* Effect.promise(() => until(() => pool().length === 1 && pool()[0]!.metadata.name !== warm, "the pool is refilled", 60_000))
        fake.api.store.delete(resourceOf(EXTENSIONS, VERSION, "sandboxwarmpools")!, fake.namespace, "kilntainers")
      })), 180_000)

  it.live("a cluster that speaks only v4.channel.k8s.io: the agent is copied in and runs all the same", () =>
    Effect.gen(function*() {
      fake.api.exec.protocols = ["v4.channel.k8s.io"]
      const from = fake.api.exec.sessions.length
      yield* withBackend({}, (backend) =>
        Effect.gen(function*() {
          const instance = yield* backend.create(metadata(computerId("v4"), true))
          assert.strictEqual(yield* run(backend, instance, ["sh", "-c", "printf 'a\\0b' | od -An -c | tr -s ' '"]), " a \\0 b\n")
          yield* backend.remove(instance)
        }))
      assert.isTrue(fake.api.exec.sessions.slice(from).every((session) => session.protocol === "v4.channel.k8s.io"))
    }).pipe(Effect.ensuring(Effect.sync(() => (fake.api.exec.protocols = ["v5.channel.k8s.io", "v4.channel.k8s.io"])))), 120_000)

  it.live("a claim deleted outside kilntainers: the connection is lost, saying so", () =>
    withBackend({}, (backend) =>
      Effect.gen(function*() {
        const id = computerId("outside")
        const instance = yield* backend.create(metadata(id, true))
        const connection = yield* backend.connect(instance)
        fake.api.store.delete(CLAIMS, fake.namespace, `kt-${id}`)
        const why = yield* connection.lost.pipe(Effect.timeout("20 seconds"))
        assert.match(why, new RegExp(`SandboxClaim kt-${id} was deleted outside kilntainers|its agent in pod kt-${id} ended`))
      })), 120_000)

  it.live("what the cluster lacks is refused at startup with Unsupported: agent-sandbox, a RuntimeClass, a template", () =>
    Effect.gen(function*() {
      const refusal = (overrides: Partial<KubernetesBackend.KubernetesBackendOptions>) =>
        Effect.flip(Effect.scoped(Effect.asVoid(Layer.build(KubernetesBackend.layer(options(fake, overrides))))))
      const kata = yield* refusal({ runtimeClass: "kata" })
      assert.strictEqual(kata._tag, "Unsupported")
      assert.match(kata.message, /--k8s-runtime-class kata: the cluster has no such RuntimeClass/)
      const template = yield* refusal({ template: "nope" })
      assert.match(template.message, /--k8s-template nope: namespace \S+ has no such SandboxTemplate/)
      fake.api.hidden.add("agents.x-k8s.io")
      const missing = yield* refusal({}).pipe(Effect.ensuring(Effect.sync(() => fake.api.hidden.delete("agents.x-k8s.io"))))
      assert.strictEqual(missing._tag, "Unsupported")
      assert.match(missing.message, /agent-sandbox: the cluster does not serve agents\.x-k8s\.io\/v1alpha1/)
      const wrong = yield* refusal({ cpu: "lots" })
      assert.match(wrong.message, /--k8s-cpu lots is not a Kubernetes quantity/)
    }), 60_000)
})

describeIf(kubeFakeWorks && kubectlWorks, `${requirement} and kubectl`)("kubectl and the backend's objects", () => {
  it.live("kubectl lists and describes the computers' claims and sandboxes; deleting a claim with it loses the computer", () =>
    withBackend({}, (backend) =>
      Effect.gen(function*() {
        const id = computerId("kubectl")
        const instance = yield* backend.create(metadata(id, true))
        const connection = yield* backend.connect(instance)
        const claims = yield* Effect.promise(() => fake.kubectl("get", "sandboxclaims", "-l", `kilntainers-computer-id=${id}`))
        assert.match(claims.stdout, new RegExp(`^NAME\\s+AGE\\nkt-${id}\\s`, "m"))
        const sandbox = yield* Effect.promise(() => fake.kubectl("describe", "sandbox", `kt-${id}`))
        assert.strictEqual(sandbox.code, 0, sandbox.stderr)
        assert.match(sandbox.stdout, /Reason:\s+DependenciesReady/)
        const deleted = yield* Effect.promise(() => fake.kubectl("delete", "sandboxclaim", `kt-${id}`))
        assert.strictEqual(deleted.code, 0, deleted.stderr)
        const why = yield* connection.lost.pipe(Effect.timeout("20 seconds"))
        assert.match(why, /deleted outside kilntainers|ended/)
        assert.deepStrictEqual(yield* backend.find({ id }), [])
      })), 120_000)
})
