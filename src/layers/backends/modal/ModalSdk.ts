/**
 * ModalGateway over Modal's JavaScript SDK (`modal@0.11.1`).
 *
 * What this adapter adds to the SDK:
 * - requests are checked against Modal's limits before calling (names, the 64 KiB on an exec's
 *   arguments, environment keys, the allowlist's CIDRs and domains), so a refusal is a clear
 *   `Invalid` error, not a remote one;
 * - a sandbox with a network policy (no network, or an allowlist) is created on Modal's V1 backend.
 *   The SDK sends every create without a GPU to V2 when its profile says so (its default), and it
 *   lists no network policy among what V2 sandboxes support (`experimentalCreate`); Modal documents
 *   `block_network` and the allowlists for V1. The SDK decides on the profile's `sandboxV2` when
 *   `create` is called, before its first await, so the flag is off for exactly that call; a client
 *   without that flag (another SDK) is refused such a create rather than trusted with it;
 * - stdin writes of one command are serialised: the SDK's writer is a WritableStream that throws
 *   when a second write starts while one is in flight (a terminal's replies and the agent's input
 *   can write at the same time), and the chain is kept at the promise level so that an interrupted
 *   write still holds its turn until the SDK has finished with it;
 * - a create that we give up on is cancelled: the SDK may wait up to 21 minutes for Modal to
 *   schedule a sandbox (a GPU one), far past our call's timeout. On interruption the sandbox is
 *   looked up by its name and terminated if it carries the tags we sent, and should the SDK return
 *   it later anyway, it is terminated then;
 * - the SDK's logger goes to our log (stderr), never to stdout (its default logger prints debug and
 *   info lines with console.log, which would corrupt the stdio protocol).
 */
import * as Effect from "effect/Effect"
import * as LogLevel from "effect/LogLevel"
import * as Option from "effect/Option"
import * as Runtime from "effect/Runtime"
import * as Stream from "effect/Stream"
import type { App, Image, Logger, Sandbox, SandboxCreateParams, SandboxExecParams } from "modal"
import { ModalClient } from "modal"
import { isIP } from "node:net"
import type { ProviderError } from "../../../domain/Errors.js"
import type { CreateSandboxRequest, ExecHandle, ExecRequest, ModalGatewayService, SandboxHandle } from "./ModalGateway.js"
import { fromSdkError, modalError, redact } from "./ModalError.js"
import { validObjectName } from "./SandboxIdentity.js"

export interface SdkOptions {
  readonly tokenId: string
  readonly tokenSecret: string
  /** Modal environment; the profile's default when absent. */
  readonly environment?: string | undefined
}

/** The part of `ModalClient` the adapter uses. */
export interface ModalClientLike {
  readonly apps: { readonly fromName: (name: string, params?: { createIfMissing?: boolean }) => Promise<App> }
  readonly images: {
    readonly fromRegistry: (tag: string) => Image
    readonly fromId: (imageId: string) => Promise<Image>
    readonly delete: (imageId: string) => Promise<void>
  }
  readonly sandboxes: {
    readonly create: (app: App, image: Image, params?: SandboxCreateParams) => Promise<Sandbox>
    readonly fromId: (sandboxId: string) => Promise<Sandbox>
    readonly fromName: (appName: string, name: string) => Promise<Sandbox>
    readonly list: (params?: { appId?: string; tags?: Record<string, string> }) => AsyncIterable<Sandbox>
  }
  readonly close: () => void
  /** The SDK's profile: its `sandboxV2` picks the backend `sandboxes.create` uses. */
  readonly profile?: { sandboxV2?: unknown }
}

/** Modal's limit on the total length of an exec's arguments (the SDK checks it before calling). */
export const MAX_EXEC_ARGS_BYTES = 65536
const ENV_KEY = /^[a-zA-Z_][a-zA-Z0-9_]*$/
const CANCEL_TIMEOUT = "30 seconds"

