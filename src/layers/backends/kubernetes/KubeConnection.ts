/**
 * A connection to a running computer: its pod's kt-agent (KubeAgent.ts), reached by `pods/exec`
 * (PodExec.ts), and the watch for its loss.
 *
 * The pod is the claim's Sandbox's (`status.sandbox.name`; the Sandbox's pod-name annotation, or
 * its own name). Every process is a fork+exec by the agent inside the pod (AgentProcesses.ts):
 * terminals, stdin, signals to the group, exact bytes. A permanent computer's agent is durable: it
 * holds its processes, their records and output in the pod (`held`), and any server that can read
 * the claim's key attaches to it, so the processes outlive the server that started them. A
 * temporary computer's agent is bound to this connection and ends with it, as does the agent of a
 * claim made before durable agents (no key); the pod's processes end with it.
 *
 * `lost` completes when the claim is deleted or expires outside the kernel (ClaimWatch.ts), or the
 * connection to the agent ends (the pod went, or a restart ended the agent).
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import type { ProviderError, SpawnFailed } from "../../../domain/Errors.js"
import type { BackendProcess, Connection, Instance, SpawnSpec } from "../../../services/Backend.js"
import * as AgentProcesses from "../agent/AgentProcesses.js"
import type * as NativeBinaries from "../agent/NativeBinaries.js"
import type { ClaimWatch } from "./ClaimWatch.js"
import type { KubeApi } from "./KubeApi.js"
import * as KubeAgent from "./KubeAgent.js"
import { BACKEND, kubeError } from "./KubeError.js"
import { agentKeyOf, ended, HOME, type KubeObject, POD_NAME_ANNOTATION, sandboxPath } from "./SandboxObjects.js"

export interface ConnectionContext {
  readonly api: KubeApi
  readonly namespace: string
  readonly watch: ClaimWatch
  readonly binaries: NativeBinaries.NativeBinaries
  /** How long the agent may take to be in place, started and attached. */
  readonly startTimeoutMs: number
}

/** The pod of a claim's Sandbox, once the claim names one. */
export const podOf = (context: Pick<ConnectionContext, "api" | "namespace" | "watch">, claimName: string) =>
  Effect.gen(function*() {
    const operation = `find the pod of ${claimName}`
    const found = context.watch.current(claimName)
    if (Option.isNone(found)) return yield* kubeError(operation, "NotFound", `SandboxClaim ${claimName} is gone`)
    const claim = found.value
    const sandboxName = claim["status"]?.["sandbox"]?.["name"]
    if (typeof sandboxName !== "string" || sandboxName === "") {
      return yield* kubeError(operation, "Unavailable", `SandboxClaim ${claimName} has no Sandbox yet`)
    }
    const sandbox = yield* context.api.call<KubeObject>({ method: "GET", path: sandboxPath(context.namespace, sandboxName), operation: `read Sandbox ${sandboxName}` })
    const annotated = sandbox["metadata"]["annotations"]?.[POD_NAME_ANNOTATION]
    return typeof annotated === "string" && annotated !== "" ? annotated : sandboxName
  })

export const connect = (context: ConnectionContext) => (instance: Instance): Effect.Effect<Connection, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const claimName = instance.providerId
    const lost = yield* Deferred.make<string>()
    let gone: string | undefined
    const markLost = (reason: string) =>
      Effect.suspend(() => {
        gone ??= reason
        return Deferred.succeed(lost, reason)
      })
    const pod = yield* podOf(context, claimName)
    const agentDied = yield* Deferred.make<string>()
    // The key only on a permanent computer's claim: a temporary one's agent ends with this connection.
    const key = instance.metadata.temporary ? undefined : Option.getOrUndefined(Option.flatMapNullable(context.watch.current(claimName), agentKeyOf))
    const client = yield* KubeAgent.open(
      { api: context.api, namespace: context.namespace, pod, binaries: context.binaries },
      key,
      { onLost: (reason) => Deferred.unsafeDone(agentDied, Effect.succeed(reason)) }
    ).pipe(
      Effect.timeoutFail({ duration: context.startTimeoutMs, onTimeout: () => kubeError("start the agent", "Timeout", `${pod}: not attached within ${Math.round(context.startTimeoutMs / 1000)} s`) })
    )
    // The claim going (deleted or expired) is the loss; the agent's end says so when nothing else does.
    yield* context.watch.until(claimName, (claim) => ended(claim), "gone").pipe(
      Effect.flatMap(Option.match({
        onNone: () => markLost(`its SandboxClaim ${claimName} was deleted outside kilntainers`),
        onSome: (why) => markLost(why)
      })),
      Effect.forkScoped
    )
    yield* Deferred.await(agentDied).pipe(
      Effect.flatMap((reason) => markLost(`its agent in pod ${pod} ended: ${reason}`)),
      Effect.forkScoped
    )

    const spawn = (spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope> =>
      Effect.suspend(() =>
        gone !== undefined
          ? Effect.fail(kubeError("start the process", "NotFound", `computer ${instance.metadata.id} is gone: ${gone}`))
          : AgentProcesses.spawn(BACKEND, client, spec)
      )
    return {
      home: HOME,
      spawn,
      lost: Deferred.await(lost),
      held: AgentProcesses.held(BACKEND, client),
      lease: (step: string) => AgentProcesses.lease(BACKEND, client, instance.metadata.id, step)
    }
  })
