/**
 * The kt-agent of a pod, reached by `pods/exec` (PodExec.ts): put in place, started, attached.
 *
 * One exec installs and starts it (INSTALL): it finds a writable directory (`/.kilntainers`, else
 * `/tmp/.kilntainers`), says the SHA-256 of the agent already there, and the server sends the
 * binary only when that is not the one it checked at startup (an image that carries the agent, a
 * pod another server or an earlier connection set up, skips the copy; a file a guest changed is
 * replaced). `head -c` reads exactly its size, so neither exec protocol needs to close stdin. It
 * then becomes the agent, which reads its key (sent only after the path line: `read` and `head`
 * must not take it) and says `ready`. A second exec runs the connector (`--connect`), whose stdin
 * and stdout carry the framed protocol; AgentClient proves the key.
 *
 * A permanent computer's agent is durable (`--daemonize`, on `agent.sock`): it goes on in a session
 * of its own, so the end of the exec that started it (or of the server) leaves it and its processes
 * running; its key is the claim's annotation (SandboxObjects.ts), which servers read and the pod
 * cannot (our template mounts no service-account token; a user's --k8s-template must not give its
 * pods one that may read SandboxClaims), and a start that finds it already running (status 3)
 * attaches to it. Kubernetes leaves
 * an exec's processes running when its client goes (kubernetes/kubernetes#89031, runc#3359), so a
 * daemon that holds nothing of its exec is safe there. A temporary computer's agent, and one of a
 * claim made before durable agents (no key), is bound to the connection (`--bound`, on a socket of
 * its own key): the end of its exec ends it and every process.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { createHash } from "node:crypto"
import { asProviderError, type ProviderError } from "../../../domain/Errors.js"
import { fromStream } from "../agent/AgentChannel.js"
import * as AgentClient from "../agent/AgentClient.js"
import * as Handshake from "../agent/AgentHandshake.js"
import type * as NativeBinaries from "../agent/NativeBinaries.js"
import type { KubeApi } from "./KubeApi.js"
import { BACKEND, kubeError } from "./KubeError.js"
import * as PodExec from "./PodExec.js"
import { HOME } from "./SandboxObjects.js"

/**
 * Installs the agent and starts it, in one exec: argv[1] is its size, argv[2] names its socket and
 * store, argv[3] is `--bound` or `--daemonize`. Says `have <sha256>` (empty: none there) and reads
 * `send` (then the binary follows) or `keep`; prints where the agent is, then becomes it.
 */
export const INSTALL = [
  `d=/.kilntainers; mkdir -p "$d" 2>/dev/null && [ -w "$d" ] || { d=/tmp/.kilntainers; mkdir -p "$d"; }`,
  `s=$(sha256sum "$d/kt-agent" 2>/dev/null); printf 'have %.64s\\n' "$s"`,
  `read -r answer`,
  `if [ "$answer" = send ]; then head -c "$1" > "$d/kt-agent.t" && chmod 755 "$d/kt-agent.t" && mv -f "$d/kt-agent.t" "$d/kt-agent" || exit 4; fi`,
  `mkdir -p ${HOME}`,
  `printf '%s\\n' "$d/kt-agent"`,
  `exec "$d/kt-agent" --listen "$d/$2.sock" --store "$d/$2.store" --no-parent --caps keep "$3"`
].join("\n")

/** Exit status of a start that found the computer's agent already running. */
const ALREADY_RUNNING = 3
/** How long copying the agent in may take (a slow link, a loaded node). */
const INSTALL_TIMEOUT = "120 seconds"

/** The SHA-256 of the agent's bytes, as `sha256sum` prints it (once per binary). */
const digests = new WeakMap<Uint8Array, string>()
const digestOf = (bytes: Uint8Array) => {
  let digest = digests.get(bytes)
  if (digest === undefined) {
    digest = createHash("sha256").update(bytes).digest("hex")
    digests.set(bytes, digest)
  }
  return digest
}

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

export interface AgentTarget {
  readonly api: KubeApi
  readonly namespace: string
  readonly pod: string
  readonly binaries: NativeBinaries.NativeBinaries
}

/**
 * Puts the agent in place and starts it; answers the socket to connect to. A bound agent lives as
 * long as its exec, which the Scope holds; a durable one's exec ends once it said `ready`.
 */