/** A reason why Modal would refuse this exec, or undefined. */
export const invalidExec = (request: ExecRequest): string | undefined => {
  const size = request.argv.reduce((sum, arg) => sum + Buffer.byteLength(arg), 0)
  if (size > MAX_EXEC_ARGS_BYTES) {
    return `the command's arguments total ${size} bytes; Modal takes at most ${MAX_EXEC_ARGS_BYTES} (64 KiB) in an exec's arguments`
  }
  const badKey = Object.keys(request.env ?? {}).find((key) => !ENV_KEY.test(key))
  if (badKey !== undefined) return `Modal takes only [A-Za-z_][A-Za-z0-9_]* as exec environment names, got '${badKey}'`
  return undefined
}

const DOMAIN_LABEL = /^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$/

/** An address with a prefix length, as Modal's allowlist takes it. */
export const isCidr = (value: string) => {
  const [address, prefix, ...rest] = value.split("/")
  if (rest.length > 0 || address === undefined || prefix === undefined || !/^\d{1,3}$/.test(prefix)) return false
  const family = isIP(address)
  return family !== 0 && Number(prefix) <= (family === 4 ? 32 : 128)
}

/** A name or `*.name` (not an address), as Modal's domain allowlist takes it. */
export const isDomain = (value: string) => {
  const name = value.startsWith("*.") ? value.slice(2) : value
  return name.length > 0 && name.length <= 253 && isIP(name) === 0 && name.split(".").every((label) => DOMAIN_LABEL.test(label))
}

/** A reason why Modal would refuse this sandbox, or undefined. */
export const invalidCreate = (request: CreateSandboxRequest): string | undefined => {
  const cidr = request.outbound?.cidrs.find((entry) => !isCidr(entry))
  if (cidr !== undefined) return `'${cidr}' is not a CIDR Modal takes (an address and a prefix length, like 10.0.0.0/8); Modal answers "Invalid CIDR"`
  const domain = request.outbound?.domains.find((entry) => !isDomain(entry))
  if (domain !== undefined) return `'${domain}' is not a domain Modal takes (a name or *.name; addresses go in the CIDR allowlist)`
  if (request.blockNetwork && request.outbound !== undefined) return "an allowlist cannot go with a blocked network"

  if (!validObjectName(request.name)) return `'${request.name}' is not a valid Modal sandbox name (at most 64 characters of [A-Za-z0-9-_.])`
  if (!validObjectName(request.appName)) return `'${request.appName}' is not a valid Modal app name (at most 64 characters of [A-Za-z0-9-_.])`
  if (!(request.timeoutMs % 1000 === 0 && request.timeoutMs >= 1000 && request.timeoutMs <= 86_400_000)) {
    return `the sandbox timeout must be whole seconds from 1 s to 24 h, got ${request.timeoutMs} ms`
  }
  return undefined
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
  ...(request.outbound === undefined
    ? {}
    : { outboundDomainAllowlist: [...request.outbound.domains], outboundCidrAllowlist: [...request.outbound.cidrs] }),
  name: request.name,
  tags: { ...request.tags },
  ...(request.gpu === undefined ? {} : { gpu: request.gpu }),
  ...(request.region === undefined ? {} : { regions: [request.region] }),
  ...(request.tunnelPorts === undefined || request.tunnelPorts.length === 0 ? {} : { encryptedPorts: [...request.tunnelPorts] })
})

/** `sandbox.exec` parameters for a request: always binary streams, both piped. */
export const execParams = (request: ExecRequest): SandboxExecParams & { mode: "binary" } => ({
  mode: "binary",
  stdout: "pipe",
  stderr: "pipe",
  pty: request.pty,
  ...(request.workdir === undefined ? {} : { workdir: request.workdir }),
  ...(request.env === undefined ? {} : { env: { ...request.env } })
})

const call = <A>(operation: string, run: () => Promise<A>) => Effect.tryPromise({ try: run, catch: fromSdkError(operation) })

const invalid = (operation: string, detail: string) => modalError(operation, "Invalid", detail)

const fromReadable = (operation: string, stream: ReadableStream<Uint8Array>) =>
  Stream.fromReadableStream({ evaluate: () => stream, onError: fromSdkError(operation) })

