/**
 * What the Modal backend needs from Modal, as an interface of our own: sandboxes made from a
 * registry image, found again by name or tags, commands run in them with streamed stdio (or a PTY),
 * and their end. ModalBackend.ts talks only to this; `sdk` implements it with Modal's JavaScript SDK
 * (`modal@0.11.1` — NOT the unrelated `modal` package on npm's `latest` tag), and tests use the fake
 * in test/support/ModalFake.ts (Modal's gRPC wire API is not public, so there is no protocol fake).
 *
 * Everything the SDK offers beyond this (volumes, tunnels, snapshots, filesystem API, secrets) is
 * left out on purpose. The SDK's PTY is fixed: `exec(…, { pty: true })` gives an 80x24 terminal with
 * TERM=xterm-256color and there is no resize call; the backend sets and changes the size with
 * `stty` inside the sandbox instead.
 */
import { Effect, Option, Schema, Stream } from "effect"
import type { App, Image, Sandbox, SandboxCreateParams, SandboxExecParams } from "modal"
import { AlreadyExistsError, ClientClosedError, ModalClient, NotFoundError, SandboxTimeoutError } from "modal"

/** A failed Modal call. `kind` lets the backend tell "not there" from real failures. */
export class ModalGatewayError extends Schema.TaggedError<ModalGatewayError>()("ModalGatewayError", {
  operation: Schema.String,
  kind: Schema.Literal("NotFound", "AlreadyExists", "Terminated", "Timeout", "Provider"),
  detail: Schema.String
}) {
  override get message() {
    return `${this.operation}: ${this.detail}`
  }
}

/** A new sandbox: `sandboxes.create(app, images.fromRegistry(image), …)`. */
export interface CreateSandboxRequest {
  readonly appName: string
  /** A registry image reference such as "debian:bookworm-slim". */
  readonly image: string
  readonly cpu: number
  readonly memoryMiB: number
  readonly gpu: string | undefined
  readonly region: string | undefined
  /** Maximum lifetime; Modal terminates the sandbox after it (at most 24 h). */
  readonly timeoutMs: number
  readonly blockNetwork: boolean
  /** Unique among the running sandboxes of the App. */
  readonly name: string
  readonly tags: Readonly<Record<string, string>>
}

/** A command in a sandbox: `sandbox.exec(argv, …)`. */
export interface ExecRequest {
  readonly argv: ReadonlyArray<string>
  /** A PTY (fixed 80x24; all output on stdout) instead of pipes. */
  readonly pty: boolean
  readonly workdir?: string | undefined
  /** Added to the sandbox's environment (Modal merges; it cannot clear). */
  readonly env?: Readonly<Record<string, string>> | undefined
  /** 0 or absent: no timeout. */
  readonly timeoutMs?: number | undefined
}

/** A running command. Both output streams end when the command and every holder of its pipes are gone. */
export interface ExecHandle {
  readonly stdout: Stream.Stream<Uint8Array, ModalGatewayError>
  readonly stderr: Stream.Stream<Uint8Array, ModalGatewayError>
  readonly writeStdin: (data: Uint8Array) => Effect.Effect<void, ModalGatewayError>
  readonly closeStdin: Effect.Effect<void, ModalGatewayError>
  /** The command's exit code (128+n when a signal ended it). */
  readonly wait: Effect.Effect<number, ModalGatewayError>
}

/** A sandbox we hold a handle to. */
export interface SandboxHandle {
  readonly sandboxId: string
  readonly exec: (request: ExecRequest) => Effect.Effect<ExecHandle, ModalGatewayError>
  readonly tags: Effect.Effect<Readonly<Record<string, string>>, ModalGatewayError>
  /** null while running, else the sandbox's exit code. */
  readonly poll: Effect.Effect<number | null, ModalGatewayError>
  /** Completes when the sandbox has ended (terminated, timed out, or its main process ended). */
  readonly wait: Effect.Effect<number, ModalGatewayError>
  readonly terminate: Effect.Effect<void, ModalGatewayError>
  /** Drops local resources of the handle; the sandbox keeps running. */
  readonly detach: Effect.Effect<void>
}

export interface ModalGatewayService {
  readonly create: (request: CreateSandboxRequest) => Effect.Effect<SandboxHandle, ModalGatewayError>
  /** The running sandbox of that name in the App, if any. */
  readonly fromName: (appName: string, name: string) => Effect.Effect<Option.Option<SandboxHandle>, ModalGatewayError>
  /** Running sandboxes of the App that carry all of these tags. */
  readonly list: (
    appName: string,
    tags: Readonly<Record<string, string>>
  ) => Effect.Effect<ReadonlyArray<SandboxHandle>, ModalGatewayError>
  /** Closes the client (connections); sandboxes keep running. */
  readonly close: Effect.Effect<void>
}

// ---- the SDK adapter ---------------------------------------------------------------------------

export interface SdkOptions {
  readonly tokenId: string
  readonly tokenSecret: string
  /** Modal environment; the profile's default when absent. */
  readonly environment?: string | undefined
}

/** The part of `ModalClient` the adapter uses: a real client, or a recording stub in tests. */
export interface ModalClientLike {
  readonly apps: { readonly fromName: (name: string, params?: { createIfMissing?: boolean }) => Promise<App> }
  readonly images: { readonly fromRegistry: (tag: string) => Image }
  readonly sandboxes: {
    readonly create: (app: App, image: Image, params?: SandboxCreateParams) => Promise<Sandbox>
    readonly fromName: (appName: string, name: string) => Promise<Sandbox>
    readonly list: (params?: { appId?: string; tags?: Record<string, string> }) => AsyncIterable<Sandbox>
  }
  readonly close: () => void
}

