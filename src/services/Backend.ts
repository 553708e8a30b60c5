import * as Chunk from "effect/Chunk"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { Duplex } from "node:stream"
import type { ComputerMetadata, LabelStyle, Owner } from "../domain/ComputerMetadata.js"
import { type InvalidInput, type ProviderError, SpawnFailed, type Unsupported } from "../domain/Errors.js"

/** What a backend can do; the kernel reads these and refuses what is missing with `Unsupported`. */
export interface Capabilities {
  /** Real pseudo-terminals (`tty: true`). */
  readonly pty: boolean
  /** Writing to a running process's stdin, and closing it. */
  readonly stdin: boolean
  /** Any signal to a process's group (not only ending it). */
  readonly signals: boolean
  /** Restart keeping the writable state. */
  readonly restart: boolean
  /** Recreate from the base image. */
  readonly factoryReset: boolean
  /** Permanent computers that outlive the server. */
  readonly persistence: boolean
  /**
   * The computer holds its own processes (Connection.held): a permanent computer's processes, their
   * records and their output outlive the server, and any server that connects follows them.
   */
  readonly heldProcesses: boolean
  /** Files read and written inside the computer. */
  readonly files: boolean
  /** Network off (loopback only) unless asked for. */
  readonly networkControl: boolean
  /** Checkpoints of a computer's filesystem, and new computers made from them (`Backend.checkpoints`). */
  readonly checkpoints: boolean
  /** Preview URLs: a port inside the computer reached without its network (`Connection.openPort`), or the provider's own address of it (`Connection.publicUrl`). */
  readonly previews: boolean
}

/**
 * What of a computer outlives the server that runs it, in one sentence for `computer_list`: said
 * plainly, so that an agent on a backend whose processes end with the server knows before it relies
 * on them.
 */
export const survivalOf = (capabilities: Capabilities, backend: string): string =>
  !capabilities.persistence
    ? "Nothing: every computer ends with this server."
    : capabilities.heldProcesses
    ? "A permanent computer keeps its files, and its processes and their output run on in it after this server ends, and any later server lists and follows them; a temporary one ends with its session."
    : backend === "toolset" || backend === "wasm"
    ? "A permanent computer keeps its files as saved after each process ends (in the state directory); its processes and their output end with this server."
    : "A permanent computer keeps its files; its processes and their output end with this server."

/** Every capability; a backend declares what it lacks: `capabilitiesWithout({ pty: false })`. */
export const capabilitiesWithout = (missing: Partial<{ [K in keyof Capabilities]: false }> = {}): Capabilities => ({
  pty: true,
  stdin: true,
  signals: true,
  restart: true,
  factoryReset: true,
  persistence: true,
  heldProcesses: true,
  files: true,
  networkControl: true,
  checkpoints: true,
  previews: true,
  ...missing
})

/** What the runtime asks a backend to start inside a computer. */
export interface SpawnSpec {
  /** argv; argv[0] is looked up on the computer's PATH. */
  readonly argv: ReadonlyArray<string>
  /** Absolute working directory inside the computer. */
  readonly cwd: string
  /** The complete environment of the process (the runtime has already merged defaults). */
  readonly env: Readonly<Record<string, string>>
  /** A pseudo-terminal of this size, or pipes when absent. */
  readonly tty?: { readonly cols: number; readonly rows: number } | undefined
  /** The command as ps shows it; a computer that holds its processes keeps it with the process. */
  readonly label?: string | undefined
}

const NO_NUL = "NUL cannot be passed to a program"

/**
 * Why no backend can run `spec`, or undefined. The one check of the contract: every
 * `Connection.spawn` makes it (through `checkSpec`) before anything starts. Each string becomes a
 * C string (no NUL), argv[0] names a program, the directory is absolute, and a variable's name is
 * non-empty and holds no '='.
 */
export const specProblem = (spec: SpawnSpec): string | undefined => {
  if (spec.argv.length === 0 || spec.argv[0] === "") return "argv is empty"
  const index = spec.argv.findIndex((arg) => arg.includes("\0"))
  if (index >= 0) return `argument ${index} contains a NUL byte; ${NO_NUL}`
  for (const [name, value] of Object.entries(spec.env)) {
    if (name.includes("\0") || value.includes("\0")) {
      return `the environment variable ${JSON.stringify(name.replace(/\0/g, "\\0"))} contains a NUL byte; ${NO_NUL}`
    }
    if (name === "" || name.includes("=")) return `invalid environment variable name ${JSON.stringify(name)}: it must be non-empty, without '='`
  }
  if (spec.cwd.includes("\0")) return `the working directory contains a NUL byte; ${NO_NUL}`
  if (!spec.cwd.startsWith("/")) return `the working directory must be absolute, got '${spec.cwd}'`
  return undefined
}

