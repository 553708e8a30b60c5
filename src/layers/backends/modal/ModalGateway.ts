/**
 * What the Modal backend needs from Modal, as an interface of our own: sandboxes made from a
 * registry image, found again by name or tags, commands run in them with streamed stdio (or a PTY),
 * and their end; failures are ProviderErrors (ModalError.ts reads the SDK's). `ModalSdk.ts`
 * implements it with Modal's JavaScript SDK (`modal@0.11.1` — NOT the unrelated `modal` package on
 * npm's `latest` tag); the tests drive that implementation against a local gRPC fake of Modal
 * (test/support/ModalFake.ts), so the SDK's own checks run in them.
 *
 * Filesystem snapshots are in (`snapshotFilesystem`, sandboxes made from the image it gives,
 * `deleteImage`) for checkpoints, and tunnels for preview URLs; everything else the SDK offers
 * (volumes, memory snapshots, filesystem API, secrets) is left out on purpose. The SDK's PTY is fixed: `exec(…, { pty: true })` gives an 80x24 terminal with
 * TERM=xterm-256color and there is no resize call; the backend sets and changes the size with
 * `stty` inside the sandbox instead. The SDK's `sandbox.wait()` is not offered: it polls until the
 * sandbox ends and cannot be stopped, so a closed computer would leave it behind; `poll` on a
 * schedule that the connection's scope owns replaces it.
 */
import type * as Effect from "effect/Effect"
import type * as Option from "effect/Option"
import type * as Stream from "effect/Stream"
import type { ProviderError } from "../../../domain/Errors.js"

/** A new sandbox: `sandboxes.create(app, images.fromRegistry(image), …)`. */
export interface CreateSandboxRequest {
  readonly appName: string
  /** A registry image reference such as "debian:bookworm-slim". */
  readonly image: string
  /** A Modal image id (a filesystem snapshot) to boot from instead of `image`: `images.fromId`. */
  readonly imageId?: string | undefined
  readonly cpu: number
  readonly memoryMiB: number
  readonly gpu: string | undefined
  readonly region: string | undefined
  /** Maximum lifetime; Modal terminates the sandbox after it (at most 24 h). */
  readonly timeoutMs: number
  readonly blockNetwork: boolean
  /** Only these are reachable (an ALLOWLIST network access); never with `blockNetwork`. */
  readonly outbound?: { readonly domains: ReadonlyArray<string>; readonly cidrs: ReadonlyArray<string> } | undefined
  /** Unique among the running sandboxes of the App; a valid Modal object name. */
  readonly name: string
  readonly tags: Readonly<Record<string, string>>
  /** Ports Modal serves through TLS tunnels (`encryptedPorts`): only these have preview URLs. */
  readonly tunnelPorts?: ReadonlyArray<number> | undefined
}

/** A command in a sandbox: `sandbox.exec(argv, …)`. */
export interface ExecRequest {
  /** At most 64 KiB in total (Modal's limit on an exec's arguments). */
  readonly argv: ReadonlyArray<string>
  /** A PTY (fixed 80x24; all output on stdout) instead of pipes. */
  readonly pty: boolean
  readonly workdir?: string | undefined
  /** Added to the sandbox's environment (Modal merges; it cannot clear). Keys: [A-Za-z_][A-Za-z0-9_]*. */
  readonly env?: Readonly<Record<string, string>> | undefined
}

/** A running command. Both output streams end when the command and every holder of its pipes are gone. */
export interface ExecHandle {
  readonly stdout: Stream.Stream<Uint8Array, ProviderError>
  readonly stderr: Stream.Stream<Uint8Array, ProviderError>
  /** Writes are serialised: concurrent callers wait their turn (the SDK's writer allows one at a time). */
  readonly writeStdin: (data: Uint8Array) => Effect.Effect<void, ProviderError>
  readonly closeStdin: Effect.Effect<void, ProviderError>
  /** The command's exit code (128+n when a signal ended it). Call it once the output has ended. */
  readonly wait: Effect.Effect<number, ProviderError>
}

/** A sandbox we hold a handle to. */
export interface SandboxHandle {
  readonly sandboxId: string
  readonly exec: (request: ExecRequest) => Effect.Effect<ExecHandle, ProviderError>
  readonly tags: Effect.Effect<Readonly<Record<string, string>>, ProviderError>
  /** null while running, else the sandbox's exit code (137 terminated, 124 timed out). */
  readonly poll: Effect.Effect<number | null, ProviderError>
  readonly terminate: Effect.Effect<void, ProviderError>
  /** The sandbox's tunnels: the public https URL of each port declared at creation. */
  readonly tunnels: Effect.Effect<ReadonlyMap<number, string>, ProviderError>
  /**
   * Snapshots the running sandbox's filesystem into a new Modal image (`sandbox.snapshotFilesystem`);
   * answers its id. Modal refuses a sandbox that is not running.
   */
  readonly snapshotFilesystem: Effect.Effect<string, ProviderError>
  /** Drops local resources of the handle; the sandbox keeps running. */
  readonly detach: Effect.Effect<void>
}

export interface ModalGatewayService {
  /**
   * Creates a sandbox. Interrupting the call (a timeout) does not leave it behind: the sandbox that
   * the SDK may still be waiting to schedule is terminated, now or when the SDK returns it.
   */
  readonly create: (request: CreateSandboxRequest) => Effect.Effect<SandboxHandle, ProviderError>
  /** A handle to a sandbox by its id (no call to Modal: the sandbox may have ended, which its calls then tell). */
  readonly fromId: (sandboxId: string) => Effect.Effect<SandboxHandle, ProviderError>
  /** The running sandbox of that name in the App, if any. */
  readonly fromName: (appName: string, name: string) => Effect.Effect<Option.Option<SandboxHandle>, ProviderError>
  /** Running sandboxes of the App that carry all of these tags. */
  readonly list: (
    appName: string,
    tags: Readonly<Record<string, string>>
  ) => Effect.Effect<ReadonlyArray<SandboxHandle>, ProviderError>
  /** Deletes an image by id (`images.delete`); an unknown one is a NotFound. */
  readonly deleteImage: (imageId: string) => Effect.Effect<void, ProviderError>
  /** Closes the client (connections); sandboxes keep running. */
  readonly close: Effect.Effect<void>
}
