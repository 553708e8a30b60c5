/**
 * The Kubernetes provider's calls, one small effect each, over SandboxClaims (SandboxObjects.ts):
 *
 *   find     our claims by label, as the watch has them (ClaimWatch.ts); expired ones are not ours any more
 *   create   a claim (a temporary one with its lease as `lifecycle.shutdownTime`, a permanent one
 *            with its agent's key), then the wait
 *            until the controller says it is Ready (a warm pool's Sandbox at once; else a new pod
 *            scheduled and started). A taken name is a Conflict; a claim that never gets Ready is
 *            deleted rather than left behind.
 *   start    waits for a claim that is coming up; one that ended cannot start again
 *   restart  every process of the pod but its main one is killed; its files stay (the pod does)
 *   remove   the claim is deleted (its Sandbox and pod go with it, owned) and waited for, so that
 *            the name is free for a factory reset
 *   renew    the claim's shutdownTime moves to the new end of the lease
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { type ComputerMetadata, labelKey } from "../../../domain/ComputerMetadata.js"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Instance, Query } from "../../../services/Backend.js"
import * as Handshake from "../agent/AgentHandshake.js"
import type { ClaimWatch } from "./ClaimWatch.js"
import type { KubeApi } from "./KubeApi.js"
import { kubeError, statusReason } from "./KubeError.js"
import * as PodExec from "./PodExec.js"
import { podOf } from "./KubeConnection.js"
import * as Objects from "./SandboxObjects.js"

export interface ProviderOptions {
  readonly api: KubeApi
  readonly namespace: string
  readonly watch: ClaimWatch
  /** The SandboxTemplate claims name. */
  readonly template: string
  /** The longest a new claim may take to be Ready. */
  readonly startTimeoutMs: number
}

const iso = (millis: number) => new Date(millis).toISOString()

/** Every annotation of `sent` is on `found`, with its value (the creation time, instance, key: ours). */
const sameAnnotations = (found: Objects.KubeObject, sent: Objects.KubeObject) =>
  Object.entries(sent["metadata"]["annotations"] ?? {}).every(([key, value]) => found["metadata"]["annotations"]?.[key] === value)