/**
 * The limit of a backend that starts a program as `env -i NAME=VALUE… argv` (Docker's Engine exec,
 * Fly, Modal): `env` would read an argv[0] holding '=' as one more variable.
 */
export const throughEnv = (backend: string) => (spec: SpawnSpec): string | undefined =>
  spec.argv[0]!.includes("=") ? `a command name containing '=' is not supported by the ${backend} backend` : undefined

/**
 * `specProblem`, then the backend's own limits, as a `SpawnFailed` naming the command: how every
 * `Connection.spawn` begins.
 */
export const checkSpec = (
  spec: SpawnSpec,
  ...limits: ReadonlyArray<(spec: SpawnSpec) => string | undefined>
): Effect.Effect<void, SpawnFailed> => {
  let problem = specProblem(spec)
  for (const limit of limits) problem ??= limit(spec)
  return problem === undefined
    ? Effect.void
    : Effect.fail(new SpawnFailed({ command: spec.argv.join(" ").replace(/\0/g, "\\0"), reason: problem }))
}

/** How a process ended. `signal` is a name such as `SIGKILL`. */
export interface ExitInfo {
  readonly exitCode: number | null
  readonly signal: string | null
  /** Other processes of its tree ended with it (a tree teardown), when the backend can tell. */
  readonly descendantsKilled?: number | undefined
}

/**
 * Events of a running process, in order. `Exit` comes after every byte the process itself wrote;
 * output of children that outlive it may follow until the stream ends. `skipped`: bytes of the
 * stream just before `data` that this reader will never get (a computer that holds its processes
 * kept less than the reader fell behind by), counted so that totals stay exact.
 */
export type ProcessEvent =
  | { readonly _tag: "Stdout"; readonly data: Uint8Array; readonly skipped?: number | undefined }
  | { readonly _tag: "Stderr"; readonly data: Uint8Array; readonly skipped?: number | undefined }
  | { readonly _tag: "Exit"; readonly exit: ExitInfo }

/** A process running in a computer. Its resources belong to the Scope it was spawned in. */
export interface BackendProcess {
  /** The process id inside the computer, when the backend knows it. */
  readonly pid: number | null
  /** Its handle in a computer that holds its processes (Connection.held): `p<handle>` to everyone. */
  readonly handle?: number | undefined
  /**
   * The process's output, its one interface: the next chunk of events, failing with None once they
   * ended (every event exactly once; they end when the process and all holders of its output are
   * gone). Made with `new ProcessEvents()` (bounded, with back-pressure).
   *
   * Borrowed bytes: a chunk's `data` are views into memory the backend fills again after the next
   * pull, so a consumer copies what it keeps before pulling again (OutputLog and TerminalScreen
   * copy). That is why it is a pull and not a Stream: a Stream combinator that buffers (grouping,
   * collecting, a buffer) would hold views whose bytes change under it. Read it with
   * `forEachEventChunk` (a plain loop, the kernel's way), or as `ownedEvents` (a Stream of copies).
   */
  readonly pull: Effect.Effect<Chunk.Chunk<ProcessEvent>, Option.Option<never>>
  readonly write: (data: Uint8Array) => Effect.Effect<void, ProviderError>
  /** Close stdin (pipes) or send EOF (Ctrl-D) on a TTY. */
  readonly closeStdin: Effect.Effect<void, ProviderError>
  /** Deliver a signal to the process group of the process (its whole tree for a kill). */
  readonly signal: (signal: string) => Effect.Effect<void, ProviderError | Unsupported>
  readonly resize: (cols: number, rows: number) => Effect.Effect<void, ProviderError | Unsupported>
}

/**
 * Runs `f` on each chunk of a process's events until they end, in a plain loop over `pull` (running
 * a Stream costs more than starting a short process does). A chunk's bytes are borrowed: valid
 * while `f` runs, so `f` copies what it keeps.
 */
export const forEachEventChunk = (
  process: BackendProcess,
  f: (events: Chunk.Chunk<ProcessEvent>) => Effect.Effect<void>
): Effect.Effect<void> => {
  const loop: Effect.Effect<void> = Effect.matchEffect(process.pull, {
    onFailure: () => Effect.void,
    onSuccess: (events) => Effect.zipRight(f(events), Effect.suspend(() => loop))
  })
  return loop
}

// `new Uint8Array(view)` copies; a Buffer's own `slice` would not (it is `subarray`).
const owned = (event: ProcessEvent): ProcessEvent => (event._tag === "Exit" ? event : { ...event, data: new Uint8Array(event.data) })

