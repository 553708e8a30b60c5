/**
 * The Docker backend (also Podman through its Docker-compatible socket, and remote engines): a
 * computer is one container, driven entirely through the Engine API with dockerode — never a
 * `docker` CLI subprocess. A stateless provider: the kernel (ComputerActor, the registry, the
 * reaper) owns lifecycles, identity, sessions and reaping; this module checks the settings, reaches
 * the engine and hands out the provider calls of its parts:
 *
 *   DockerEngine.ts      where the engine is; every call bounded, its failure a ProviderError
 *   DockerImage.ts       images present, or pulled with progress
 *   DockerContainers.ts  find / create / start / restart / remove / adopt; the labels and hardening
 *   DockerConnection.ts  a running container's agent (or Engine exec) and its loss (DockerEvents.ts)
 *
 * restart = container restart (writable layer kept); factory reset (the kernel) = remove, then
 * create from the image recorded on the container; adopt (warm pool) = a record in the state
 * directory (PoolIds.ts; a container rename without one).
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import type { ComputerEgress } from "../../egress/Egress.js"
import type { FilesystemPolicy } from "../../../domain/Mounts.js"
import { type Capabilities, capabilitiesWithout } from "../../../services/Backend.js"
import { Backend } from "../../../services/Backend.js"
import * as NativeBinaries from "../agent/NativeBinaries.js"
import * as PrivateHelpers from "../agent/PrivateHelpers.js"
import type * as Relay from "../agent/Relay.js"
import type * as MountObjects from "../mounts/MountObjects.js"
import * as MountTemplates from "../mounts/MountTemplates.js"
import * as AdoptedContainer from "./AdoptedContainer.js"
import * as ComputerImage from "./ComputerImage.js"
import { COMPUTER_IMAGE, DEFAULT_BASE, recipeDirectory } from "./ComputerRecipe.js"
import * as DockerCheckpoints from "./DockerCheckpoints.js"
import * as DockerConnection from "./DockerConnection.js"
import * as DockerContainers from "./DockerContainers.js"
import * as DockerEngine from "./DockerEngine.js"
import * as DockerGuest from "./DockerGuest.js"
import * as DockerImage from "./DockerImage.js"
import * as DockerMounts from "./DockerMounts.js"
import { sharesMounts } from "./EngineNamespace.js"
import * as PoolIds from "./PoolIds.js"
import { parseSize } from "../../../domain/Size.js"
import { parseRunFlags } from "./DockerRunFlags.js"

export { connectionOptions, ping } from "./DockerEngine.js"
export { containerName, DEFAULT_CAPABILITIES, HOME } from "./DockerContainers.js"

export interface DockerBackendOptions extends DockerEngine.EngineAddress {
  /**
   * Image of new computers: pulled when missing; the default, the computer image, is built on first
   * use when missing (ComputerImage.ts).
   */
  readonly image: string
  /** CPUs (NanoCpus); default 1. */
  readonly cpu: number | undefined
  /** Memory limit such as "512m", "2g"; default 1g. Swap is not added on top. */
  readonly memory: string | undefined
  /** Maximum number of processes in a container (default 512). */
  readonly pidsLimit: number
  /** false → NetworkMode "none". */
  readonly network: boolean
  /** A documented subset of `docker run` flags (DockerRunFlags.ts); unknown flags fail the layer. */
  readonly runFlags: ReadonlyArray<string>
  /** Image pull progress, one line at a time. */
  readonly onPullProgress?: ((line: string) => void) | undefined
  /** A relay port inside each container whose connections the server serves (the egress proxy). */
  readonly relay?: Relay.RelaySettings | undefined
  /** The user's own files in every container (--mount, --deny-read, --deny-write; DockerMounts.ts). */
  readonly filesystem?: FilesystemPolicy | undefined
  /** An existing container (not ours) adopted as a permanent computer (AdoptedContainer.ts). */
  readonly adoptContainer?: string | undefined
  /** Output each container keeps per stream on its disk (its agent's --retain; default 32 MiB). */
  readonly retainBytes?: number | undefined
  /** Finished processes each container keeps listable (its agent's --max-finished; default 100). */
  readonly maxFinished?: number | undefined
  /** How long an agent's start may take (DockerAgent.START_MS); tests shorten it. */
  readonly agentStartMs?: number | undefined
  /**
   * The server's state directory: warm pool records, and the user's directories staged for the
   * engine (DockerMounts.ts; without one they are only checked), or the empty directory that masks
   * --deny-read directories.
   */
  readonly stateDir?: string | undefined
  /** The egress proxy's variables for every process, and its CA bundle (DockerTrust.ts). */
  readonly egress?: ComputerEgress | undefined
}