/** Runs promise-returning steps one after the other, whatever happens to their callers. */
const serialiser = () => {
  let last: Promise<unknown> = Promise.resolve()
  return <A>(run: () => Promise<A>): Promise<A> => {
    const next = last.then(run, run)
    last = next.catch(() => undefined)
    return next
  }
}

const execHandle = (command: Awaited<ReturnType<Sandbox["exec"]>>): ExecHandle => {
  const inTurn = serialiser()
  const stdout = command.stdout as unknown as ReadableStream<Uint8Array>
  const stderr = command.stderr as unknown as ReadableStream<Uint8Array>
  return {
    stdout: fromReadable("read stdout", stdout),
    stderr: fromReadable("read stderr", stderr),
    writeStdin: (data) => call("write stdin", () => inTurn(() => command.stdin.writeBytes(data))),
    closeStdin: call("close stdin", () => inTurn(() => command.stdin.close())),
    wait: call("wait for the command", () => command.wait())
  }
}

/** A handle over the SDK's sandbox object (its promises are awaited per call). */
const sandboxHandle = (sandbox: Sandbox): SandboxHandle => ({
  sandboxId: sandbox.sandboxId,
  exec: (request) =>
    Effect.suspend(() => {
      const refused = invalidExec(request)
      if (refused !== undefined) return Effect.fail(invalid("start a command", refused))
      return call("start a command", () => sandbox.exec([...request.argv], execParams(request))).pipe(Effect.map(execHandle))
    }),
  tags: call("read the sandbox's tags", () => sandbox.getTags()),
  poll: call("poll the sandbox", () => sandbox.poll()),
  terminate: call("terminate the sandbox", () => sandbox.terminate()),
  tunnels: call("read the sandbox's tunnels", () => sandbox.tunnels()).pipe(
    Effect.map((tunnels) => new Map(Object.entries(tunnels).map(([port, tunnel]) => [Number(port), tunnel.url])))
  ),
  // Modal's default lifetime for the image (30 days): the checkpoint deletes it sooner.
  snapshotFilesystem: call("snapshot the sandbox's filesystem", () => sandbox.snapshotFilesystem()).pipe(Effect.map((image) => image.imageId)),
  detach: Effect.sync(() => {
    try {
      sandbox.detach()
    } catch {
      // already detached
    }
  })
})

/** `sandboxes.create` on Modal's V1 backend (see the header: why, and why the flag is safe to flip). */
export const createOnV1 = (client: ModalClientLike, app: App, image: Image, params: SandboxCreateParams): Promise<Sandbox> => {
  const profile = client.profile
  if (profile === undefined || typeof profile.sandboxV2 !== "boolean") {
    return Promise.reject(
      new Error(
        "this Modal SDK cannot be asked for a V1 sandbox, the only kind whose network policy Modal documents; " +
          "refusing to create a sandbox whose network might not be restricted"
      )
    )
  }
  const saved = profile.sandboxV2
  profile.sandboxV2 = false
  try {
    return client.sandboxes.create(app, image, params)
  } finally {
    profile.sandboxV2 = saved
  }
}

const sameTags = (a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>) =>
  Object.keys(a).length === Object.keys(b).length && Object.entries(a).every(([key, value]) => b[key] === value)