/**
 * A process's events as a Stream whose bytes are the consumer's own (each chunk copied as it is
 * pulled): safe with any combinator, buffering ones included, at the cost of one copy. For tests,
 * benchmarks and code that wants a Stream; the kernel reads with `forEachEventChunk`.
 */
export const ownedEvents = (process: BackendProcess): Stream.Stream<ProcessEvent> =>
  Stream.repeatEffectChunkOption(Effect.map(process.pull, Chunk.map(owned)))

/** Provider states the kernel distinguishes; anything else is the provider's own word. */
export type InstanceState = "running" | "stopped" | "paused" | "creating" | "gone" | (string & {})

/** One of our computers as the provider has it. */
export interface Instance {
  /** The provider's own id (container id, machine id, sandbox id, workspace name); never a host path. */
  readonly providerId: string
  readonly metadata: ComputerMetadata
  readonly state: InstanceState
  /** When the provider itself will end this computer (a plan's maximum runtime), epoch millis. */
  readonly endsAt?: number | undefined
}

/** A process as the computer that holds it keeps it (see HeldProcesses). */
export interface HeldProcess {
  readonly handle: number
  readonly pid: number
  /** What the kernel recorded when it started it (another server's kernel, maybe). */
  readonly command: string
  readonly cwd: string
  readonly tty: boolean
  readonly size: { readonly cols: number; readonly rows: number }
  /** Once it exited. */
  readonly exit: ExitInfo | undefined
  /** Its output ended too (children that outlived it may write until then). */
  readonly closed: boolean
  /** Why it ended, as a server noted it. */
  readonly note: string
  /** On the computer's clock, ms since the epoch. */
  readonly startedAt: number
  readonly endedAt: number | undefined
  /** Bytes each stream has produced. */
  readonly totals: { readonly stdout: number; readonly stderr: number }
}

/**
 * A computer that holds its own processes (an agent inside it, or the provider's process service):
 * their handles, records, exits and retained output outlive any server, and any server that
 * connects can follow them.
 */
export interface HeldProcesses {
  /** Who holds them now: another value after a reconnect means the earlier processes are gone. */
  readonly boot: string
  /** Bytes kept from the start and from the end of each stream; what falls between is counted. */
  readonly retention: { readonly headBytes: number; readonly tailBytes: number }
  /** Every process the computer keeps (running, and finished ones up to its own bound). */
  readonly list: Effect.Effect<ReadonlyArray<HeldProcess>, ProviderError>
  /** Follows one from the given offsets, for the Scope (its end lets go, the process runs on). */
  readonly attach: (
    handle: number,
    from: { readonly stdout: number; readonly stderr: number }
  ) => Effect.Effect<{ readonly process: BackendProcess; readonly held: HeldProcess }, ProviderError, Scope.Scope>
  /** Retained bytes from `from` (moved past what fell out: `start`), at most `most`. */
  readonly read: (
    handle: number,
    stream: "stdout" | "stderr",
    from: number,
    most: number
  ) => Effect.Effect<{ readonly start: number; readonly total: number; readonly data: Uint8Array }, ProviderError>
  /** Records why it ends, for every server that lists it. */
  readonly note: (handle: number, text: string) => Effect.Effect<void>
  /** This connection follows it already (it started it, or attached to it). */
  readonly following: (handle: number) => boolean
}

/** A running computer as the kernel uses it: where processes start. Scoped provider state. */
export interface Connection {
  /** The default working directory and HOME of processes. */
  readonly home: string
  readonly spawn: (spec: SpawnSpec) => Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope>
  /**
   * Completes when the computer goes away other than through the kernel (container removed from
   * outside, agent killed, machine stopped), with a sentence saying what happened. Never fails.
   */
  readonly lost: Effect.Effect<string>
  /** Present when the computer holds its processes: then they outlive this connection. */
  readonly held?: HeldProcesses | undefined
  /**
   * The computer's lifecycle lease for a step (restart, reset, delete), held for the Scope: one
   * server at a time, whichever server; a Conflict names the step another server is in.
   */
  readonly lease?: ((step: string) => Effect.Effect<void, ProviderError, Scope.Scope>) | undefined
  /**
   * A connection to 127.0.0.1:port inside the computer that needs no network in it (the agent's
   * relay): what preview URLs are served through. Absent where the backend has no such channel.
   */
  readonly openPort?: ((port: number) => Effect.Effect<Duplex, ProviderError>) | undefined
  /**
   * The provider's own public URL of a port inside the computer (an E2B host, a Modal tunnel), where
   * the provider serves it: preview URLs then hand out this URL instead of the server's proxy. The
   * kernel cannot revoke it; the provider ends it with the computer. `InvalidInput` for a port the
   * provider does not serve (a Modal port not declared at creation).
   */
  readonly publicUrl?: ((port: number) => Effect.Effect<string, ProviderError | InvalidInput>) | undefined
}