export const DEFAULT_IMAGE = COMPUTER_IMAGE
export const DEFAULT_MEMORY = "1g"
export const DEFAULT_CPU = 1
export const DEFAULT_PIDS_LIMIT = 512

/** The capabilities of the Docker backend. */
export const capabilities: Capabilities = capabilitiesWithout()

const parseMemory = (memory: string | undefined): Either.Either<number, string> => {
  const bytes = parseSize(memory ?? DEFAULT_MEMORY)
  if (bytes === undefined) return Either.left(`invalid memory limit '${memory}' (use a size such as 512m or 2g)`)
  if (bytes < 6 * 1024 * 1024) return Either.left(`memory limit '${memory}' is too small (the engine needs at least 6m)`)
  return Either.right(bytes)
}

/** The settings of every container, checked before anything touches the engine. */
const containerSettings = (
  options: DockerBackendOptions,
  mounts: DockerMounts.DockerMounts | undefined
): Either.Either<DockerContainers.ContainerSettings, ProviderError> => {
  const invalid = (detail: string) => Either.left(providerError(options.engine, "use the settings", "Invalid", detail))
  const flags = parseRunFlags(options.runFlags)
  if (Either.isLeft(flags)) return invalid(flags.left)
  const memory = parseMemory(options.memory)
  if (Either.isLeft(memory)) return invalid(memory.left)
  const cpu = options.cpu ?? DEFAULT_CPU
  if (!(Number.isFinite(cpu) && cpu > 0)) return invalid(`invalid CPU count ${cpu}`)
  if (!(Number.isInteger(options.pidsLimit) && options.pidsLimit > 0)) return invalid(`invalid pids limit ${options.pidsLimit}`)
  return Either.right({
    flags: flags.right,
    memory: memory.right,
    cpu,
    pidsLimit: options.pidsLimit,
    network: options.network,
    onPullProgress: options.onPullProgress,
    mounts
  })
}

/**
 * Whether a mount this server makes is what the engine sees: the server is root and the engine
 * listens on a local socket in this mount namespace (EngineNamespace.ts).
 */
const stageable = (options: DockerBackendOptions): boolean => {
  const address = DockerEngine.connectionOptions(options)
  const socket = Either.isRight(address) ? address.right.socketPath : undefined
  return process.getuid?.() === 0 && typeof socket === "string" && sharesMounts(socket)
}

/** Mount templates made by kt-sandbox run from the server's private copy of the bytes it checked (PrivateHelpers). */
const templatesFrom = (engine: string, stateDir: string) => (objects: MountObjects.MountObjects) =>
  NativeBinaries.locateHelper(engine, "kt-sandbox").pipe(
    Effect.flatMap((helper) => PrivateHelpers.install(engine, PrivateHelpers.helpersDir(stateDir), "kt-sandbox", helper.bytes)),
    Effect.flatMap((launcher) => MountTemplates.make(launcher, objects, "root", engine))
  )

/** The user's directories (DockerMounts.ts): staged from templates when the engine sees our mounts, else checked. */
const userMounts = (options: DockerBackendOptions) =>
  options.filesystem === undefined
    ? Effect.succeed(undefined)
    : DockerMounts.make({
      policy: options.filesystem,
      backend: options.engine,
      stateDir: options.stateDir,
      templates: stageable(options) && options.stateDir !== undefined
        ? templatesFrom(options.engine, options.stateDir)
        : undefined
    })

