// A permanent computer's agent on Kubernetes is durable: its key is in the claim (which servers read)
// and nowhere the pod can read it, a connector run in the pod without that key is refused, and the
// agent already in a pod is not copied again.
import { assert, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { afterAll, beforeAll } from "vitest"
import type { ComputerMetadata } from "../../../../src/domain/ComputerMetadata.js"
import { newKey } from "../../../../src/layers/backends/agent/AgentHandshake.js"
import * as NativeBinaries from "../../../../src/layers/backends/agent/NativeBinaries.js"
import * as KubeAgent from "../../../../src/layers/backends/kubernetes/KubeAgent.js"
import * as KubeApi from "../../../../src/layers/backends/kubernetes/KubeApi.js"
import * as KubernetesBackend from "../../../../src/layers/backends/kubernetes/KubernetesBackend.js"
import { AGENT_KEY_ANNOTATION } from "../../../../src/layers/backends/kubernetes/SandboxObjects.js"
import { Backend, type BackendProcess, type Connection, ownedEvents } from "../../../../src/services/Backend.js"
import type { KubeFake } from "../../../support/kube/KubeFake.js"
import { startKubeFake } from "../../../support/kube/KubeFake.js"
import { AGENTS, EXTENSIONS, resourceOf, VERSION } from "../../../support/kube/SandboxCrds.js"
import { describeIf } from "../../../support/Requirements.js"
import { kubeFakeWorks, options, requirement } from "./KubeTestKit.js"

let fake: KubeFake
beforeAll(async () => {
  if (kubeFakeWorks) fake = await startKubeFake()
}, 60_000)
afterAll(async () => {
  await fake?.close()
})

const CLAIMS = resourceOf(EXTENSIONS, VERSION, "sandboxclaims")!
const SANDBOXES = resourceOf(AGENTS, VERSION, "sandboxes")!
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
let counter = 0
const computerId = (what: string) => `k${process.pid % 10000}-${what}-${counter++}`

const metadata = (id: string, temporary: boolean): ComputerMetadata => ({
  id,
  temporary,
  image: KubernetesBackend.DEFAULT_IMAGE,
  created: new Date().toISOString(),
  instance: `test-${process.pid}`
})

const output = (process: BackendProcess) =>
  ownedEvents(process).pipe(
    Stream.runFold("", (text, event) => (event._tag === "Stdout" ? text + Buffer.from(event.data).toString() : text)),
    Effect.timeout("30 seconds")
  )

const shell = (connection: Connection, script: string) =>
  Effect.scoped(Effect.flatMap(connection.spawn({ argv: ["/bin/sh", "-c", script], cwd: KubernetesBackend.HOME, env: { PATH } }), output))

describeIf(kubeFakeWorks, requirement)("a durable agent on Kubernetes", () => {
  it.live("a permanent computer's key is in its claim and in nothing the pod can read; a temporary one's claim has none", () =>
    Effect.scoped(Effect.gen(function*() {
      const backend = yield* Backend
      const id = computerId("key")
      const instance = yield* backend.create(metadata(id, false))
      const claim = fake.api.store.get(CLAIMS, fake.namespace, instance.providerId)
      const key = claim.metadata.annotations[AGENT_KEY_ANNOTATION] as string
      assert.match(key, /^[0-9a-f]{64}$/)
      const sandbox = fake.api.store.get(SANDBOXES, fake.namespace, claim.status.sandbox.name)
      assert.notInclude(JSON.stringify(sandbox), key, "the Sandbox (and the pod spec it carries) holds no key")
      assert.isFalse(sandbox.spec.podTemplate.spec.automountServiceAccountToken, "no service-account token in the pod")
      const connection = yield* backend.connect(instance)
      const seen = yield* shell(connection, "ls /var/run/secrets/kubernetes.io 2>&1; env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n'")
      assert.match(seen, /No such file or directory/)
      assert.notInclude(seen, key, "no environment or command line in the pod shows the key")
      const temporary = yield* backend.create(metadata(computerId("temp"), true))
      assert.notProperty(fake.api.store.get(CLAIMS, fake.namespace, temporary.providerId).metadata.annotations, AGENT_KEY_ANNOTATION)
      yield* backend.remove(temporary)
      yield* backend.remove(instance)
    }).pipe(Effect.provide(KubernetesBackend.layer(options(fake))))), 120_000)

  it.live("a connector run in the pod without the computer's key is refused, and the computer's processes run on", () =>
    Effect.scoped(Effect.gen(function*() {
      const backend = yield* Backend
      const instance = yield* backend.create(metadata(computerId("forged"), false))
      const connection = yield* backend.connect(instance)
      const sleeper = yield* connection.spawn({ argv: ["sleep", "120"], cwd: KubernetesBackend.HOME, env: { PATH } })
      const pod = fake.api.store.get(CLAIMS, fake.namespace, instance.providerId).status.sandbox.name as string
      const api = yield* KubeApi.make({ kubeconfig: fake.kubeconfig, requestTimeoutMs: 10_000 })
      const binaries = yield* NativeBinaries.locate("kubernetes")
      const target = { api, namespace: fake.namespace, pod, binaries }
      for (let attempt = 0; attempt < 2; attempt++) {
        const refused = yield* Effect.flip(Effect.scoped(KubeAgent.attach(target, "/.kilntainers/agent.sock", newKey(), true, {})))
        assert.match(refused.message, /cannot attach to the computer's agent: the connection to the computer's agent ended/)
      }
      // The same connector with the claim's key (what a server reads) is taken.
      const key = fake.api.store.get(CLAIMS, fake.namespace, instance.providerId).metadata.annotations[AGENT_KEY_ANNOTATION] as string
      const taken = yield* Effect.scoped(Effect.flatMap(KubeAgent.attach(target, "/.kilntainers/agent.sock", key, true, {}), (client) => client.ready))
      assert.isAbove(taken.headBytes + taken.tailBytes, 0, "welcomed with the agent's retention")
      // The server's own connection is untouched: its process is listed, and it still starts others.
      const listed = yield* connection.held!.list
      assert.isTrue(listed.some((held) => held.handle === sleeper.handle && held.exit === undefined), JSON.stringify(listed))
      assert.strictEqual(yield* shell(connection, "echo still"), "still\n")
      yield* backend.remove(instance)
    }).pipe(Effect.provide(KubernetesBackend.layer(options(fake))))), 120_000)

  it.live("a second connection finds the agent in place: nothing is copied again, the same processes are there", () =>
    Effect.scoped(Effect.gen(function*() {
      const backend = yield* Backend
      const instance = yield* backend.create(metadata(computerId("again"), false))
      const handle = yield* Effect.scoped(Effect.gen(function*() {
        const first = yield* backend.connect(instance)
        const process = yield* first.spawn({ argv: ["sleep", "120"], cwd: KubernetesBackend.HOME, env: { PATH } })
        return process.handle
      }))
      const from = fake.api.exec.sessions.length
      const second = yield* backend.connect(instance)
      const listed = yield* second.held!.list
      assert.isTrue(listed.some((held) => held.handle === handle && held.exit === undefined), `the first connection's process runs on: ${JSON.stringify(listed)}`)
      const sessions = fake.api.exec.sessions.slice(from)
      assert.strictEqual(sessions.length, 2, "one exec to start (or find) the agent, one to attach")
      const stamp = yield* shell(second, "stat -c %i /.kilntainers/kt-agent")
      assert.match(stamp, /^\d+\n$/)
      yield* Effect.scoped(backend.connect(instance))
      assert.strictEqual(yield* shell(second, "stat -c %i /.kilntainers/kt-agent"), stamp, "the agent's file was not replaced (mv -f makes a new inode)")
      yield* backend.remove(instance)
    }).pipe(Effect.provide(KubernetesBackend.layer(options(fake))))), 120_000)

  it.live("a permanent computer whose claim has no key (made before durable agents) works as before: its agent is bound to the connection", () =>
    Effect.scoped(Effect.gen(function*() {
      const backend = yield* Backend
      const instance = yield* backend.create(metadata(computerId("older"), false))
      const claim = fake.api.store.get(CLAIMS, fake.namespace, instance.providerId)
      const { [AGENT_KEY_ANNOTATION]: _key, ...annotations } = claim.metadata.annotations
      fake.api.store.update(CLAIMS, fake.namespace, instance.providerId, { ...claim, metadata: { ...claim.metadata, annotations } })
      yield* Effect.sleep("1 second") // the watch sees the change
      const handle = yield* Effect.scoped(Effect.gen(function*() {
        const connection = yield* backend.connect(instance)
        assert.strictEqual(yield* shell(connection, "echo older"), "older\n")
        return (yield* connection.spawn({ argv: ["sleep", "120"], cwd: KubernetesBackend.HOME, env: { PATH } })).handle
      }))
      const again = yield* backend.connect(instance)
      const listed = yield* again.held!.list
      assert.isFalse(listed.some((held) => held.handle === handle && held.exit === undefined), `a bound agent's processes ended with it: ${JSON.stringify(listed)}`)
      assert.strictEqual(yield* shell(again, "test -e /.kilntainers/agent.sock && echo durable || echo none"), "none\n", "no durable agent was started")
      yield* backend.remove(instance)
    }).pipe(Effect.provide(KubernetesBackend.layer(options(fake))))), 120_000)
})