export const make = (options: ProviderOptions) => {
  const { api, namespace, watch } = options

  const find = (query: Query): Effect.Effect<ReadonlyArray<Instance>, ProviderError> =>
    Effect.gen(function*() {
      yield* watch.synced
      const claims = query.id === undefined
        ? yield* api.call<{ items: Array<Objects.KubeObject> }>({
          method: "GET",
          path: Objects.claimsPath(namespace),
          query: { labelSelector: Objects.labelSelector(query) },
          operation: "list the SandboxClaims"
        }).pipe(Effect.map((list) => list.items))
        : Option.toArray(watch.current(Objects.claimName(query.id)))
      return claims.flatMap((claim) =>
        Option.match(Objects.instanceOf(claim), {
          onNone: () => [],
          onSome: (instance) =>
            instance.state === "gone" || (query.id !== undefined && instance.metadata.id !== query.id) ||
              (query.temporary !== undefined && instance.metadata.temporary !== query.temporary)
              ? []
              : [instance]
        })
      )
    })

  /** Until the claim is Ready; fails when it ends, goes, or takes longer than the start budget. */
  const ready = (name: string) =>
    watch.until(name, (claim) => (Objects.isReady(claim) ? { ok: true as const } : Objects.ended(claim) !== undefined ? { ok: false as const, why: Objects.ended(claim)! } : undefined)).pipe(
      Effect.timeout(Duration.millis(options.startTimeoutMs)),
      Effect.flatMap(Option.match({
        onNone: () => Effect.fail(kubeError(`start ${name}`, "NotFound", `SandboxClaim ${name} was deleted while it started`)),
        onSome: (outcome) => (outcome.ok ? Effect.void : Effect.fail(kubeError(`start ${name}`, "Failed", outcome.why)))
      })),
      Effect.catchTag("TimeoutException", () => {
        const now = watch.current(name)
        const why = Option.isSome(now) ? Objects.notReady(now.value) : "it was never seen"
        return Effect.fail(kubeError(`start ${name}`, "Timeout", `it was not Ready within ${Math.round(options.startTimeoutMs / 1000)} s (${why})`))
      })
    )

  /** Deleted, and waited for until it is gone (bounded). */
  const remove = (instance: Instance) =>
    api.call({
      method: "DELETE",
      path: Objects.claimsPath(namespace, instance.providerId),
      body: { kind: "DeleteOptions", apiVersion: "v1", propagationPolicy: "Background" },
      operation: `delete SandboxClaim ${instance.providerId}`
    }).pipe(
      Effect.catchIf((error) => error.reason === "NotFound", () => Effect.void),
      Effect.andThen(watch.until(instance.providerId, () => undefined, "gone").pipe(Effect.timeout(Duration.millis(options.startTimeoutMs)), Effect.ignore)),
      Effect.asVoid
    )

  const create = (metadata: ComputerMetadata, leaseMs: number | undefined) =>
    Effect.gen(function*() {
      const name = Objects.claimName(metadata.id)
      const now = yield* Clock.currentTimeMillis
      const shutdownTime = metadata.temporary && leaseMs !== undefined ? iso(now + leaseMs) : undefined
      const labeled: ComputerMetadata = shutdownTime === undefined ? metadata : { ...metadata, expires: shutdownTime }
      const body = Objects.claim(namespace, options.template, labeled, shutdownTime, metadata.temporary ? undefined : Handshake.newKey())
      yield* api.call({ method: "POST", path: Objects.claimsPath(namespace), body, operation: `create SandboxClaim ${name}` }).pipe(
        Effect.catchIf((error) => statusReason(error) === "AlreadyExists", (error) =>
          // A resent create (KubeApi) meets its own first attempt: the claim carries exactly our annotations.
          api.call<Objects.KubeObject>({ method: "GET", path: Objects.claimsPath(namespace, name), operation: `read SandboxClaim ${name}` }).pipe(
            Effect.orElseSucceed(() => undefined),
            Effect.flatMap((found) =>
              found !== undefined && sameAnnotations(found, body)
                ? Effect.void
                : Effect.fail(kubeError(`create SandboxClaim ${name}`, "Conflict", `the name is taken (${error.detail}); a claim of that name that kilntainers did not create for computer '${metadata.id}' is left untouched`, error))
            )
          ))
      )
      const instance: Instance = { providerId: name, metadata: labeled, state: "creating" }
      yield* ready(name).pipe(Effect.tapError(() => remove(instance).pipe(Effect.ignore)))
      return { ...instance, state: "running" } satisfies Instance
    })

  const start = (instance: Instance) =>
    instance.state === "gone"
      ? Effect.fail(kubeError(`start ${instance.providerId}`, "NotFound", "its SandboxClaim ended"))
      : Effect.as(ready(instance.providerId), { ...instance, state: "running" } satisfies Instance)

  /** Every process of the pod but its main one (pid 1) ends; the pod, and its files, stay. */
  const restart = (instance: Instance) =>
    Effect.gen(function*() {
      yield* ready(instance.providerId)
      const pod = yield* podOf({ api, namespace, watch }, instance.providerId)
      yield* PodExec.run(api, namespace, pod, ["/bin/sh", "-c", "kill -KILL -1 2>/dev/null; exit 0"])
      return { ...instance, state: "running" } satisfies Instance
    })

  const renew = (instance: Instance, until: number) =>
    Effect.gen(function*() {
      const expires = iso(until)
      yield* api.call({
        method: "PATCH",
        path: Objects.claimsPath(namespace, instance.providerId),
        contentType: "application/merge-patch+json",
        body: { spec: { lifecycle: { shutdownTime: expires } }, metadata: { annotations: { [labelKey(Objects.STYLE, "expires")]: expires } } },
        operation: `renew the lease of SandboxClaim ${instance.providerId}`
      })
      return { ...instance, metadata: { ...instance.metadata, expires } } satisfies Instance
    })

  return { find, create, start, restart, remove, renew }
}
