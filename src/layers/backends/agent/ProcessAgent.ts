/**
 * A computer's kt-agent reached through the provider's own processes, where the server can neither
 * reach a socket nor copy a file in (E2B's envd, Modal's exec): every step is a process of the
 * backend's ordinary kind.
 *
 *   install   `sh -c 'cat > DIR/kt-agent …'` with the agent's bytes on its stdin (only when no agent
 *             answers: a computer keeps its agent across servers);
 *   start     the agent, its key on stdin: `--daemonize` for a permanent computer (the started process
 *             exits at once, and the provider's end of it — a kill of its process group — does not
 *             reach the agent), `--bound` for a temporary one (its end ends the computer's processes);
 *   attach    `kt-agent --connect DIR/run/agent.sock`, whose stdout and stdin carry the protocol;
 *             the server proves the computer's key through it (AgentClient), so a guest that
 *             replaces the connector or the agent gains nothing.
 * The key is the provider's record of the computer (E2B metadata, Modal tags): readable by any server
 * of the account, not from inside the computer.
 */
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as FiberSet from "effect/FiberSet"
import * as Queue from "effect/Queue"
import type * as Scope from "effect/Scope"
import { type ProviderError, providerError, type SpawnFailed } from "../../../domain/Errors.js"
import { type BackendProcess, forEachEventChunk, type SpawnSpec } from "../../../services/Backend.js"
import type { AgentChannel } from "./AgentChannel.js"
import { AgentClient, type AgentLink, type AgentOptions } from "./AgentClient.js"

/** The backend's way of running one process in the computer (its Connection.spawn without the agent). */
export interface ProcessHost {
  readonly backend: string
  readonly spawn: (spec: SpawnSpec) => Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope>
  /** Where the agent lives in the computer (a directory the computer's user may write). */
  readonly dir: string
  /** The working directory of the helper processes. */
  readonly cwd: string
  readonly env: Readonly<Record<string, string>>
  /**
   * Runs the connector (`argv`) as a raw byte link, for a backend whose processes frame their output
   * (Modal's wrapper holds back a trailing NUL that could begin its end marker: a frame would wait
   * for the next); default: a process of `spawn`.
   */
  readonly connect?: ((argv: ReadonlyArray<string>) => Effect.Effect<AgentLink, ProviderError | SpawnFailed, Scope.Scope>) | undefined
}

export interface AgentStart {
  /** The computer's key (64 hex digits). */
  readonly key: string
  /** Ends with this server (a temporary computer). */
  readonly bound: boolean
  readonly args: ReadonlyArray<string>
}

/** Exit status of a start that found the computer's agent already running. */
const ALREADY_RUNNING = 3

const unavailable = (backend: string, operation: string, detail: string) => providerError(backend, operation, "Unavailable", detail)

const paths = (dir: string) => ({ agent: `${dir}/kt-agent`, socket: `${dir}/run/agent.sock`, store: `${dir}/run/agent.store` })

/** What a helper process said (the end of its stdout and stderr) and how it ended, as it goes. */
const follow = (process: BackendProcess, onStdout: (said: string) => void = () => {}) => {
  const seen = { stdout: "", stderr: "", code: undefined as number | null | undefined }
  const done = forEachEventChunk(process, (events) =>
    Effect.sync(() => {
      for (const event of events) {
        if (event._tag === "Stdout") {
          seen.stdout = (seen.stdout + Buffer.from(event.data).toString("utf8")).slice(-4096)
          onStdout(seen.stdout)
        } else if (event._tag === "Stderr") seen.stderr = (seen.stderr + Buffer.from(event.data).toString("utf8")).slice(-4096)
        else seen.code = event.exit.exitCode
      }
    }))
  return { seen, done }
}

/**
 * Copies the agent's bytes into the computer: into a name of this shell's own ($$), renamed over the
 * agent at the end, so that two servers installing at once never interleave their bytes.
 */
const install = (host: ProcessHost, binary: Uint8Array): Effect.Effect<void, ProviderError | SpawnFailed> =>
  Effect.scoped(Effect.gen(function*() {
    const { agent } = paths(host.dir)
    const process = yield* host.spawn({
      argv: [
        "sh",
        "-c",
        `set -e; mkdir -p "$1/run"; chmod 1777 "$1/run"; t="$2.new.$$"; cat > "$t"; chmod 755 "$t"; mv -f "$t" "$2"`,
        "sh",
        host.dir,
        agent
      ],
      cwd: host.cwd,
      env: host.env
    })
    // In pieces: a provider's stdin calls have a size limit of their own.
    for (let at = 0; at < binary.length; at += 256 * 1024) yield* process.write(binary.subarray(at, Math.min(binary.length, at + 256 * 1024)))
    yield* process.closeStdin
    const { done, seen } = follow(process)
    yield* done
    if (seen.code !== 0) {
      return yield* unavailable(host.backend, "install the agent", seen.stderr.trim() || `the copy exited with status ${seen.code}`)
    }
  }))

