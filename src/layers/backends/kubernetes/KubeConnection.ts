/**
 * A connection to a running computer: its pod's kt-agent, reached by `pods/exec` (PodExec.ts), and
 * the watch for its loss.
 *
 * The pod is the claim's Sandbox's (`status.sandbox.name`; the Sandbox's pod-name annotation, or
 * its own name). The agent — the static binary the host and Docker backends run — is copied in by
 * an exec that reads exactly its size from stdin (`head -c`, so neither protocol needs to close
 * stdin) into `/.kilntainers` or, where the root is read-only, `/tmp/.kilntainers`, and then
 * becomes the agent, bound to the connection (`--bound`: its exec's end ends it) on a socket in
 * that directory, with a key made for the connection; a second exec runs the connector
 * (`--connect`), whose stdin and stdout carry the agent's framed protocol (AgentClient proves the
 * key). Two execs per connection, not three: each is a connection and a shell in the pod. Every process is
 * then a fork+exec by the agent inside the pod (AgentProcesses.ts): terminals, stdin, signals to the
 * group, exact bytes.
 *
 * The agent ends with the connection, so the processes of a permanent computer end with the server
 * (capability `heldProcesses: false`). A durable agent (`--daemonize`, a key kept in the claim's
 * annotations, as Docker keeps it in a label) replaces `--bound`, and nothing else here.
 *
 * `lost` completes when the claim is deleted or expires outside the kernel (ClaimWatch.ts), or the
 * agent's exec ends (the pod went).
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { asProviderError, type ProviderError, SpawnFailed } from "../../../domain/Errors.js"
import type { BackendProcess, Connection, Instance, SpawnSpec } from "../../../services/Backend.js"
import { fromStream } from "../agent/AgentChannel.js"
import * as AgentClient from "../agent/AgentClient.js"
import * as Handshake from "../agent/AgentHandshake.js"
import * as AgentProcesses from "../agent/AgentProcesses.js"
import type * as NativeBinaries from "../agent/NativeBinaries.js"
import type { ClaimWatch } from "./ClaimWatch.js"
import type { KubeApi } from "./KubeApi.js"
import { BACKEND, kubeError } from "./KubeError.js"
import * as PodExec from "./PodExec.js"
import { ended, HOME, type KubeObject, POD_NAME_ANNOTATION, sandboxPath } from "./SandboxObjects.js"

/**
 * Installs the agent and starts it, in one exec: argv[1] is its size, argv[2] names its socket and
 * store. Prints where the agent is once it is in place, then becomes the agent, which reads its key
 * (sent only after that line: a `head` may read ahead, and must not take the key) and says `ready`.
 */
export const INSTALL = [
  `d=/.kilntainers; mkdir -p "$d" 2>/dev/null && [ -w "$d" ] || { d=/tmp/.kilntainers; mkdir -p "$d"; }`,
  `head -c "$1" > "$d/kt-agent.t" && chmod 755 "$d/kt-agent.t" && mv -f "$d/kt-agent.t" "$d/kt-agent" || exit 3`,
  `mkdir -p ${HOME}`,
  `printf '%s\\n' "$d/kt-agent"`,
  `exec "$d/kt-agent" --listen "$d/agent-$2.sock" --store "$d/agent-$2.store" --no-parent --caps keep --bound`
].join("\n")

/** How long copying the agent in may take (a slow link, a loaded node). */
const INSTALL_TIMEOUT = "120 seconds"

