import type * as Effect from "effect/Effect"
import * as Context from "effect/Context"
import * as Schema from "effect/Schema"
import type { Duplex } from "node:stream"
import type {
  AccessDenied,
  CheckpointNotFound,
  QuotaExceeded,
  ComputerNotFound,
  ComputerUnavailable,
  InvalidInput,
  ProviderError,
  SpawnFailed,
  Unsupported
} from "../domain/Errors.js"
import type { Capabilities, ExitInfo, HeldProcess, SpawnSpec } from "./Backend.js"
import type { OutputLimit, ProcessHandle } from "./Processes.js"

/** What `computer_list` shows of one computer. */
export const ComputerInfo = Schema.Struct({
  computer_id: Schema.String,
  sandbox_id: Schema.String.annotations({ description: "The provider's id of the computer" }),
  backend: Schema.String,
  state: Schema.String.annotations({
    description: "creating, running, restarting, resetting, lost, deleting, or the provider's state of a computer not attached here"
  }),
  temporary: Schema.Boolean,
  image: Schema.String,
  created_at: Schema.String,
  processes: Schema.Number.annotations({ description: "Live processes" }),
  ends_at: Schema.optional(Schema.String.annotations({
    description: "When the provider itself will end this computer (a plan's maximum runtime)"
  })),
  warning: Schema.optional(Schema.String)
})
export type ComputerInfo = typeof ComputerInfo.Type

/** What computer_list says of the warm pool. */
export const PoolStatus = Schema.Struct({
  size: Schema.Number.annotations({ description: "Computers the pool keeps ready" }),
  ready: Schema.Number,
  starting: Schema.Number.annotations({ description: "Being prepared now" }),
  handedOut: Schema.Number.annotations({ description: "Handed out since the server started" })
})
export type PoolStatus = typeof PoolStatus.Type

/** A checkpoint: a computer's filesystem at one moment, from which new computers are made. */
export const CheckpointInfo = Schema.Struct({
  checkpoint_id: Schema.String,
  name: Schema.optional(Schema.String),
  computer_id: Schema.String.annotations({ description: "The computer it was taken of" }),
  backend: Schema.String,
  created_at: Schema.String,
  shared: Schema.Boolean.annotations({ description: "Other MCP sessions may fork it too" }),
  note: Schema.String.annotations({ description: "What was captured, and what was not" })
})
export type CheckpointInfo = typeof CheckpointInfo.Type

/** What computer_checkpoint asks for. */
export interface CheckpointRequest {
  readonly computer_id: string
  readonly name?: string | undefined
  /** Other sessions may fork it (private to its session otherwise, like a temporary computer). */
  readonly shared?: boolean | undefined
}

/** Which computer a call targets: the session's default when no id is given. */
export interface ComputerRequest {
  readonly computer_id?: string | undefined
  readonly temporary?: boolean | undefined
  /** A new computer is made from this checkpoint (computer_create only). */
  readonly from_checkpoint?: string | undefined
  /** A temporary computer other sessions may use too (permanent computers always may). */
  readonly shared?: boolean | undefined
}

/** What the process supervisor asks a computer to start. */
export interface ProcessRequest {
  readonly id: string
  readonly command: string
  readonly spec: SpawnSpec
  readonly headBytes: number
  readonly tailBytes: number
  readonly mailboxCapacity: number
  /** Stop it once its stdout and stderr together pass this (sandbox_exec's --output-limit). */
  readonly outputLimit?: OutputLimit | undefined
  /** Called once, when the process has exited and its exit is recorded. */
  readonly onExit: (process: ProcessHandle) => Effect.Effect<void>
  /** Called once it runs, with its id (the computer's handle where it holds its processes, else `id`). */
  readonly onStart?: ((id: string) => Effect.Effect<void>) | undefined
}

/** How the processes a computer holds that this server did not start are followed (ComputerHandle.follow). */
export interface FollowOptions {
  readonly mailboxCapacity: number
  /** Called once for each, when it has exited and its exit is recorded. */
  readonly onExit: (process: ProcessHandle) => Effect.Effect<void>
}


/** The whole result of a short helper command (file transfer), not listed as a process. */
export interface RunResult {
  readonly exit: ExitInfo
  readonly stdout: Uint8Array
  readonly stderr: string
  /** stdout went past the limit asked for. */
  readonly overflow: boolean
}

export type ComputerError = InvalidInput | AccessDenied | ComputerNotFound | ComputerUnavailable | ProviderError | Unsupported

export type CheckpointError = ComputerError | CheckpointNotFound | QuotaExceeded

