// The Kubernetes backend against a real cluster with agent-sandbox installed, in one command:
//
//   KILNTAINERS_K8S_SMOKE_KUBECONFIG=~/.kube/config npx vitest run test/smoke/kubernetes.test.ts
//
// Optional: KILNTAINERS_K8S_SMOKE_CONTEXT, KILNTAINERS_K8S_SMOKE_NAMESPACE (default: the context's),
// KILNTAINERS_K8S_SMOKE_IMAGE (default debian:bookworm-slim), KILNTAINERS_K8S_SMOKE_RUNTIME_CLASS
// (gvisor, kata). Without the kubeconfig variable it is skipped with a message, also under CI=true:
// no cluster exists there. It makes (and removes) our SandboxTemplate and two SandboxClaims, and
// takes a minute or two (an image pull).
//
// Sequence, through the provider's calls: create a temporary computer (claim → Ready) → connect
// (the agent copied in through pods/exec) → a process's output, exact bytes → stdin and EOF → a
// signal to a group → restart keeps files and ends processes → the lease is renewed → remove; then
// a permanent computer is found again by id by a second backend, and removed.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import * as KubernetesBackend from "../../src/layers/backends/kubernetes/KubernetesBackend.js"
import type { Connection, SpawnSpec } from "../../src/services/Backend.js"
import { Backend, ownedEvents } from "../../src/services/Backend.js"

const kubeconfig = process.env["KILNTAINERS_K8S_SMOKE_KUBECONFIG"] ?? ""
if (kubeconfig === "") process.stderr.write("skipping the Kubernetes smoke test against a real cluster: KILNTAINERS_K8S_SMOKE_KUBECONFIG is not set\n")
const run = Math.random().toString(36).slice(2, 8)

const options = (): KubernetesBackend.KubernetesBackendOptions => ({
  kubeconfig,
  context: process.env["KILNTAINERS_K8S_SMOKE_CONTEXT"],
  namespace: process.env["KILNTAINERS_K8S_SMOKE_NAMESPACE"],
  image: process.env["KILNTAINERS_K8S_SMOKE_IMAGE"] ?? KubernetesBackend.DEFAULT_IMAGE,
  runtimeClass: process.env["KILNTAINERS_K8S_SMOKE_RUNTIME_CLASS"],
  nodeSelector: {},
  warmPool: 0,
  network: false,
  leaseMs: 120_000
})

const spec = (argv: ReadonlyArray<string>): SpawnSpec => ({ argv, cwd: KubernetesBackend.HOME, env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" } })

const exec = (connection: Connection, argv: ReadonlyArray<string>, input?: Uint8Array) =>
  Effect.scoped(Effect.gen(function*() {
    const process = yield* connection.spawn(spec(argv))
    if (input !== undefined) {
      yield* process.write(input)
      yield* process.closeStdin
    }
    return yield* ownedEvents(process).pipe(
      Stream.runFold({ out: Buffer.alloc(0), exit: undefined as unknown }, (acc, event) =>
        event._tag === "Stdout" ? { ...acc, out: Buffer.concat([acc.out, event.data]) } : event._tag === "Exit" ? { ...acc, exit: event.exit } : acc)
    )
  }))

const metadata = (id: string, temporary: boolean) => ({ id, temporary, image: options().image, created: new Date().toISOString(), instance: `smoke-${run}` })

describe.skipIf(kubeconfig === "")("the Kubernetes backend against a real cluster", () => {
  it.live("a computer's life: create, processes, restart, lease, remove; a permanent one found by another server", () =>
    Effect.gen(function*() {
      yield* Effect.scoped(Effect.gen(function*() {
        const backend = yield* Backend
        const instance = yield* backend.create(metadata(`smoke-${run}-t`, true))
        yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
        yield* Effect.scoped(Effect.gen(function*() {
          const connection = yield* backend.connect(instance)
          const bytes = yield* exec(connection, ["head", "-c", "3000000", "/dev/urandom"])
          assert.strictEqual(bytes.out.length, 3_000_000)
          const echoed = yield* exec(connection, ["sh", "-c", "wc -c"], new TextEncoder().encode("12345"))
          assert.strictEqual(echoed.out.toString().trim(), "5")
          const killed = yield* exec(connection, ["sh", "-c", "kill -TERM $$; sleep 5"])
          assert.deepInclude(killed.exit as object, { signal: "SIGTERM" })
          yield* exec(connection, ["sh", "-c", "echo kept > kept.txt"])
        }))
        const restarted = yield* backend.restart(instance)
        yield* Effect.scoped(Effect.gen(function*() {
          const connection = yield* backend.connect(restarted)
          assert.strictEqual((yield* exec(connection, ["cat", "kept.txt"])).out.toString(), "kept\n")
        }))
        const renewed = yield* backend.renewal!.renew(instance, Date.now() + 180_000)
        assert.isAbove(Date.parse(renewed.metadata.expires!), Date.now() + 170_000)
      })).pipe(Effect.provide(KubernetesBackend.layer(options())))
      const id = `smoke-${run}-p`
      yield* Effect.scoped(Effect.flatMap(Backend, (backend) => backend.create(metadata(id, false)))).pipe(Effect.provide(KubernetesBackend.layer(options())))
      yield* Effect.scoped(Effect.gen(function*() {
        const backend = yield* Backend
        const [found] = yield* backend.find({ id })
        assert.strictEqual(found?.metadata.temporary, false)
        yield* backend.remove(found!)
        assert.deepStrictEqual(yield* backend.find({ id }), [])
      })).pipe(Effect.provide(KubernetesBackend.layer(options())))
    }), 600_000)
})
