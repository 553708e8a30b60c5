/**
 * The fast path into a running container, and the home of its processes: kt-agent (the same
 * static supervisor the host backend runs in bubblewrap) copied into the container and started once
 * as a daemon there, listening on a socket inside it. Every later process — with pipes or on a
 * terminal the agent allocates inside the container — is a fork+exec by the agent, with no engine
 * round trip, and the agent keeps it, its record and its output whatever server comes and goes.
 *
 * A server reaches the agent through an Engine exec of the connector (`kt-agent --connect`), whose
 * hijacked stdin/stdout carry the protocol, and proves the computer's key: a container label
 * (AGENT_KEY_LABEL) that any server on the engine can read and nothing in the container can. The
 * daemon gets the key on its stdin when it starts; it is non-dumpable and holds no capability a
 * guest could use to read it (CAP_SYS_PTRACE is never granted by default). A permanent computer's
 * agent lives as long as its container; a temporary one's ends with the exec that started it (the
 * server that owns it). A container of an older version (no key label) gets an agent bound to this
 * server, under a key only it knows.
 *
 * The daemon runs as the guest user `agent` (DockerGuest.ts; no capabilities) unless the computer
 * keeps the image's user; the connector runs as the container's user (root in most images, which
 * reaches the socket whoever made it, an agent started by an older server too).
 */
import type Docker from "dockerode"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { PassThrough, type Duplex } from "node:stream"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import { fromStream } from "../agent/AgentChannel.js"
import * as AgentClient from "../agent/AgentClient.js"
import * as Handshake from "../agent/AgentHandshake.js"
import type * as NativeBinaries from "../agent/NativeBinaries.js"
import type { RelayListener } from "../agent/Relay.js"
import { Demuxer } from "./Demuxer.js"
import type { Engine } from "./DockerEngine.js"
import { archive } from "./Ustar.js"

/** Where the agent lives inside the container. */
export const AGENT_DIR = "/.kilntainers"
export const AGENT_PATH = `${AGENT_DIR}/kt-agent`
/** Its socket and store (made by the agent, as the guest or the container's user, in this sticky directory). */
const RUN_DIR = `${AGENT_DIR}/run`
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
/** Exit status of a start that found the container's agent already running. */
const ALREADY_RUNNING = 3

/** A ustar archive of the agent binary under AGENT_DIR, as the Engine's putArchive takes it. */
export const agentArchive = (binary: Buffer): Buffer =>
  archive([
    { name: `${AGENT_DIR.slice(1)}/`, mode: 0o755 },
    // Sticky and open to all like /tmp: the agent runs as the guest user or the container's, whoever that is.
    { name: `${RUN_DIR.slice(1)}/`, mode: 0o1777 },
    { name: AGENT_PATH.slice(1), mode: 0o755, data: binary }
  ])

/** The socket of an agent: the computer's own, or one bound to this server (a container without a key label). */
const socketOf = (key: string, shared: boolean) => (shared ? `${RUN_DIR}/agent.sock` : `${RUN_DIR}/agent-${key.slice(0, 16)}.sock`)

/**
 * An exec in the container with its stdio attached: the hijacked stream, split into stdout and
 * stderr. `user` ("uid:gid"): who runs it; undefined: the container's user.
 */
const attachedExec = (engine: Engine, containerId: string, cmd: ReadonlyArray<string>, user?: string) =>
  Effect.gen(function*() {
    // Engine calls: each bounded in time (a hung engine is a Timeout, not a computer that never starts).
    const exec = yield* engine.call("create the exec of the agent", (signal) =>
      engine.docker.getContainer(containerId).exec({
        Cmd: [...cmd],
        Env: [`PATH=${PATH}`],
        ...(user === undefined ? {} : { User: user }),
        WorkingDir: "/",
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
        Tty: false,
        abortSignal: signal
      } as Docker.ExecCreateOptions))
    // Bounded until the engine hands over the connection; the stream itself is not.
    const stream = yield* engine.call("start the agent", () => exec.start({ hijack: true, stdin: true }) as Promise<Duplex>)
    const stdout = new PassThrough({ highWaterMark: 1 << 20 })
    let stderr = ""
    const demuxer = new Demuxer((type, piece) => {
      if (type === 1 && !stdout.write(piece)) stream.pause()
      else if (type === 2) stderr = (stderr + piece.toString("utf8")).slice(-4000)
    })
    stdout.on("drain", () => stream.resume())
    stream.on("data", (chunk: Buffer) => demuxer.push(chunk))
    const end = () => stdout.end()
    stream.on("end", end)
    stream.on("close", end)
    stream.on("error", () => stdout.destroy())
    const exitCode = Effect.promise(() => exec.inspect().then((info) => info.ExitCode ?? null, () => null))
    return { stream, stdout, stderr: () => stderr.trim(), exitCode }
  })

export interface AgentStart {
  /** The computer's key; undefined: a container of an older version (the agent is bound to this server). */
  readonly key: string | undefined
  /** Ends with this server (a temporary computer). */
  readonly bound: boolean
  /**
   * Who the agent and so its processes are ("uid:gid", the guest user of DockerGuest.ts); undefined:
   * the container's user (root in most images). An agent already running keeps whom it was started as.
   */
  readonly user?: string | undefined
  readonly args: ReadonlyArray<string>
  /** How long its start may take (default START_MS). */
  readonly startMs?: number | undefined
}

/**
 * Generous: a loaded engine took over 20 s to start an agent here, so the bound is for an agent
 * that hangs, not for one that is slow.
 */
