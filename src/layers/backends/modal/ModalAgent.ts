/**
 * The home of a Modal sandbox's processes: kt-agent (the static supervisor the host, Docker and
 * Kubernetes backends run), copied into the sandbox and started there once, durable, by Modal execs
 * of the wrapper (ProcessAgent.ts: install by `cat`, start with `--daemonize`, attach through
 * `kt-agent --connect`, whose stdin and stdout carry the framed protocol).
 *
 * Why the agent works on Modal (and is preferred over a process record of our own beside Modal's
 * exec output): `sandbox.exec` carries bytes both ways (the SDK's `mode: "binary"` streams, stdin by
 * `writeBytes`, which the router takes at an offset), and what an exec leaves behind runs on. Modal
 * ends an exec's processes only with the sandbox: closing the client's handle "does not terminate
 * the underlying process" (modal-labs/modal-client#3854, `ContainerProcess.cleanup`), nor does the
 * client going away, and the daemonized agent is in a session of its own, out of reach of the
 * wrapper's group kill. The sandbox's timeout or termination ends it and every process with the
 * sandbox's files.
 *
 * The connector runs in a plain exec, not under the wrapper: the wrapper frames a process's output
 * (its end marker starts with a NUL, so a trailing NUL waits for the next chunk) and the protocol's
 * frames often end in one. The exec's stdout is read as bytes, and its stdin written in order by one
 * writer; closing the link closes its stdin, which ends the connector.
 *
 * The key: 64 hex digits made when the sandbox is created, kept in its tag AGENT_KEY_TAG
 * (SandboxIdentity.ts). Tags are read and written through Modal's API with the account's token, which
 * no sandbox is given (kilntainers passes no secrets and no OIDC identity token to a sandbox), so any
 * server of the account can prove the key and nothing inside the sandbox can learn it: the agent gets
 * it on stdin and is non-dumpable, its store files are unnamed.
 *
 * Temporary computers get the same durable agent: Modal has no end of an exec that follows its client
 * (a crashed server's execs run on), so `--bound` would not end with the server anyway; a temporary
 * sandbox ends with its session (the kernel terminates it, or the next server reaps it), and its
 * processes with it. A sandbox made by an older kilntainers has no key tag: its processes run under
 * the wrapper, held by the server, as before.
 */
import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import { Readable } from "node:stream"
import type { ReadableStream as WebReadableStream } from "node:stream/web"
import type { ProviderError, SpawnFailed } from "../../../domain/Errors.js"
import type { BackendProcess, SpawnSpec } from "../../../services/Backend.js"
import { fromStream } from "../agent/AgentChannel.js"
import type { AgentClient, AgentLink } from "../agent/AgentClient.js"
import type * as NativeBinaries from "../agent/NativeBinaries.js"
import * as ProcessAgent from "../agent/ProcessAgent.js"
import { BACKEND } from "./ModalError.js"
import type { ExecHandle, ExecRequest } from "./ModalGateway.js"

/** Where the agent, its socket and its store live in the sandbox (root's, as Modal runs the sandbox). */
export const AGENT_DIR = "/.kilntainers"
/** Modal runs sandboxes on x86_64: the agent copied in is built for it, whatever the server runs on. */
export const AGENT_PLATFORM = "linux-x64"
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/** The connector's plain exec as the client's link: its stdout in, as bytes; its stdin out, in order. */
export const connectorLink = (
  exec: (request: ExecRequest) => Effect.Effect<ExecHandle, ProviderError>
) =>
(argv: ReadonlyArray<string>): Effect.Effect<AgentLink, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const handle = yield* exec({ argv, pty: false, workdir: "/", env: { PATH } })
    // One writer, in order; `null` closes stdin after the frames before it.
    const outgoing = yield* Queue.unbounded<Buffer | null>()
    const writer = Effect.gen(function*() {
      for (;;) {
        const taken = Chunk.toReadonlyArray(yield* Queue.takeBetween(outgoing, 1, 64))
        const end = taken.indexOf(null)
        const frames = (end < 0 ? taken : taken.slice(0, end)) as ReadonlyArray<Buffer>
        if (frames.length > 0) yield* handle.writeStdin(Buffer.concat(frames))
        if (end >= 0) return yield* handle.closeStdin
      }
    })
    yield* writer.pipe(Effect.ignore, Effect.forkScoped)
    const stdout = Readable.fromWeb(Stream.toReadableStream(handle.stdout.pipe(Stream.orDie)) as WebReadableStream<Uint8Array>)
    yield* Effect.addFinalizer(() => Effect.sync(() => stdout.destroy()))
    return {
      channel: fromStream(stdout),
      write: (bytes: Buffer) => void Queue.unsafeOffer(outgoing, Buffer.from(bytes)),
      // Its stdin's end ends the connector, and so its exec.
      close: () => void Queue.unsafeOffer(outgoing, null)
    } satisfies AgentLink
  })

/** The sandbox's agent: attached when it runs, else copied in, started and attached (through `spawn`, the wrapper's processes). */
export const open = (options: {
  readonly spawn: (spec: SpawnSpec) => Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope>
  readonly exec: (request: ExecRequest) => Effect.Effect<ExecHandle, ProviderError>
  readonly binaries: NativeBinaries.NativeBinaries
  readonly key: string
  readonly args: ReadonlyArray<string>
  readonly onLost: (reason: string) => void
}): Effect.Effect<AgentClient, ProviderError | SpawnFailed, Scope.Scope> =>
  ProcessAgent.open(
    { backend: BACKEND, spawn: options.spawn, dir: AGENT_DIR, cwd: "/", env: { PATH }, connect: connectorLink(options.exec) },
    Effect.succeed(options.binaries.agentBytes),
    { key: options.key, bound: false, args: options.args },
    { onLost: options.onLost }
  )