/** Starts the agent; a bound one's process lives in the Scope. Succeeds when it runs (or already did). */
const start = (host: ProcessHost, begin: AgentStart): Effect.Effect<void, ProviderError | SpawnFailed, Scope.Scope> =>
  Effect.gen(function*() {
    const { agent, socket, store } = paths(host.dir)
    const process = yield* host.spawn({
      argv: [agent, "--listen", socket, "--store", store, "--no-parent", "--caps", "keep", begin.bound ? "--bound" : "--daemonize", ...begin.args],
      cwd: host.cwd,
      env: host.env
    })
    yield* process.write(Buffer.from(`${begin.key}\n`))
    // "ready" once it accepts connections; an agent already there exits with status 3.
    const ready = yield* Deferred.make<boolean>()
    const { done, seen } = follow(process, (said) => {
      if (said.includes("ready\n")) Deferred.unsafeDone(ready, Effect.succeed(true))
    })
    yield* done.pipe(Effect.ensuring(Deferred.succeed(ready, seen.stdout.includes("ready\n"))), Effect.forkScoped)
    // Unready means its output ended, and with it its exit status is known.
    if ((yield* Deferred.await(ready)) || seen.code === ALREADY_RUNNING) return
    return yield* unavailable(host.backend, "start the agent", seen.stderr.trim() || `it exited with status ${seen.code}`)
  })

/** The connector's process as the client's link: its stdout in, its stdin out, in order. */
const link = (process: BackendProcess) =>
  Effect.gen(function*() {
    const run = yield* FiberSet.makeRuntime<never>()
    const outgoing = yield* Queue.unbounded<Buffer>()
    // One writer: the frames reach the connector's stdin in the order they were sent.
    yield* Queue.takeBetween(outgoing, 1, 64).pipe(
      Effect.flatMap((chunks) => process.write(Buffer.concat(Chunk.toReadonlyArray(chunks)))),
      Effect.forever,
      Effect.ignore,
      Effect.forkScoped
    )
    const gate = yield* Effect.makeLatch(true)
    let reading: ReturnType<typeof run> | undefined
    const channel: AgentChannel = {
      start: (onChunk, onEnd) => {
        reading = run(forEachEventChunk(process, (events) =>
          Effect.zipRight(gate.await, Effect.sync(() => {
            for (const event of events) if (event._tag === "Stdout") onChunk(Buffer.from(event.data.buffer, event.data.byteOffset, event.data.byteLength))
          }))).pipe(Effect.ensuring(Effect.sync(onEnd))))
      },
      pause: () => gate.unsafeClose(),
      resume: () => gate.unsafeOpen(),
      destroy: () => reading?.unsafeInterruptAsFork(reading.id())
    }
    return {
      channel,
      write: (bytes: Buffer) => void Queue.unsafeOffer(outgoing, Buffer.from(bytes)),
      close: () => void run(Effect.ignore(process.closeStdin))
    }
  })

/** Attaches to the computer's agent through the connector; detached when the Scope closes. */
export const attach = (host: ProcessHost, key: string, options: AgentOptions = {}): Effect.Effect<AgentClient, ProviderError | SpawnFailed, Scope.Scope> =>
  Effect.gen(function*() {
    const { agent, socket } = paths(host.dir)
    const argv = [agent, "--connect", socket]
    const made = host.connect === undefined ? yield* link(yield* host.spawn({ argv, cwd: host.cwd, env: host.env })) : yield* host.connect(argv)
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => new AgentClient(host.backend, made, Buffer.from(key, "hex"), options)),
      (client) => client.detach
    )
    yield* client.ready
    return client
  })

/**
 * The computer's agent: attached when it runs, else copied in (`binary`), started and attached.
 * Fails when it cannot be started (the caller decides whether the computer does without).
 */
export const open = (
  host: ProcessHost,
  binary: Effect.Effect<Uint8Array, ProviderError>,
  begin: AgentStart,
  options: AgentOptions = {}
): Effect.Effect<AgentClient, ProviderError | SpawnFailed, Scope.Scope> =>
  Effect.gen(function*() {
    const running = yield* Effect.either(attach(host, begin.key, options))
    if (running._tag === "Right") return running.right
    yield* install(host, yield* binary)
    yield* start(host, begin)
    return yield* attach(host, begin.key, options)
  }).pipe(
    Effect.timeoutFail({
      duration: "60 seconds",
      onTimeout: () => providerError(host.backend, "start the agent", "Timeout", "it did not start in the computer within 60 seconds")
    })
  )