const start = (target: AgentTarget, key: string, durable: boolean) =>
  Effect.gen(function*() {
    const { api, namespace, pod } = target
    const name = durable ? "agent" : `agent-${key.slice(0, 16)}`
    const binary = target.binaries.agentBytes
    const exec = yield* PodExec.open(api, namespace, pod, ["/bin/sh", "-c", INSTALL, "kt", String(binary.length), name, durable ? "--daemonize" : "--bound"], { stdin: true, tty: false })
    let complaint = ""
    exec.stderr.on("data", (chunk: Buffer) => void (complaint = (complaint + chunk.toString("utf8")).slice(-2000)))
    const until = transcript(exec)
    const failed = (operation: string, reason: "Failed" | "Unavailable") =>
      Effect.promise(() => exec.closed).pipe(
        Effect.flatMap((code) => kubeError(operation, reason, `${pod}: ${complaint.trim() || exec.status || `exit code ${code}`}${reason === "Failed" ? " (the image needs /bin/sh, head, chmod and mv)" : ""}`))
      )
    const path = yield* Effect.gen(function*() {
      const have = yield* until((text) => /^have ([0-9a-f]*)\n/m.exec(text)?.[1])
      if (Option.isNone(have)) return Option.none<string>()
      // The bytes checked against the manifest at startup, never the file as it is now.
      if (have.value === digestOf(binary)) exec.stdin.write("keep\n")
      else {
        exec.stdin.write("send\n")
        exec.stdin.write(binary)
      }
      return yield* until((text) => /^(\/\S*\/kt-agent)\n/m.exec(text)?.[1])
    }).pipe(
      Effect.timeoutFail({ duration: INSTALL_TIMEOUT, onTimeout: () => kubeError("copy the agent into the pod", "Timeout", `${pod}: not done within ${INSTALL_TIMEOUT}`) })
    )
    if (Option.isNone(path)) return yield* failed("copy the agent into the pod", "Failed")
    exec.stdin.write(`${key}\n`)
    if (Option.isNone(yield* until((text) => (text.includes("ready\n") ? true : undefined)))) {
      const code = yield* Effect.promise(() => exec.closed)
      if (!(durable && code === ALREADY_RUNNING)) return yield* failed("start the agent", "Unavailable")
    }
    if (durable) exec.stdin.destroy()
    else yield* Effect.addFinalizer(() => Effect.sync(() => exec.stdin.destroy()))
    return `${path.value.replace(/\/kt-agent$/, "")}/${name}.sock`
  })

/**
 * Attaches through the connector at `socket`, proving `key`. Its Scope's end detaches from a
 * durable agent (its processes run on) and shuts a bound one down.
 */
export const attach = (target: AgentTarget, socket: string, key: string, durable: boolean, options: AgentClient.AgentOptions) =>
  Effect.gen(function*() {
    const exec = yield* PodExec.open(target.api, target.namespace, target.pod, [socket.replace(/[^/]*$/, "kt-agent"), "--connect", socket], { stdin: true, tty: false })
    const client = yield* Effect.acquireRelease(
      Effect.sync(() =>
        new AgentClient.AgentClient(BACKEND, {
          channel: fromStream(exec.stdout),
          write: (bytes) => void exec.stdin.write(bytes),
          close: () => exec.stdin.destroy()
        }, Buffer.from(key, "hex"), options)
      ),
      (client) => (durable ? client.detach : client.shutdown)
    )
    yield* client.ready.pipe(Effect.mapError(asProviderError(BACKEND, "attach to the agent")))
    return client
  })

/**
 * The pod's agent, started if need be and attached: durable under the claim's `key`, else bound to
 * this connection under a key made for it.
 */
export const open = (
  target: AgentTarget,
  key: string | undefined,
  options: AgentClient.AgentOptions
): Effect.Effect<AgentClient.AgentClient, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const durable = key !== undefined
    const used = key ?? Handshake.newKey()
    // A durable agent's start is done with once it said ready: its exec is not kept open.
    const socket = yield* (durable ? Effect.scoped(start(target, used, durable)) : start(target, used, durable))
    return yield* attach(target, socket, used, durable, options)
  })