/** Whether a computer can write a host directory (its agent then refuses setuid/setgid modes). */
const writesHostFiles = (options: DockerBackendOptions, flags: DockerContainers.ContainerSettings["flags"]): boolean =>
  (options.filesystem?.mounts ?? []).some((mount) => !mount.volume && !mount.readOnly) ||
  flags.binds.some((bind) => bind.startsWith("/") && !bind.split(":").slice(2).join(":").split(",").includes("ro"))

/**
 * The Docker backend, holding the user's directories for as long as the Scope lasts; fails when a
 * setting is wrong, the engine is unreachable or the image cannot be had. The computer image is built,
 * when needed, by the first computer that needs it, in that Scope (a cancelled call keeps the build).
 */
export const make = (options: DockerBackendOptions): Effect.Effect<Backend["Type"], ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const mounts = yield* userMounts(options)
    const settings = yield* containerSettings(options, mounts)
    const engine = yield* DockerEngine.make(options)
    yield* DockerEngine.reachable(engine)
    // The computer image is had when a computer first needs it (a build takes minutes); others now.
    const computerImage = options.image === COMPUTER_IMAGE
      ? yield* ComputerImage.make(engine, {
        tag: COMPUTER_IMAGE,
        base: DEFAULT_BASE,
        recipe: recipeDirectory(),
        onProgress: options.onPullProgress
      }, yield* Effect.scope)
      : undefined
    if (computerImage === undefined) yield* DockerImage.ensure(engine, options.image, options.onPullProgress)
    // Warm pool hand-outs are recorded in the state directory (PoolIds.ts); without one, renamed.
    const poolIds = options.stateDir === undefined ? undefined : PoolIds.make(options.stateDir, engine.name)
    const containers = yield* DockerContainers.make(engine, settings, poolIds)
    // Found once. Without one every process is an Engine API exec; one that fails its check (changed
    // since it was built) is never replaced by Engine exec: every computer is refused, saying why.
    const located = yield* Effect.either(NativeBinaries.locate(engine.name))
    const agentInvalid = Either.isLeft(located) && located.left.reason === "Invalid" ? located.left : undefined
    if (Either.isLeft(located)) {
      yield* Effect.logWarning(
        agentInvalid === undefined
          ? `${engine.name} backend: no kt-agent (${located.left.detail}); every process will be an Engine API exec`
          : `${engine.name} backend: kt-agent failed its check (${located.left.detail}); computers will be refused`
      )
    }
    const binaries = Either.getRight(located)
    const backend = Backend.of({
      name: engine.name,
      capabilities,
      labelStyle: "dotted",
      image: options.image,
      find: containers.find,
      create: computerImage === undefined
        ? (metadata) => containers.create(metadata)
        : (metadata) =>
          metadata.image === COMPUTER_IMAGE ? Effect.zipRight(computerImage.ready, containers.create(metadata)) : containers.create(metadata),
      start: containers.start,
      connect: DockerConnection.connect({
        engine,
        containers,
        binaries,
        agentInvalid,
        agentRefused: new Map(),
        relay: options.relay,
        egress: options.egress,
        writesHostFiles: writesHostFiles(options, settings.flags),
        agentArgs: [
          ...(options.retainBytes === undefined ? [] : ["--retain", String(options.retainBytes)]),
          ...(options.maxFinished === undefined ? [] : ["--max-finished", String(options.maxFinished)])
        ],
        guest: DockerGuest.idsFor(options.filesystem?.mounts ?? [], settings.flags),
        agentStartMs: options.agentStartMs
      }),
      restart: containers.restart,
      remove: containers.remove,
      adopt: containers.adopt,
      checkpoints: DockerCheckpoints.make(engine, containers.create),
      environment: options.egress?.env
    })
    return options.adoptContainer === undefined ? backend : yield* AdoptedContainer.wrap(backend, engine, options.adoptContainer)
  })

/** The Docker backend as a Layer. */
export const layer = (options: DockerBackendOptions): Layer.Layer<Backend, ProviderError> => Layer.scoped(Backend, make(options))