export const START_MS = 60_000

/**
 * Copies the agent into the container. Its own function: a closure made where the archive is in
 * scope shares its context, so a finalizer made beside it kept the 0.8 MB archive for the
 * computer's life (0.87 MiB of array buffers per idle Docker computer, bench/held-output.ts).
 */
const installAgent = (engine: Engine, containerId: string, binaries: NativeBinaries.NativeBinaries) =>
  Effect.suspend(() => {
    // The bytes checked at startup, never the file read again (NativeChecksums.ts).
    const bytes = binaries.agentBytes
    const archive = agentArchive(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength))
    return engine.call("install the agent", (signal) => engine.docker.getContainer(containerId).putArchive(archive, { path: "/", abortSignal: signal }))
  })

/**
 * Copies the agent into the container and starts it as a daemon (durable), or for the Scope
 * (bound): the exec's stdin is then the agent's, and its end ends the agent and every process.
 */
const startDaemon = (
  engine: Engine,
  containerId: string,
  binaries: NativeBinaries.NativeBinaries,
  socket: string,
  key: string,
  start: AgentStart
): Effect.Effect<void, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* installAgent(engine, containerId, binaries)
    const bound = start.bound || start.key === undefined
    const exec = yield* attachedExec(engine, containerId, [
      AGENT_PATH,
      "--listen", socket,
      "--store", `${socket.replace(/\.sock$/, "")}.store`,
      "--no-parent",
      // As the guest user, nothing of root's capabilities stays (Podman would make them ambient); as
      // root it keeps the container's for its processes (root inside must still run apt and dpkg).
      "--caps", start.user === undefined ? "keep" : "drop",
      ...(bound ? ["--bound"] : []),
      ...start.args
    ], start.user)
    exec.stream.write(`${key}\n`)
    if (bound) yield* Effect.addFinalizer(() => Effect.sync(() => exec.stream.destroy()))
    // "ready" on stdout once it accepts connections; an agent already there exits with status 3.
    const ready = yield* Effect.async<boolean>((resume) => {
      let said = ""
      exec.stdout.on("data", (chunk: Buffer) => {
        said += chunk.toString("utf8")
        if (said.includes("ready\n")) resume(Effect.succeed(true))
      })
      exec.stdout.on("end", () => resume(Effect.succeed(false)))
    })
    if (!bound) exec.stream.destroy() // the daemon lives on without this exec
    if (ready) return
    const code = yield* exec.exitCode
    if (code === ALREADY_RUNNING) return
    return yield* providerError(engine.name, "start the agent", "Unavailable", exec.stderr() || `it exited with status ${code}`)
  })

/** Attaches to the container's agent through the connector; detached when the Scope closes. */
const attach = (
  engine: Engine,
  containerId: string,
  socket: string,
  key: string,
  options: AgentClient.AgentOptions
): Effect.Effect<AgentClient.AgentClient, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const backend = engine.name
    const exec = yield* attachedExec(engine, containerId, [AGENT_PATH, "--connect", socket])
    const client = yield* Effect.acquireRelease(
      Effect.sync(() =>
        new AgentClient.AgentClient(backend, {
          channel: fromStream(exec.stdout),
          write: (bytes) => void exec.stream.write(bytes),
          close: () => exec.stream.destroy()
        }, Buffer.from(key, "hex"), options)
      ),
      (client) => client.detach
    )
    yield* client.ready.pipe(
      Effect.mapError((error) => {
        const said = exec.stderr()
        return said === "" ? error : providerError(backend, "attach to the agent", "Unavailable", said)
      })
    )
    return client
  })

/** Attaches to the container's agent (its computer's socket), proving `key`; detached when the Scope closes. */
export const attachAgent = (
  engine: Engine,
  containerId: string,
  key: string,
  options: AgentClient.AgentOptions = {}
): Effect.Effect<AgentClient.AgentClient, ProviderError, Scope.Scope> => attach(engine, containerId, socketOf(key, true), key, options)

/**
 * The container's agent: attached when it runs, else copied in, started and attached. Fails when
 * it cannot be started (the caller decides whether the container does without).
 */
export const open = (
  engine: Engine,
  containerId: string,
  binaries: NativeBinaries.NativeBinaries,
  start: AgentStart,
  options: AgentClient.AgentOptions & { readonly relay?: RelayListener | undefined } = {}
): Effect.Effect<AgentClient.AgentClient, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const key = start.key ?? Handshake.newKey()
    const socket = socketOf(key, start.key !== undefined)
    if (start.key !== undefined) {
      const running = yield* Effect.either(attach(engine, containerId, socket, key, options))
      if (running._tag === "Right") return running.right
    }
    yield* startDaemon(engine, containerId, binaries, socket, key, start)
    return yield* attach(engine, containerId, socket, key, options)
  }).pipe(
    Effect.timeoutFail({
      duration: start.startMs ?? START_MS,
      onTimeout: () =>
        providerError(engine.name, "start the agent", "Timeout", `it did not start in the container within ${Math.round((start.startMs ?? START_MS) / 1000)} seconds`)
    })
  )

/** Ends the container's agent, if one runs (restart, reset, delete): every process it holds ends. */
export const stop = (engine: Engine, containerId: string, key: string): Effect.Effect<void> =>
  Effect.scoped(Effect.flatMap(attach(engine, containerId, socketOf(key, true), key, {}), (client) => client.shutdown)).pipe(
    Effect.timeout("10 seconds"),
    Effect.ignore
  )