/** Lease renewal or keep-alive that the kernel schedules (with `Clock`) while it holds a computer. */
export interface Renewal {
  /** How often to renew. */
  readonly everyMs: number
  /** The lease's length from a renewal (written into `metadata.expires` at create). */
  readonly leaseMs: number
  /** Extends the computer's life at the provider until `until` (epoch millis). */
  readonly renew: (instance: Instance, until: number) => Effect.Effect<Instance, ProviderError>
}

/**
 * A backend's checkpoints: a running computer's filesystem captured under the kernel's id, and new
 * computers made from it. Running processes are not captured. `stored` is the provider's name of
 * the copy (an image id, a directory name): what `restore` and `remove` take.
 */
export interface Checkpointing {
  /**
   * Captures the filesystem of a running computer; `note` says how consistent the copy is. `owner`
   * (the server taking it) is recorded with the copy where the provider can, for `sweep`.
   */
  readonly capture: (instance: Instance, id: string, owner: Owner) => Effect.Effect<{ readonly stored: string; readonly note: string }, ProviderError>
  /** Creates and starts a computer from a checkpoint, as `create` does (its base image stays the backend's). */
  readonly restore: (stored: string, metadata: ComputerMetadata) => Effect.Effect<Instance, ProviderError>
  /** Removes the copy (also when it is already gone); computers made from it are not affected. */
  readonly remove: (stored: string) => Effect.Effect<void, ProviderError>
  /**
   * Removes copies a crashed server left (their recorded owner is not `alive`), a bounded number
   * per call; answers how many. Only the provider's own, labelled copies are looked at.
   */
  readonly sweep?: ((alive: (owner: Owner) => boolean) => Effect.Effect<number, ProviderError>) | undefined
}

/** Which of our computers to find. */
export interface Query {
  readonly id?: string | undefined
  readonly temporary?: boolean | undefined
}

/**
 * A place where computers run: the host sandbox, a container engine, a cloud, WASM. A stateless
 * provider: small effects over the provider's API. The kernel (ComputerActor, the registry and the
 * reaper) owns lifecycles, identity, sessions, renewal and reaping.
 */
export class Backend extends Context.Tag("kilntainers/services/Backend")<Backend, {
  readonly name: string
  readonly capabilities: Capabilities
  /** How this provider spells label keys (the encoding lives in ComputerMetadata). */
  readonly labelStyle: LabelStyle
  /** The base image of new computers. */
  readonly image: string
  /** Our computers the provider knows about (by label; a name lookup where labels cannot filter). */
  readonly find: (query: Query) => Effect.Effect<ReadonlyArray<Instance>, ProviderError>
  /** Creates and starts a computer. A taken name is a `Conflict`. */
  readonly create: (metadata: ComputerMetadata) => Effect.Effect<Instance, ProviderError>
  /** Makes a found computer run again (start a stopped container, resume a paused sandbox). */
  readonly start: (instance: Instance) => Effect.Effect<Instance, ProviderError>
  /** Connects to a running computer: the agent, poller or client that runs its processes. */
  readonly connect: (instance: Instance) => Effect.Effect<Connection, ProviderError, Scope.Scope>
  /**
   * Restarts keeping the writable state. The kernel has ended the computer's processes and closed
   * its connection first, and connects again afterwards.
   */
  readonly restart: (instance: Instance) => Effect.Effect<Instance, ProviderError | Unsupported>
  /** Removes the computer for good (also when it is already gone). */
  readonly remove: (instance: Instance) => Effect.Effect<void, ProviderError>
  /**
   * Gives a warm pool's computer its real id, so that `find` answers it under that id from now on
   * (Docker: a record in the state directory, or a container rename without one; host: the
   * workspace directory and record renamed). Labels that cannot change keep the pool's mark; the
   * kernel knows the rest. Without it, no warm pool.
   */
  readonly adopt?: ((instance: Instance, metadata: ComputerMetadata) => Effect.Effect<Instance, ProviderError>) | undefined
  /** A permanent computer is released by its last holder (E2B pauses it; most do nothing). */
  readonly suspend?: ((instance: Instance) => Effect.Effect<void, ProviderError>) | undefined
  readonly renewal?: Renewal | undefined
  /** Checkpoints and forks; present exactly when `capabilities.checkpoints` is. */
  readonly checkpoints?: Checkpointing | undefined
  /**
   * Variables every process of this backend's computers gets, after the defaults and before
   * `--env` and the call's own (host and Docker with an egress allowlist: the proxy and the CA
   * bundle). Never a secret: processes may print it.
   */
  readonly environment?: Readonly<Record<string, string>> | undefined
}>() {}
