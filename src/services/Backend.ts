import type { Effect, Scope, Stream } from "effect"
import { Context } from "effect"
import type { BackendError, SpawnFailed, Unsupported } from "../domain/Errors.js"

/** What a backend can do; the runtime reads these and answers honestly when one is missing. */
export interface Capabilities {
  readonly pty: boolean
  readonly stdin: boolean
  readonly signals: boolean
  readonly restart: boolean
  readonly factoryReset: boolean
  readonly persistence: boolean
  readonly files: boolean
  readonly networkControl: boolean
}

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
}

/** How a process ended. `signal` is a name such as `SIGKILL`. */
export interface ExitInfo {
  readonly exitCode: number | null
  readonly signal: string | null
}

/**
 * Events of a running process, in order. `Exit` comes after every byte the process itself wrote;
 * output of children that outlive it may follow until the stream ends.
 */
export type ProcessEvent =
  | { readonly _tag: "Stdout"; readonly data: Uint8Array }
  | { readonly _tag: "Stderr"; readonly data: Uint8Array }
  | { readonly _tag: "Exit"; readonly exit: ExitInfo }

/** A process running in a backend. Its resources belong to the Scope it was spawned in. */
export interface BackendProcess {
  /** The process id inside the computer, when the backend knows it. */
  readonly pid: number | null
  /**
   * Every event exactly once; ends when the process and all holders of its output are gone.
   * Aliasing rule: the bytes of a pulled chunk's events are valid until the next pull — a backend
   * may reuse that memory — so a consumer copies what it keeps before pulling again.
   */
  readonly events: Stream.Stream<ProcessEvent>
  readonly write: (data: Uint8Array) => Effect.Effect<void, BackendError>
  /** Close stdin (pipes) or send EOF (Ctrl-D) on a TTY. */
  readonly closeStdin: Effect.Effect<void, BackendError>
  /** Deliver a signal to the process group of the process. */
  readonly signal: (signal: string) => Effect.Effect<void, BackendError | Unsupported>
  readonly resize: (cols: number, rows: number) => Effect.Effect<void, BackendError | Unsupported>
}

/**
 * A computer opened by a backend. Closing its Scope ends all of its processes and releases the
 * computer: a temporary one is removed, a permanent one is left for a later `open`.
 */
export interface BackendComputer {
  /** The provider's id (container id, machine id, workspace path, …). */
  readonly providerId: string
  /** The default working directory and HOME of processes. */
  readonly home: string
  /** The base image the computer was made from, when the backend has one. */
  readonly image?: string | undefined
  readonly spawn: (spec: SpawnSpec) => Effect.Effect<BackendProcess, SpawnFailed | BackendError, Scope.Scope>
  /**
   * Restart, keeping the writable state. The runtime has ended the computer's processes first;
   * processes spawned before must not be touched afterwards.
   */
  readonly restart: Effect.Effect<void, BackendError | Unsupported>
  /** Recreate from the base image recorded on the computer, erasing its state. */
  readonly factoryReset: Effect.Effect<void, BackendError | Unsupported>
  /** Remove the computer for good, temporary or not (closing the Scope afterwards must not fail). */
  readonly destroy: Effect.Effect<void, BackendError>
  /**
   * Completes when the computer goes away other than through this handle (container removed
   * from outside, agent killed), with a sentence saying what happened. Never fails.
   */
  readonly lost: Effect.Effect<string>
}

export interface ComputerSpec {
  readonly id: string
  readonly temporary: boolean
}

/** A computer the provider knows about, found by its labels/metadata. */
export interface ProviderComputer {
  readonly id: string
  readonly temporary: boolean
  readonly providerId: string
  readonly image: string
  /** ISO time. */
  readonly createdAt: string
  /** The provider's state (running, exited, stopped, …). */
  readonly state: string
}

/** A place where computers run: host sandbox, Docker, a cloud, WASM. */
export class Backend extends Context.Tag("kilntainers/services/Backend")<Backend, {
  readonly name: string
  readonly capabilities: Capabilities
  /**
   * Open a computer: attach to the provider's computer with this id if there is one (it must be
   * ours, and its `temporary` must match), else create it. It is released with the Scope.
   */
  readonly open: (spec: ComputerSpec) => Effect.Effect<BackendComputer, BackendError, Scope.Scope>
  /** The computers of this backend the provider knows about (ours, by label). */
  readonly list: Effect.Effect<ReadonlyArray<ProviderComputer>, BackendError>
}>() {}