/** The adapter over a client (a real `ModalClient`, possibly pointed at the test fake). */
export const fromClient = (client: ModalClientLike, log: (message: string) => void = () => {}): ModalGatewayService => {
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

  /** Terminates the sandbox a given-up create made, if it can be found by name and carries our tags. */
  const cancelByName = (request: CreateSandboxRequest) =>
    call("look up the unfinished sandbox", () => client.sandboxes.fromName(request.appName, request.name)).pipe(
      Effect.flatMap((sandbox) =>
        call("read the unfinished sandbox's tags", () => sandbox.getTags()).pipe(
          Effect.flatMap((tags) =>
            sameTags(tags, request.tags) ? call("terminate the unfinished sandbox", () => sandbox.terminate()) : Effect.void
          ),
          Effect.ensuring(sandboxHandle(sandbox).detach)
        )
      ),
      Effect.timeout(CANCEL_TIMEOUT),
      Effect.catchAll((error) =>
        error._tag === "ProviderError" && error.reason === "NotFound"
          ? Effect.void
          : Effect.sync(() => log(`cannot cancel the unfinished sandbox ${request.name} now (${error.message}); it is terminated if Modal still creates it`))
      )
    )

  const createSandbox = (request: CreateSandboxRequest, found: App, image: Image) =>
    Effect.async<Sandbox, ProviderError>((resume) => {
      let abandoned = false
      const params = createParams(request)
      const restricted = request.blockNetwork || request.outbound !== undefined
      const created = restricted ? createOnV1(client, found, image, params) : client.sandboxes.create(found, image, params)
      created.then(
        (sandbox) => {
          if (!abandoned) return resume(Effect.succeed(sandbox))
          // We gave up on this create while the SDK still waited for Modal: the sandbox must not bill.
          sandbox.terminate().then(
            () => log(`terminated the sandbox ${request.name} (${sandbox.sandboxId}), created after its create call was given up`),
            (error: unknown) => log(`cannot terminate the late sandbox ${request.name} (${sandbox.sandboxId}): ${redact(String(error))}`)
          )
        },
        (error: unknown) => {
          if (!abandoned) resume(Effect.fail(fromSdkError(`create the sandbox ${request.name}`)(error)))
        }
      )
      return Effect.sync(() => {
        abandoned = true
      }).pipe(Effect.andThen(cancelByName(request)))
    })

  return {
    create: (request) =>
      Effect.gen(function*() {
        const refused = invalidCreate(request)
        if (refused !== undefined) return yield* invalid(`create the sandbox ${request.name}`, refused)
        const found = yield* app(request.appName)
        const image = request.imageId === undefined
          ? client.images.fromRegistry(request.image)
          : yield* call(`find the image ${request.imageId}`, () => client.images.fromId(request.imageId!))
        return sandboxHandle(yield* createSandbox(request, found, image))
      }),
    fromId: (sandboxId) => call("find the sandbox", () => client.sandboxes.fromId(sandboxId)).pipe(Effect.map(sandboxHandle)),
    fromName: (appName, name) =>
      call(`look up the sandbox ${name}`, () => client.sandboxes.fromName(appName, name)).pipe(
        Effect.map((sandbox) => Option.some(sandboxHandle(sandbox))),
        Effect.catchIf((error) => error.reason === "NotFound", () => Effect.succeed(Option.none<SandboxHandle>()))
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
    deleteImage: (imageId) => call(`delete the image ${imageId}`, () => client.images.delete(imageId)),
    close: Effect.sync(() => client.close())
  }
}

/** The SDK's logger, writing to our log (stderr) at the matching level. */
export const sdkLogger = (runtime: Runtime.Runtime<never>): Logger => {
  const at = (level: LogLevel.LogLevel) => (message: string, ...args: Array<unknown>) => {
    const pairs: Array<string> = []
    for (let i = 0; i + 1 < args.length; i += 2) pairs.push(`${String(args[i])}=${String(args[i + 1])}`)
    Runtime.runSync(runtime)(Effect.logWithLevel(level, redact(`modal sdk: ${message}${pairs.length > 0 ? ` (${pairs.join(", ")})` : ""}`)))
  }
  return { debug: at(LogLevel.Debug), info: at(LogLevel.Info), warn: at(LogLevel.Warning), error: at(LogLevel.Error) }
}

/** The adapter over Modal's SDK, authenticated with these tokens. */
export const sdk = (options: SdkOptions): Effect.Effect<ModalGatewayService, ProviderError> =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    const logger = sdkLogger(runtime)
    return yield* Effect.try({
      try: () => fromClient(new ModalClient({ ...clientParams(options), logger }), (message) => logger.warn(message)),
      catch: fromSdkError("connect to Modal")
    })
  })
