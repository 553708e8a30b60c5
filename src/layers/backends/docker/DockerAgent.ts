/**
 * The fast path into a running container: kt-agent (the same static supervisor the host backend
 * runs in bubblewrap) copied into the container and started once, through one Engine API exec whose
 * hijacked stdin/stdout carry the agent's framed protocol. Every later process — with pipes or on a
 * terminal the agent allocates inside the container — is a fork+exec by the agent, with no engine
 * round trip, instead of one exec create + start + inspect per command.
 */
import type Docker from "dockerode"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { EventEmitter } from "node:events"
import { PassThrough, type Duplex, type Writable } from "node:stream"
import { asProviderError, type ProviderError, providerError } from "../../../domain/Errors.js"
import { fromStream } from "../agent/AgentChannel.js"
import * as AgentClient from "../agent/AgentClient.js"
import type * as NativeBinaries from "../agent/NativeBinaries.js"
import type { RelayListener } from "../agent/Relay.js"
import { Demuxer } from "./Demuxer.js"
import type { Engine } from "./DockerEngine.js"
import { archive } from "./Ustar.js"

/** Where the agent lives inside the container. */
export const AGENT_DIR = "/.kilntainers"
export const AGENT_PATH = `${AGENT_DIR}/kt-agent`
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/** A ustar archive of the agent binary under AGENT_DIR, as the Engine's putArchive takes it. */
export const agentArchive = (binary: Buffer): Buffer =>
  archive([{ name: `${AGENT_DIR.slice(1)}/`, mode: 0o755 }, { name: AGENT_PATH.slice(1), mode: 0o755, data: binary }])

/**
 * The agent's exec as an AgentProcess: the engine's multiplexed stream split without gathering,
 * payload pieces passed on as they arrive. Stdout is the agent's frame channel; when its reader is
 * full, the socket is paused (back-pressure reaches the agent).
 */
class ExecAgent extends EventEmitter implements AgentClient.AgentProcess {
  readonly stdout = new PassThrough({ highWaterMark: 1 << 20 })
  readonly stderr = new PassThrough()
  readonly stdin: Writable

  constructor(private readonly stream: Duplex, exec: Docker.Exec) {
    super()
    this.stdin = stream
    const demuxer = new Demuxer((type, piece) => {
      const target = type === 1 ? this.stdout : type === 2 ? this.stderr : undefined
      if (target !== undefined && !target.write(piece) && target === this.stdout) stream.pause()
    })
    stream.on("data", (chunk: Buffer) => demuxer.push(chunk))
    this.stdout.on("drain", () => stream.resume())
    let closed = false
    const close = () => {
      if (closed) return
      closed = true
      this.stdout.end()
      this.stderr.end()
      exec.inspect().then(
        (info) => this.emit("close", info.ExitCode ?? null, null),
        () => this.emit("close", null, "SIGKILL")
      )
    }
    stream.on("end", close)
    stream.on("close", close)
    stream.on("error", (error) => this.emit("error", error))
  }

  kill(): boolean {
    this.stream.destroy()
    return true
  }
}

/**
 * Copies the agent into the container and starts it; the agent (and every process it started)
 * ends with the Scope, and also when this server goes away (its stdin closes). As the guest user
 * (`user`) it holds no capabilities; as root (the image's user, or --user=0) it keeps the container's
 * for its processes (root inside must still run apt and dpkg). It adds its seccomp filter and
 * no_new_privs. `onLost` hears of the agent's death other than through the Scope.
 */
export const start = (
  engine: Engine,
  containerId: string,
  binaries: NativeBinaries.NativeBinaries,
  options: {
    readonly onLost?: (reason: string) => void
    readonly relayPort?: number | undefined
    readonly relay?: RelayListener | undefined
    /** The user ("uid:gid") the agent and its processes run as; undefined: the container's (root). */
    readonly user?: string | undefined
    /** The computer can write host files: no setuid/setgid modes (the agent's --no-setid-files). */
    readonly noSetidFiles?: boolean | undefined
  } = {}
): Effect.Effect<AgentClient.AgentClient, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const backend = engine.name
    const container = engine.docker.getContainer(containerId)
    // The bytes checked at startup, never the file read again (NativeChecksums.ts).
    const bytes = binaries.agentBytes
    const archive = agentArchive(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength))
    // Engine calls: each bounded in time (a hung engine is a Timeout, not a computer that never starts).
    yield* engine.call("install the agent", (signal) => container.putArchive(archive, { path: "/", abortSignal: signal }))
    const relayArgs = options.relayPort === undefined ? [] : ["--relay-port", String(options.relayPort)]
    const exec = yield* engine.call("create the exec of the agent", (signal) =>
      container.exec({
        // As the guest user, nothing of root's capabilities stays (Podman would make them ambient).
        Cmd: [AGENT_PATH, "--no-parent", "--caps", options.user === undefined ? "keep" : "drop", ...(options.noSetidFiles === true ? ["--no-setid-files"] : []), ...relayArgs],
        Env: [`PATH=${PATH}`],
        ...(options.user === undefined ? {} : { User: options.user }),
        WorkingDir: "/",
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
        Tty: false,
        abortSignal: signal
      } as Docker.ExecCreateOptions))
    // Bounded until the engine hands over the connection; the agent's channel itself is not.
    const stream = yield* engine.call("start the agent", () => exec.start({ hijack: true, stdin: true }) as Promise<Duplex>)
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const agent = new ExecAgent(stream, exec)
        return new AgentClient.AgentClient(backend, agent, fromStream(agent.stdout), true, {
          onLost: options.onLost,
          relay: options.relay
        })
      }),
      (client) => client.shutdown
    )
    yield* client.ready.pipe(
      Effect.mapError(asProviderError(backend, "start the agent")),
      Effect.timeoutFail({
        duration: "15 seconds",
        onTimeout: () => providerError(backend, "start the agent", "Timeout", "it did not start in the container within 15 seconds")
      })
    )
    return client
  })