/** A computer as the other services use it (implemented by the kernel's ComputerActor). */
export interface ComputerHandle {
  readonly id: string
  readonly temporary: boolean
  readonly backendName: string
  /** Unique per computer for the life of the server: a deleted computer's successor of the same id is another incarnation. */
  readonly incarnation: number
  /** HOME and the default working directory of processes. */
  readonly home: string
  /** The provider's id of the computer now (it changes with a factory reset on some providers). */
  readonly providerId: Effect.Effect<string>
  /** May this session use (read, signal, change) this computer? */
  readonly visibleTo: (session: string) => boolean
  /** Starts a process owned by this computer (not by the caller); returns once it runs. */
  readonly spawn: (request: ProcessRequest) => Effect.Effect<ProcessHandle, SpawnFailed | ComputerUnavailable | ProviderError>
  /** Runs a helper command to completion, stdin given, stdout kept up to `maxBytes`. Not listed in ps. */
  readonly run: (spec: SpawnSpec, stdin: Uint8Array | undefined, maxBytes: number) => Effect.Effect<RunResult, SpawnFailed | ComputerUnavailable | ProviderError>
  /**
   * The processes the computer holds that this server does not follow yet (another server's, or this
   * one's before it restarted), followed from now on; none where the computer does not hold them.
   */
  readonly follow: (options: FollowOptions) => Effect.Effect<ReadonlyArray<ProcessHandle>, ComputerUnavailable | ProviderError>
  /**
   * The computer's own record of a process (`pN`): why a server noted it ended, and when, on the
   * computer's clock — what every server reads alike (a task's answer). None where it holds none.
   */
  readonly heldRecord: (processId: string) => Effect.Effect<HeldProcess | undefined, ComputerUnavailable | ProviderError>
  /** A connection to 127.0.0.1:port inside the computer, without network in it (preview URLs); `Unsupported` where the backend has none. */
  readonly openPort: (port: number) => Effect.Effect<Duplex, ComputerUnavailable | ProviderError | Unsupported>
  /** The provider's own URL of a port (E2B, Modal), or undefined where previews go through `openPort`. */
  readonly publicUrl: (port: number) => Effect.Effect<string | undefined, ComputerUnavailable | ProviderError | InvalidInput>
  /** A warning for the agent while the provider's end of life for this computer is near (E2B's plan cap). */
  readonly warning: Effect.Effect<string | undefined>
  /** Completes when the computer is gone from this server (deleted, released, server shutdown). */
  readonly closed: Effect.Effect<void>
  /** Completes when the computer has been deleted. */
  readonly deleted: Effect.Effect<void>
}

/** The named computers of a server, and the sessions that hold them. */
export class Computers extends Context.Tag("kilntainers/services/Computers")<Computers, {
  /** The computer a session's call targets, created (or re-attached) on first use. */
  readonly resolve: (session: string, request: ComputerRequest) => Effect.Effect<ComputerHandle, ComputerError>
  /** computer_create: create or attach by id; without an id, always a new computer (`from_checkpoint`: a fork). */
  readonly create: (session: string, request: ComputerRequest) => Effect.Effect<ComputerHandle, CheckpointError>
  /** An existing computer (attached, or known to the provider and attached now). */
  readonly get: (session: string, id: string) => Effect.Effect<ComputerHandle, ComputerError>
  /** The computers this server has open that the session may use (none is opened for it). */
  readonly attached: (session: string) => Effect.Effect<ReadonlyArray<ComputerHandle>>
  readonly restart: (session: string, id: string) => Effect.Effect<ComputerHandle, ComputerError>
  readonly factoryReset: (session: string, id: string) => Effect.Effect<ComputerHandle, ComputerError>
  readonly delete: (session: string, id: string) => Effect.Effect<void, ComputerError>
  /**
   * The computers a session may see: the ones it holds, shared ones, and permanent ones (also those
   * only the provider still keeps). Other sessions' private temporary computers are not listed.
   */
  readonly list: (session: string) => Effect.Effect<ReadonlyArray<ComputerInfo>, ProviderError>
  /** The warm pool, when there is one. */
  readonly pool: Effect.Effect<PoolStatus | undefined>
  /** What of a computer outlives this server, in a sentence (Backend.survivalOf). */
  readonly serverExit: string
  /** What the backend's computers can do (computer_list names what they cannot). */
  readonly capabilities: Capabilities
  /** Captures a computer's filesystem as a new checkpoint of this session (counted against --max-checkpoints). */
  readonly checkpoint: (session: string, request: CheckpointRequest) => Effect.Effect<CheckpointInfo, CheckpointError>
  /** The checkpoints a session may fork: its own and shared ones. */
  readonly checkpoints: (session: string) => Effect.Effect<ReadonlyArray<CheckpointInfo>>
  /** Deletes a checkpoint of this session (computers made from it stay). */
  readonly deleteCheckpoint: (session: string, id: string) => Effect.Effect<void, CheckpointError>
  /** A session ended: its temporary computers that nobody else holds, and its checkpoints, are removed. */
  readonly release: (session: string) => Effect.Effect<void>
}>() {}
