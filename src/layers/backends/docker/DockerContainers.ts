/**
 * Containers as the Docker backend's computers: one container per computer, named
 * `kilntainer-<id>` and labelled with its ComputerMetadata in the dotted style
 * (`kilntainers=true`, `kilntainers.computer-id`, `kilntainers.temporary`, `kilntainers.image`, …;
 * see domain/ComputerMetadata.ts). A container without our labels is never taken for ours, even
 * under our name. Permanent state lives in the container's writable layer.
 *
 * Hardening (defaults; --docker-run-flag can adjust a documented subset, see DockerRunFlags.ts):
 *   - network: NetworkMode "none" (only loopback) unless --network.
 *   - capabilities: CapDrop ALL, then CapAdd CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETUID, SETGID,
 *     KILL — the minimum with which root inside can still install packages: dpkg chowns/chmods
 *     unpacked files (CHOWN, FOWNER, FSETID for setgid/setuid bits), root writes files it does not
 *     own (DAC_OVERRIDE), apt drops to the `_apt` user to download and maintainer scripts
 *     (useradd, su, runuser) switch users (SETUID, SETGID), and root signals processes of other users
 *     (KILL). Left out of Docker's defaults: MKNOD, NET_RAW (no raw sockets/ping), NET_BIND_SERVICE,
 *     SYS_CHROOT, SETPCAP, SETFCAP, AUDIT_WRITE.
 *   - SecurityOpt no-new-privileges (setuid binaries cannot raise privileges); the engine's default
 *     seccomp profile stays on.
 *   - limits: PidsLimit (default 512, a fork bomb stays inside), Memory (default 1g) with MemorySwap
 *     = Memory (no swap on top), NanoCpus (default 1 CPU).
 *   - Init: true — the engine's init (tini/docker-init, catatonit on Podman) is PID 1 and reaps
 *     zombies. When the engine has no init binary (Docker refuses the start, Podman the create —
 *     Debian's podman without the catatonit package), the container is made again without it and
 *     PID 1 is a shell loop that reaps instead (`wait` reaps every child, adopted orphans included).
 *   - the container's main process is `sleep infinity` (kept alive under init); the hostname is the
 *     computer id it was created for.
 *   - the container's user is the image's (root) unless --docker-run-flag --user; its processes run
 *     as the guest user `agent` (DockerGuest.ts, through the connection's execs) with HOME and
 *     working directory /home/agent, created by the engine at container creation (WorkingDir). A
 *     non-root --user gets no capabilities beyond its own --cap-add (on Podman they would be ambient).
 */
import type Docker from "dockerode"
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Ref from "effect/Ref"
import * as Schedule from "effect/Schedule"
import { computerIdPattern } from "../../../domain/ComputerIds.js"
import { type ComputerMetadata, fromLabels, labelKey, selector, toLabels } from "../../../domain/ComputerMetadata.js"
import { newKey as newAgentKey } from "../agent/AgentHandshake.js"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Instance, InstanceState, Query } from "../../../services/Backend.js"
import { coalesce } from "./Coalesce.js"
import { type Engine, hasStatus } from "./DockerEngine.js"
import * as DockerImage from "./DockerImage.js"
import type { DockerMounts } from "./DockerMounts.js"
import { normalizeCapability, type RunFlagSettings } from "./DockerRunFlags.js"
import type * as PoolIds from "./PoolIds.js"

export const HOME = "/home/agent"
/** The capabilities kept after CapDrop ALL (see the header for why each one). */
export const DEFAULT_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"] as const

const NAME_PREFIX = "kilntainer-"
const KEEP_ALIVE = ["sleep", "infinity"]
/** PID 1 when the engine has no init: `wait` reaps every child, adopted orphans included. */
const SHELL_REAPER = ["/bin/sh", "-c", "trap 'exit 0' TERM INT HUP; while :; do sleep 2147483647 & wait $!; done"]

export const containerName = (id: string) => `${NAME_PREFIX}${id}`

/**
 * Whether the engine refused a container because its init binary is missing: Docker says so when it
 * starts the container (`exec: "docker-init": executable file not found`), Podman when it creates it
 * (`container-init binary not found on the host: stat /usr/libexec/podman/catatonit: …`).
 */