/** The ModalClient constructor parameters (tokens passed explicitly, never read from the environment here). */
export const clientParams = (options: SdkOptions) => ({
  tokenId: options.tokenId,
  tokenSecret: options.tokenSecret,
  ...(options.environment === undefined ? {} : { environment: options.environment })
})

/** `sandboxes.create` parameters for a request. */
export const createParams = (request: CreateSandboxRequest): SandboxCreateParams => ({
  cpu: request.cpu,
  memoryMiB: request.memoryMiB,
  timeoutMs: request.timeoutMs,
  blockNetwork: request.blockNetwork,
  name: request.name,
  tags: { ...request.tags },
  ...(request.gpu === undefined ? {} : { gpu: request.gpu }),
  ...(request.region === undefined ? {} : { regions: [request.region] })
})

/** `sandbox.exec` parameters for a request: always binary streams, both piped. */
export const execParams = (request: ExecRequest): SandboxExecParams & { mode: "binary" } => ({
  mode: "binary",
  stdout: "pipe",
  stderr: "pipe",
  pty: request.pty,
  ...(request.workdir === undefined ? {} : { workdir: request.workdir }),
  ...(request.env === undefined ? {} : { env: { ...request.env } }),
  ...(request.timeoutMs === undefined ? {} : { timeoutMs: request.timeoutMs })
})

const describe = (error: unknown): string => {
  const message = error instanceof Error ? error.message : String(error)
  // Never echo anything that looks like a credential back.
  return message.replace(/(a[sk]-[A-Za-z0-9]{6})[A-Za-z0-9]+/g, "$1…").trim() || "unknown error"
}

/** Maps an SDK error to a ModalGatewayError. */
export const fromSdkError = (operation: string) => (error: unknown): ModalGatewayError =>
  new ModalGatewayError({
    operation,
    kind: error instanceof NotFoundError
      ? "NotFound"
      : error instanceof AlreadyExistsError
      ? "AlreadyExists"
      : error instanceof SandboxTimeoutError
      ? "Timeout"
      : error instanceof ClientClosedError
      ? "Terminated"
      : "Provider",
    detail: describe(error)
  })

const call = <A>(operation: string, run: () => Promise<A>) =>
  Effect.tryPromise({ try: run, catch: fromSdkError(operation) })

const fromReadable = (operation: string, stream: ReadableStream<Uint8Array>) =>
  Stream.fromReadableStream({ evaluate: () => stream, onError: fromSdkError(operation) })

const sandboxHandle = (sandbox: Sandbox): SandboxHandle => ({
  sandboxId: sandbox.sandboxId,
  exec: (request) =>
    call("start a command", () => sandbox.exec([...request.argv], execParams(request))).pipe(
      Effect.map((command): ExecHandle => ({
        stdout: fromReadable("read stdout", command.stdout),
        stderr: fromReadable("read stderr", command.stderr),
        writeStdin: (data) => call("write stdin", () => command.stdin.writeBytes(data)),
        closeStdin: call("close stdin", () => command.stdin.close()),
        wait: call("wait for the command", () => command.wait())
      }))
    ),
  tags: call("read the sandbox's tags", () => sandbox.getTags()),
  poll: call("poll the sandbox", () => sandbox.poll()),
  wait: call("wait for the sandbox", () => sandbox.wait()),
  terminate: call("terminate the sandbox", () => sandbox.terminate()),
  detach: Effect.sync(() => {
    try {
      sandbox.detach()
    } catch {
      // already detached
    }
  })
})

/** The adapter over a client (a real `ModalClient`, or a stub that records the calls). */
export const fromClient = (client: ModalClientLike): ModalGatewayService => {
  const apps = new Map<string, Promise<App>>()
  const app = (name: string) =>
    call(`look up the Modal app '${name}'`, () => {
      let found = apps.get(name)
      if (found === undefined) {
        found = client.apps.fromName(name, { createIfMissing: true })
        apps.set(name, found)
        found.catch(() => apps.delete(name))
      }
      return found
    })
  return {
    create: (request) =>
      Effect.gen(function*() {
        const found = yield* app(request.appName)
        const image = client.images.fromRegistry(request.image)
        const sandbox = yield* call(`create the sandbox ${request.name}`, () =>
          client.sandboxes.create(found, image, createParams(request)))
        return sandboxHandle(sandbox)
      }),
    fromName: (appName, name) =>
      call(`look up the sandbox ${name}`, () => client.sandboxes.fromName(appName, name)).pipe(
        Effect.map((sandbox) => Option.some(sandboxHandle(sandbox))),
        Effect.catchIf((error) => error.kind === "NotFound", () => Effect.succeed(Option.none<SandboxHandle>()))
      ),
    list: (appName, tags) =>
      Effect.gen(function*() {
        const found = yield* app(appName)
        return yield* call("list sandboxes", async () => {
          const sandboxes: Array<SandboxHandle> = []
          for await (const sandbox of client.sandboxes.list({ appId: found.appId, tags: { ...tags } })) {
            sandboxes.push(sandboxHandle(sandbox))
          }
          return sandboxes
        })
      }),
    close: Effect.sync(() => client.close())
  }
}

/** The adapter over Modal's SDK, authenticated with these tokens. */
export const sdk = (options: SdkOptions): Effect.Effect<ModalGatewayService, ModalGatewayError> =>
  Effect.try({
    try: () => fromClient(new ModalClient(clientParams(options))),
    catch: fromSdkError("connect to Modal")
  })