export interface ConnectionContext {
  readonly api: KubeApi
  readonly namespace: string
  readonly watch: ClaimWatch
  readonly binaries: NativeBinaries.NativeBinaries
  /** How long the agent may take to say it is ready. */
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

/**
 * What an exec's stdout has said (its last 4 KiB), read from its start; `until(said)` answers once
 * `said` finds its answer in it, or none when stdout ended without.
 */
const transcript = (exec: PodExec.ExecProcess) => {
  let text = ""
  let ended = false
  const checks = new Set<() => void>()
  exec.stdout.on("data", (chunk: Buffer) => {
    text = (text + chunk.toString("utf8")).slice(-4096)
    for (const check of [...checks]) check()
  })
  exec.stdout.once("end", () => {
    ended = true
    for (const check of [...checks]) check()
  })
  return <A>(said: (text: string) => A | undefined) =>
    Effect.async<Option.Option<A>>((resume) => {
      const check = () => {
        const found = said(text)
        if (found === undefined && !ended) return
        checks.delete(check)
        resume(Effect.succeed(Option.fromNullable(found)))
      }
      checks.add(check)
      check()
      return Effect.sync(() => void checks.delete(check))
    })
}

/**
 * Copies the agent into the pod and starts it bound to this connection (`--bound`: the end of its
 * exec — its stdin — ends it and every process) on a socket under its directory, with a key made
 * for this connection; then attaches through the connector (`--connect`), proving the key. Two
 * execs: the copy and the agent's start share one (one connection, one shell fewer per computer).
 */
const openAgent = (context: ConnectionContext, pod: string, onLost: (reason: string) => void) =>
  Effect.gen(function*() {
    const key = Handshake.newKey()
    const tag = key.slice(0, 16)
    const binary = context.binaries.agentBytes
    const daemon = yield* PodExec.open(context.api, context.namespace, pod, ["/bin/sh", "-c", INSTALL, "kt", String(binary.length), tag], { stdin: true, tty: false })
    let complaint = ""
    daemon.stderr.on("data", (chunk: Buffer) => void (complaint = (complaint + chunk.toString("utf8")).slice(-2000)))
    const until = transcript(daemon)
    // The bytes checked against the manifest at startup, never the file as it is now.
    daemon.stdin.write(binary)
    const path = yield* until((text) => /^(\/\S*\/kt-agent)\n/.exec(text)?.[1]).pipe(
      Effect.timeoutFail({ duration: INSTALL_TIMEOUT, onTimeout: () => kubeError("copy the agent into the pod", "Timeout", `${pod}: not done within ${INSTALL_TIMEOUT}`) })
    )
    if (Option.isNone(path)) {
      const code = yield* Effect.promise(() => daemon.closed)
      return yield* kubeError("copy the agent into the pod", "Failed", `${pod}: ${complaint.trim() || daemon.status || `exit code ${code}`} (the image needs /bin/sh, head, chmod and mv)`)
    }
    daemon.stdin.write(`${key}\n`)
    if (Option.isNone(yield* until((text) => (text.includes("ready\n") ? true : undefined)))) {
      const code = yield* Effect.promise(() => daemon.closed)
      return yield* kubeError("start the agent", "Unavailable", `${pod}: ${complaint.trim() || `it exited with status ${code}`}`)
    }
    const socket = `${path.value.replace(/\/kt-agent$/, "")}/agent-${tag}.sock`
    const exec = yield* PodExec.open(context.api, context.namespace, pod, [path.value, "--connect", socket], { stdin: true, tty: false })
    const client = yield* Effect.acquireRelease(
      Effect.sync(() =>
        new AgentClient.AgentClient(BACKEND, {
          channel: fromStream(exec.stdout),
          write: (bytes) => void exec.stdin.write(bytes),
          close: () => exec.stdin.destroy()
        }, Buffer.from(key, "hex"), { onLost })
      ),
      (client) => client.shutdown
    )
    yield* client.ready.pipe(Effect.mapError(asProviderError(BACKEND, "start the agent")))
    return client
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
    const client = yield* openAgent(context, pod, (reason) => Deferred.unsafeDone(agentDied, Effect.succeed(reason)))
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
          : AgentProcesses.spawn(BACKEND, client, spec).pipe(
            Effect.mapError((error) => (error instanceof SpawnFailed ? error : asProviderError(BACKEND, "start the process")(error)))
          )
      )
    return { home: HOME, spawn, lost: Deferred.await(lost) }
  })