export const initMissing = (said: string): boolean =>
  /init/i.test(said) && /not found|no such file|executable file/i.test(said)

/**
 * Podman as root sets every container's open-files and process limits to 1048576, which takes
 * CAP_SYS_RESOURCE; an engine without it (a restricted or nested host) cannot start any container.
 */
const RLIMIT_HINT = "The engine cannot raise a resource limit here (Podman as root sets nofile and nproc to 1048576, " +
  "which needs CAP_SYS_RESOURCE): give containers lower ones with default_ulimits in containers.conf, or with " +
  "--docker-run-flag=--ulimit=nofile=N:N --docker-run-flag=--ulimit=nproc=N:N"

/** What every container of a backend is made with. */
export interface ContainerSettings {
  readonly flags: RunFlagSettings
  /** Bytes; swap is not added on top. */
  readonly memory: number
  readonly cpu: number
  readonly pidsLimit: number
  readonly network: boolean
  /** Image pull progress, one line at a time. */
  readonly onPullProgress?: ((line: string) => void) | undefined
  /** The user's own files (--mount, --deny-read, --deny-write; DockerMounts.ts). */
  readonly mounts?: DockerMounts | undefined
}

/**
 * The label holding the computer's agent key (AgentHandshake.ts): every server on the engine reads
 * it to attach to the container's agent; nothing inside the container can read a label.
 */
export const AGENT_KEY_LABEL = "kilntainers.agent-key"

/** Whether `--user` names someone other than root (`0`, `root`, with or without a group). */
export const nonRootUser = (user: string | undefined): boolean => user !== undefined && !/^(0|root)(:|$)/.test(user.trim())

const createBody = (
  settings: ContainerSettings,
  metadata: ComputerMetadata,
  init: boolean,
  userBinds: ReadonlyArray<string>,
  image: string
): Docker.ContainerCreateOptions => {
  const { flags } = settings
  // A non-root --user gets none of root's capabilities, only those asked for with --cap-add: Docker
  // leaves them out of its effective set anyway, but Podman makes them ambient, and the user could
  // then do what root does (DAC_OVERRIDE, SETUID).
  const defaults = nonRootUser(flags.user) ? [] : DEFAULT_CAPABILITIES
  const capAdd = [...new Set([...defaults, ...flags.capAdd])].filter(
    (cap) => !flags.capDrop.map(normalizeCapability).includes(cap)
  )
  const binds = [...flags.binds, ...userBinds]
  const tmpfs = flags.tmpfs
  return {
    name: containerName(metadata.id),
    Image: image,
    Cmd: init ? KEEP_ALIVE : SHELL_REAPER,
    WorkingDir: HOME,
    Hostname: flags.hostname ?? metadata.id,
    Env: [...flags.env],
    ...(flags.user === undefined ? {} : { User: flags.user }),
    Labels: { ...flags.labels, ...toLabels("dotted", metadata), [AGENT_KEY_LABEL]: newAgentKey() },
    HostConfig: {
      Init: init,
      ...(settings.network ? {} : { NetworkMode: "none" }),
      CapDrop: ["ALL"],
      CapAdd: capAdd,
      SecurityOpt: ["no-new-privileges", ...flags.securityOpt],
      PidsLimit: settings.pidsLimit,
      Memory: settings.memory,
      MemorySwap: settings.memory,
      NanoCpus: Math.round(settings.cpu * 1e9),
      ReadonlyRootfs: flags.readOnly,
      ...(binds.length > 0 ? { Binds: binds } : {}),
      ...(Object.keys(tmpfs).length > 0 ? { Tmpfs: tmpfs } : {}),
      ...(flags.shmSize === undefined ? {} : { ShmSize: flags.shmSize }),
      ...(flags.ulimits.length > 0 ? { Ulimits: flags.ulimits.map((u) => ({ ...u })) } : {}),
      ...(flags.extraHosts.length > 0 ? { ExtraHosts: [...flags.extraHosts] } : {}),
      ...(flags.dns.length > 0 ? { Dns: [...flags.dns] } : {}),
      ...(Object.keys(flags.sysctls).length > 0 ? { Sysctls: { ...flags.sysctls } } : {})
    }
  }
}

const stateOf = (state: string | undefined): InstanceState => {
  switch (state) {
    case "running":
    case "paused":
      return state
    case "created":
    case "exited":
    case "dead":
      return "stopped"
    case "removing":
      return "gone"
    default:
      return state ?? "gone"
  }
}

/**
 * The computer a container is, from its labels. A warm pool's container handed out keeps its pool
 * labels and name (labels cannot change): its id is `recorded` in the state directory (PoolIds.ts),
 * or, renamed by an older version or without a state directory, its name `kilntainer-<id>` says it.
 */
export const metadataOf = (
  labels: Readonly<Record<string, string>> | undefined,
  name: string | undefined,
  fallback: { readonly image: string; readonly created: string },
  recorded?: string | undefined
): Option.Option<ComputerMetadata> =>
  Option.map(fromLabels("dotted", labels, fallback), (metadata) => {
    if (!metadata.pooled) return metadata
    if (recorded !== undefined) return { ...metadata, id: recorded }
    const named = name?.replace(/^\//, "")
    if (named === undefined || !named.startsWith(NAME_PREFIX)) return metadata
    const id = named.slice(NAME_PREFIX.length)
    return computerIdPattern.test(id) ? { ...metadata, id } : metadata
  })

/** What the engine says of a container that exists. */
export interface ContainerState {
  readonly running: boolean
  /** Being removed (`docker rm -f` marks it before it kills it). */
  readonly removing: boolean
  readonly exitCode: number
  /** Its agent key (AGENT_KEY_LABEL); absent on containers of versions before durable agents. */
  readonly agentKey?: string | undefined
}

/**
 * The provider calls on containers, over one engine. With `poolIds` (the state directory), a warm
 * pool's container is handed out by a record there; without, by a rename at the engine.
 */
export const make = (engine: Engine, settings: ContainerSettings, poolIds?: PoolIds.PoolIds) =>
  Effect.gen(function*() {
    const { docker, call, fail } = engine
    const mounts = settings.mounts
    /** A create, start or restart with the user's directories ready (DockerMounts.ts); `binds` are the container's. */
    const withMounts = <A>(binds: ReadonlyArray<string> | null | undefined, effect: Effect.Effect<A, ProviderError>) =>
      mounts === undefined ? effect : mounts.around((binds ?? []).filter((bind) => !settings.flags.binds.includes(bind)), effect)
    /** Set once the engine turned out to have no init binary: later containers reap with a shell loop. */
    const noInit = yield* Ref.make(false)
    const withoutInit = (said: string) =>
      Effect.zipRight(
        Effect.logWarning(`${engine.name} backend: the engine has no init binary (${said}); containers run a shell loop as PID 1 to reap zombies instead`),
        Ref.set(noInit, true)
      )

    const remove = (instance: Instance): Effect.Effect<void, ProviderError> =>
      call("remove the container", (signal) => docker.getContainer(instance.providerId).remove({ force: true, v: true, abortSignal: signal })).pipe(
        Effect.asVoid,
        Effect.catchIf((error) => error.reason === "NotFound", () => Effect.void),
        Effect.zipRight(poolIds !== undefined && instance.metadata.pooled === true ? poolIds.forget(instance.providerId, instance.metadata.id) : Effect.void)
      )

    /** Why a name is taken: by our own computer, or by a container that is not ours (left untouched). */
    const taken = (metadata: ComputerMetadata, cause: ProviderError) =>
      call("inspect the container", (signal) => docker.getContainer(containerName(metadata.id)).inspect({ abortSignal: signal })).pipe(
        Effect.map((info) => Option.isSome(metadataOf(info.Config.Labels, info.Name, { image: "", created: "" }))),
        Effect.orElseSucceed(() => true),
        Effect.map((ours) =>
          fail(
            "create the container",
            "Conflict",
            ours
              ? `the container ${containerName(metadata.id)} already exists`
              : `a container named ${containerName(metadata.id)} exists but was not created by kilntainers for computer '${metadata.id}' (its labels do not match); it is left untouched — remove or rename it, or use another computer id`,
            cause.cause
          )
        )
      )

    /**
     * Creates and starts a container; a taken name is a Conflict. `image` (a checkpoint's) replaces
     * the recorded base image for this container only: a factory reset still returns to the base.
     */
    const create = (metadata: ComputerMetadata, image: string = metadata.image): Effect.Effect<Instance, ProviderError> =>
      Effect.flatMap(mounts === undefined ? Effect.succeed([]) : mounts.binds(containerName(metadata.id)), (userBinds) =>
        withMounts(userBinds, createStarted(metadata, userBinds, image)))

    const createStarted = (metadata: ComputerMetadata, userBinds: ReadonlyArray<string>, image: string): Effect.Effect<Instance, ProviderError> =>
      Effect.gen(function*() {
        for (let attempt = 0; attempt < 3; attempt++) {
          const init = !(yield* Ref.get(noInit))
          const created = yield* call("create the container", (signal) =>
            docker.createContainer({ ...createBody(settings, metadata, init, userBinds, image), abortSignal: signal } as Docker.ContainerCreateOptions)).pipe(
              Effect.map((container) => container.id),
              Effect.either
            )
          if (created._tag === "Left") {
            const error = created.left
            if (error.reason === "Conflict") return yield* Effect.flip(taken(metadata, error))
            if (error.reason === "NotFound" && attempt === 0) {
              // No such image: pulled once, then tried again.
              yield* DockerImage.ensure(engine, image, settings.onPullProgress)
              continue
            }
            // Podman looks for its init binary (catatonit) when it creates the container.
            if (init && initMissing(error.detail)) {
              yield* withoutInit(error.detail)
              continue
            }
            return yield* error
          }
          const id = created.right
          const instance: Instance = { providerId: id, metadata, state: "running" }
          const started = yield* call("start the container", (signal) => docker.getContainer(id).start({ abortSignal: signal })).pipe(Effect.either)
          if (started._tag === "Right") {
            yield* Effect.logInfo(
              `${engine.name} backend: created ${containerName(metadata.id)} from ${image}${metadata.temporary ? " (temporary)" : ""}`
            )
            return instance
          }
          yield* remove(instance).pipe(Effect.ignore)
          // Docker looks for its init binary (docker-init) when it starts the container.
          if (init && initMissing(started.left.detail)) {
            yield* withoutInit(started.left.detail)
            continue
          }
          if (/setting rlimit/i.test(started.left.detail)) {
            return yield* fail("start the container", started.left.reason, `${started.left.detail}. ${RLIMIT_HINT}`, started.left.cause)
          }
          return yield* started.left
        }
        return yield* fail("create the container", "Failed", `${containerName(metadata.id)} could not be created`)
      })

    /**
     * Every container of ours as an instance, decoded once per listing (a handed-out pool container
     * by its recorded id, PoolIds.ts, or its name); callers at once share one listing (Coalesce.ts).
     */
    const listAll = yield* coalesce(Effect.gen(function*() {
      const listedAt = yield* Clock.currentTimeMillis
      const containers = yield* call("list containers", (signal) =>
        docker.listContainers({ all: true, filters: { label: Object.entries(selector("dotted")).map(([k, v]) => `${k}=${v}`) }, abortSignal: signal }))
      const pooled = containers.some((container) => container.Labels?.[labelKey("dotted", "pooled")] === "true")
      const records = poolIds !== undefined && pooled ? yield* poolIds.read : new Map<string, string>()
      if (records.size > 0) yield* poolIds!.prune(records, new Set(containers.map((container) => container.Id)), listedAt)
      return containers.flatMap((container): Array<Instance> => {
        const metadata = metadataOf(container.Labels, container.Names?.[0], {
          image: container.Image,
          created: new Date(container.Created * 1000).toISOString()
        }, records.get(container.Id))
        return Option.isSome(metadata) ? [{ providerId: container.Id, metadata: metadata.value, state: stateOf(container.State) }] : []
      })
    }))

    /** Our containers, by id and kind. */
    const find = (query: Query): Effect.Effect<ReadonlyArray<Instance>, ProviderError> =>
      Effect.map(listAll, (instances) =>
        instances.filter(({ metadata }) =>
          (query.id === undefined || metadata.id === query.id) && (query.temporary === undefined || metadata.temporary === query.temporary)
        ))

    /** Runs a found container again: unpaused, or started. */
    const start = (instance: Instance): Effect.Effect<Instance, ProviderError> =>
      Effect.gen(function*() {
        const container = docker.getContainer(instance.providerId)
        const info = yield* call("inspect the container", (signal) => container.inspect({ abortSignal: signal }))
        if (info.State.Paused) {
          yield* call("unpause the container", (signal) => container.unpause({ abortSignal: signal }))
          // The engine may record the resume a moment after it answered: started means not paused.
          yield* call("inspect the container", (signal) => container.inspect({ abortSignal: signal })).pipe(
            Effect.filterOrFail((after) => !after.State.Paused, () => fail("unpause the container", "Unavailable", "it is still paused")),
            Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("3 seconds"))),
            Effect.ignore
          )
        } else if (!info.State.Running) {
          // 304: started meanwhile.
          yield* withMounts(
            info.HostConfig.Binds,
            call("start the container", (signal) => container.start({ abortSignal: signal })).pipe(
              Effect.catchIf((error) => hasStatus(error, 304), () => Effect.void)
            )
          )
        }
        return { ...instance, state: "running" }
      })

    /** Restarts the container: its processes end, its writable layer stays. */
    const restart = (instance: Instance): Effect.Effect<Instance, ProviderError> =>
      Effect.gen(function*() {
        const container = docker.getContainer(instance.providerId)
        const binds = mounts === undefined
          ? []
          : (yield* call("inspect the container", (signal) => container.inspect({ abortSignal: signal }))).HostConfig.Binds
        yield* withMounts(binds, call("restart the container", (signal) => container.restart({ t: 5, abortSignal: signal })))
        return { ...instance, state: "running" as const }
      })

    /**
     * A warm pool's container handed out: its new id recorded in the state directory (no engine
     * call), or without one the container renamed to it. Its labels keep the pool's.
     */
    const adopt = (instance: Instance, metadata: ComputerMetadata): Effect.Effect<Instance, ProviderError> =>
      (poolIds !== undefined
        ? poolIds.record(instance.providerId, metadata.id)
        : call("rename the container", (signal) =>
          docker.getContainer(instance.providerId).rename({ name: containerName(metadata.id), abortSignal: signal }))).pipe(
          Effect.as({ ...instance, metadata: { ...metadata, pooled: true } })
        )

    /** Whether a container still runs: its state, or none when it is gone. */
    const inspectState = (providerId: string): Effect.Effect<Option.Option<ContainerState>, ProviderError> =>
      call("inspect the container", (signal) => docker.getContainer(providerId).inspect({ abortSignal: signal })).pipe(
        Effect.map((info) =>
          Option.some({
            running: info.State.Running,
            removing: info.State.Status === "removing" || info.State.Dead,
            exitCode: info.State.ExitCode,
            agentKey: info.Config.Labels?.[AGENT_KEY_LABEL]
          })
        ),
        Effect.catchIf((error) => error.reason === "NotFound", () => Effect.succeed(Option.none()))
      )

    /**
     * Fails, naming the mount, when the engine binds checked paths and a container's no longer are
     * the objects held since startup (DockerMounts.ts). The engine mounts a container's binds again
     * for an archive copy (the agent's install), so a computer that swapped a path in a shared
     * directory makes that copy fail: this tells such a failure from one of the image.
     */
    const checkMounts = (providerId: string): Effect.Effect<void, ProviderError> =>
      mounts?.mode !== "checked"
        ? Effect.void
        : Effect.flatMap(
          call("inspect the container", (signal) => docker.getContainer(providerId).inspect({ abortSignal: signal })),
          (info) => withMounts(info.HostConfig.Binds, Effect.void)
        )

    return { create, find, start, restart, remove, adopt, inspectState, checkMounts } as const
  })

export type Containers = Effect.Effect.Success<ReturnType<typeof make>>
