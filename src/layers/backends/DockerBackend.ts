/**
 * The Docker backend (also Podman through its Docker-compatible socket, and remote engines): a
 * computer is one container, driven entirely through the Engine API with dockerode — never a
 * `docker` CLI subprocess.
 *
 * Containers: named `kilntainer-<id>` and labelled
 *   kilntainers=true, kilntainers.computer-id=<id>, kilntainers.temporary=true|false,
 *   kilntainers.image=<the image it was created from>, kilntainers.instance=<server instance id>,
 *   kilntainers.created=<ISO time>, kilntainers.owner-host / owner-pid / owner-start (the creating
 *   server process: host name, pid and start time from /proc/<pid>/stat field 22).
 * A container named `kilntainer-<id>` without these labels (or with another computer id) is not
 * ours: open refuses and never touches it. Permanent state lives in the container's writable layer.
 *
 * Lifecycle: open attaches to the container of that id when it is ours (starting it if stopped; a
 * different `temporary` is refused), else pulls the image if missing (progress to onPullProgress)
 * and creates + starts one. Closing the computer's Scope removes a temporary container and leaves a
 * permanent one running, to be re-attached by id later, by this or another server process.
 * restart = container restart (writable layer kept); factory reset = remove and recreate from the
 * image in the `kilntainers.image` label (not the current --image); destroy = remove (force).
 * `lost` completes when the container dies or is removed other than through the handle (one engine
 * event stream per layer, `die`/`destroy` of kilntainers containers); its processes then end.
 * Reaper: when the layer is built, temporary containers whose owner server process (on this host)
 * is gone are removed; permanent ones, those of live servers and those of other hosts are left.
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
 *     zombies. When the engine has no init binary, the container is recreated without it and PID 1
 *     is a shell loop that reaps instead (`wait` reaps every child, adopted orphans included).
 *   - the container's main process is `sleep infinity` (kept alive under init); the hostname is the
 *     computer id.
 *   - processes run as root (the image's user unless --docker-run-flag --user) with HOME and working
 *     directory /home/agent, created by the engine at container creation (WorkingDir); every process
 *     gets exactly its SpawnSpec environment (`env -i`), nothing from the server or the image.
 *
 * Processes: Engine API exec, hijacked, through a tiny `/bin/sh` wrapper (see DockerExec.ts): the
 * process leads its own session and process group; signals go to the group (`kill -- -pgid` in a
 * second short exec, so remote engines work too) and closing a process's Scope SIGKILLs its whole
 * session. The image needs /bin/sh, `env` and `kill` (any Debian/Ubuntu/Alpine image); `ps` (procps
 * or busybox) lets the SIGKILL on close also reach processes that left the group.
 */
import Docker from "dockerode"
import { Deferred, Effect, Either, Exit, FiberRef, Layer, Option, Queue, Ref, Runtime, Scope } from "effect"
import { existsSync } from "node:fs"
import { hostname } from "node:os"
import { BackendError, SpawnFailed } from "../../domain/Errors.js"
import type { BackendComputer, BackendProcess, Capabilities, ComputerSpec, ProviderComputer, SpawnSpec } from "../../services/Backend.js"
import { Backend } from "../../services/Backend.js"
import { CurrentProgress } from "../../services/Progress.js"
import type * as AgentClient from "./AgentClient.js"
import * as AgentProcesses from "./AgentProcesses.js"
import * as DockerAgent from "./DockerAgent.js"
import * as DockerExec from "./DockerExec.js"
import * as NativeBinaries from "./NativeBinaries.js"
import { ownerAlive, processStartTime } from "./ProcessOwner.js"
import { normalizeCapability, parseRunFlags, parseSize } from "./DockerRunFlags.js"
import type { RunFlagSettings } from "./DockerRunFlags.js"

export interface DockerBackendOptions {
  /** podman: through its Docker-compatible socket. */
  readonly engine: "docker" | "podman"
  /**
   * unix:///path, tcp://host:port (or http://, https://), ssh://user@host[:port] — like DOCKER_HOST;
   * undefined = the default socket (/var/run/docker.sock; Podman: /run/user/<uid>/podman/podman.sock
   * for a non-root user when it exists, else /run/podman/podman.sock).
   */
  readonly dockerHost: string | undefined
  /** Image of new computers (default "debian:bookworm-slim"); pulled when missing. */
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
  /** This server instance (a random id made by the caller); recorded on the containers it creates. */
  readonly instanceId: string
  /** Image pull progress, one line at a time. */
  readonly onPullProgress?: ((line: string) => void) | undefined
  /** ssh:// engines: the ssh-agent socket used to authenticate (the caller's SSH_AUTH_SOCK). */
  readonly sshAuthSock?: string | undefined
}

export const DEFAULT_IMAGE = "debian:bookworm-slim"
export const HOME = "/home/agent"
export const DEFAULT_MEMORY = "1g"
export const DEFAULT_CPU = 1
export const DEFAULT_PIDS_LIMIT = 512
/** The capabilities kept after CapDrop ALL (see the header for why each one). */
export const DEFAULT_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID", "KILL"] as const

export const LABEL = {
  marker: "kilntainers",
  computerId: "kilntainers.computer-id",
  temporary: "kilntainers.temporary",
  image: "kilntainers.image",
  instance: "kilntainers.instance",
  created: "kilntainers.created",
  ownerHost: "kilntainers.owner-host",
  ownerPid: "kilntainers.owner-pid",
  ownerStart: "kilntainers.owner-start"
} as const

/** The capabilities of the Docker backend. */
export const capabilities: Capabilities = {
  pty: true,
  stdin: true,
  signals: true,
  restart: true,
  factoryReset: true,
  persistence: true,
  files: true,
  networkControl: true
}

const COMPUTER_ID = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/
const CALL_TIMEOUT = "60 seconds"
const REMOVE_TIMEOUT = "20 seconds"
const KEEP_ALIVE = ["sleep", "infinity"]
/** PID 1 when the engine has no init: `wait` reaps every child, adopted orphans included. */
const SHELL_REAPER = ["/bin/sh", "-c", "trap 'exit 0' TERM INT HUP; while :; do sleep 2147483647 & wait $!; done"]
const KILL_SCRIPT = [
  `kill -s "$1" -- "-$2" 2>/dev/null`,
  `if [ "$3" = session ] && command -v ps >/dev/null 2>&1; then`,
  `  ps -e -o pid= -o sid= 2>/dev/null | while read -r p s; do [ "$s" = "$2" ] && kill -s "$1" "$p" 2>/dev/null; done`,
  `fi`,
  `exit 0`
].join("\n")

export const containerName = (id: string) => `kilntainer-${id}`

// ---------------------------------------------------------------------------------------------
// Connection

const defaultSocket = (engine: DockerBackendOptions["engine"]) => {
  if (engine === "docker") return "/var/run/docker.sock"
  const uid = typeof process.getuid === "function" ? process.getuid() : 0
  const user = `/run/user/${uid}/podman/podman.sock`
  return uid !== 0 && existsSync(user) ? user : "/run/podman/podman.sock"
}

/**
 * dockerode options for an engine address. Every connection key is set explicitly so docker-modem's
 * own fallback to the DOCKER_HOST environment variable never applies.
 */
export const connectionOptions = (
  options: Pick<DockerBackendOptions, "engine" | "dockerHost" | "sshAuthSock">
): Either.Either<Docker.DockerOptions, string> => {
  const base = {
    socketPath: undefined,
    host: undefined,
    port: undefined,
    protocol: undefined,
    ca: undefined,
    cert: undefined,
    key: undefined,
    timeout: undefined,
    version: undefined
  } as unknown as Docker.DockerOptions
  const address = options.dockerHost?.trim()
  if (address === undefined || address === "") return Either.right({ ...base, socketPath: defaultSocket(options.engine) })
  if (address.startsWith("unix://")) {
    return Either.right({ ...base, socketPath: address.slice("unix://".length) || defaultSocket(options.engine) })
  }
  if (address.startsWith("/")) return Either.right({ ...base, socketPath: address })
  let url: URL
  try {
    url = new URL(address.includes("://") ? address : `tcp://${address}`)
  } catch {
    return Either.left(`invalid engine address '${address}' (use unix:///path, tcp://host:port or ssh://user@host)`)
  }
  switch (url.protocol) {
    case "tcp:":
    case "http:":
      return Either.right({ ...base, host: url.hostname, port: url.port || "2375", protocol: "http" })
    case "https:":
      return Either.right({ ...base, host: url.hostname, port: url.port || "2376", protocol: "https" })
    case "ssh:":
      return Either.right({
        ...base,
        host: url.hostname,
        port: url.port || "22",
        protocol: "ssh",
        username: decodeURIComponent(url.username),
        sshOptions: options.sshAuthSock === undefined ? {} : { agent: options.sshAuthSock }
      })
    default:
      return Either.left(`unsupported engine address '${address}' (use unix:///path, tcp://host:port or ssh://user@host)`)
  }
}

/** dockerode's ping takes options (the abort signal) although its types say otherwise. */
const pingEngine = (docker: Docker, signal: AbortSignal) =>
  (docker.ping as unknown as (options: object) => Promise<unknown>).call(docker, { abortSignal: signal })

const describeAddress = (options: Pick<DockerBackendOptions, "engine" | "dockerHost">) =>
  options.dockerHost?.trim() ? options.dockerHost.trim() : `unix://${defaultSocket(options.engine)}`

/** Whether an engine answers at this address (bounded to ~1.5 s). */
export const ping = (options: Pick<DockerBackendOptions, "engine" | "dockerHost">): Effect.Effect<boolean> =>
  Effect.suspend(() => {
    const connection = connectionOptions(options)
    if (Either.isLeft(connection)) return Effect.succeed(false)
    const docker = new Docker(connection.right)
    return Effect.tryPromise((signal) => pingEngine(docker, signal)).pipe(
      Effect.timeout("1500 millis"),
      Effect.as(true),
      Effect.orElseSucceed(() => false)
    )
  })

// ---------------------------------------------------------------------------------------------
// Owner liveness (for the reaper)

export { ownerAlive, processStartTime } from "./ProcessOwner.js"

// ---------------------------------------------------------------------------------------------
// The backend

interface EngineError {
  readonly what: string
  readonly error: unknown
  readonly status: number | undefined
}

interface Live {
  readonly spec: ComputerSpec
  readonly name: string
  containerId: string
  image: string
  /** Bumped at every restart and reset: older processes' pids mean nothing any more. */
  generation: number
  /** Restart or reset in progress: engine events about the container are ours. */
  busy: number
  /** Why the computer is unusable (lost or destroyed). */
  gone: string | undefined
  destroyed: boolean
  readonly processes: Set<DockerExec.ExecProcess>
  readonly lost: Deferred.Deferred<string>
  /** The kt-agent running in the container (the fast path), for one generation. */
  agent: { readonly client: AgentClient.AgentClient; readonly scope: Scope.CloseableScope; readonly generation: number } | undefined
  readonly agentLock: Effect.Semaphore
}

interface EngineEvent {
  readonly id?: string
  readonly Action?: string
  readonly status?: string
  readonly time?: number
  readonly Actor?: { readonly ID?: string; readonly Attributes?: Readonly<Record<string, string>> }
}

const parseMemory = (memory: string | undefined): Either.Either<number, string> => {
  const bytes = parseSize(memory ?? DEFAULT_MEMORY)
  if (bytes === undefined) return Either.left(`invalid memory limit '${memory}' (use a size such as 512m or 2g)`)
  if (bytes < 6 * 1024 * 1024) return Either.left(`memory limit '${memory}' is too small (the engine needs at least 6m)`)
  return Either.right(bytes)
}

/** The Docker backend; fails when the engine is unreachable, the image cannot be had or a flag is wrong. */
export const make = (options: DockerBackendOptions) =>
  Effect.gen(function*() {
    const NAME = options.engine
    const fail = (reason: string) => new BackendError({ backend: NAME, reason })
    const fromEngine = (error: EngineError) => fail(DockerExec.describeError(error.what, error.error))

    // Settings: every problem is reported before anything touches the engine.
    const flags: RunFlagSettings = yield* Either.mapLeft(parseRunFlags(options.runFlags), fail)
    const memory = yield* Either.mapLeft(parseMemory(options.memory), fail)
    const cpu = options.cpu ?? DEFAULT_CPU
    if (!(Number.isFinite(cpu) && cpu > 0)) return yield* fail(`invalid CPU count ${cpu}`)
    if (!(Number.isInteger(options.pidsLimit) && options.pidsLimit > 0)) {
      return yield* fail(`invalid pids limit ${options.pidsLimit}`)
    }
    const connection = yield* Either.mapLeft(connectionOptions(options), fail)
    const docker = new Docker(connection)
    const where = describeAddress(options)

    const call = <A>(what: string, f: (signal: AbortSignal) => Promise<A>): Effect.Effect<A, EngineError> =>
      Effect.tryPromise({
        try: f,
        catch: (error): EngineError => ({ what, error, status: DockerExec.statusOf(error) })
      }).pipe(
        Effect.timeoutFail({
          duration: CALL_TIMEOUT,
          onTimeout: (): EngineError => ({ what, error: new Error(`no answer from the engine at ${where}`), status: undefined })
        })
      )

    const reachable = yield* Effect.tryPromise((signal) => pingEngine(docker, signal)).pipe(
      Effect.timeout("5 seconds"),
      Effect.either
    )
    if (Either.isLeft(reachable)) {
      const error = reachable.left
      const said = error._tag === "TimeoutException" ? "no answer within 5 s" : DockerExec.describeError("ping", error.error)
      return yield* fail(
        `cannot reach the ${NAME} engine at ${where} (${said}). Start the engine${
          NAME === "podman" ? " socket (systemctl --user start podman.socket)" : ""
        }, or point --docker-host at it`
      )
    }

    // ---- images -------------------------------------------------------------------------------
    const pull = (image: string) =>
      Effect.gen(function*() {
        // Progress also reaches the MCP client whose call needed the image, when it listens.
        const reporter = yield* FiberRef.get(CurrentProgress)
        const runFork = Runtime.runFork(yield* Effect.runtime<never>())
        let events = 0
        const progress = (line: string) => {
          options.onPullProgress?.(`${NAME}: pulling ${image}: ${line}`)
          if (reporter) runFork(reporter({ progress: ++events, message: `pulling ${image}: ${line}` }))
        }
        return yield* pullWith(image, progress)
      })

    const pullWith = (image: string, progress: (line: string) => void) =>
      Effect.async<void, string>((resume) => {
        let stream: NodeJS.ReadableStream | undefined
        let done = false
        const finish = (error: string | undefined) => {
          if (done) return
          done = true
          resume(error === undefined ? Effect.void : Effect.fail(error))
        }
        docker.pull(image, {}, (error: unknown, output: NodeJS.ReadableStream | undefined) => {
          if (error || output === undefined) return finish(DockerExec.describeError("pull", error).replace(/^pull: /, ""))
          stream = output
          docker.modem.followProgress(
            output,
            (error: Error | null) => finish(error ? error.message : undefined),
            (event: { status?: string; id?: string; progress?: string; error?: string }) => {
              if (event.error) return
              const line = [event.id, event.status, event.progress].filter((part) => part).join(" ")
              if (line !== "") progress(line)
            }
          )
        })
        return Effect.sync(() => {
          done = true
          ;(stream as { destroy?: () => void } | undefined)?.destroy?.()
        })
      })

    /** Makes sure the image is present locally, pulling it when missing. */
    const ensureImage = (image: string) =>
      Effect.gen(function*() {
        const present = yield* call("inspect image", () => docker.getImage(image).inspect()).pipe(
          Effect.as(true),
          Effect.catchAll((error) => (error.status === 404 ? Effect.succeed(false) : Effect.fail(fromEngine(error))))
        )
        if (present) return
        yield* Effect.logInfo(`${NAME} backend: image ${image} is not present locally; pulling it`)
        yield* pull(image).pipe(
          Effect.mapError((said) =>
            fail(`the image '${image}' is not present on the ${NAME} engine at ${where} and pulling it failed: ${said}`)
          )
        )
      })

    yield* ensureImage(options.image)

    // ---- containers ---------------------------------------------------------------------------
    const ownerHost = hostname()
    const ownerStart = processStartTime("self") ?? ""
    const noInit = yield* Ref.make(false)
    const capAdd = [...new Set([...DEFAULT_CAPABILITIES, ...flags.capAdd])].filter(
      (cap) => !flags.capDrop.map(normalizeCapability).includes(cap)
    )

    const createBody = (spec: ComputerSpec, image: string, init: boolean): Docker.ContainerCreateOptions => ({
      name: containerName(spec.id),
      Image: image,
      Cmd: init ? KEEP_ALIVE : SHELL_REAPER,
      WorkingDir: HOME,
      Hostname: flags.hostname ?? spec.id,
      Env: [...flags.env],
      ...(flags.user === undefined ? {} : { User: flags.user }),
      Labels: {
        ...flags.labels,
        [LABEL.marker]: "true",
        [LABEL.computerId]: spec.id,
        [LABEL.temporary]: String(spec.temporary),
        [LABEL.image]: image,
        [LABEL.instance]: options.instanceId,
        [LABEL.created]: new Date().toISOString(),
        [LABEL.ownerHost]: ownerHost,
        [LABEL.ownerPid]: String(process.pid),
        [LABEL.ownerStart]: ownerStart
      },
      HostConfig: {
        Init: init,
        ...(options.network ? {} : { NetworkMode: "none" }),
        CapDrop: ["ALL"],
        CapAdd: capAdd,
        SecurityOpt: ["no-new-privileges", ...flags.securityOpt],
        PidsLimit: options.pidsLimit,
        Memory: memory,
        MemorySwap: memory,
        NanoCpus: Math.round(cpu * 1e9),
        ReadonlyRootfs: flags.readOnly,
        ...(flags.binds.length > 0 ? { Binds: [...flags.binds] } : {}),
        ...(Object.keys(flags.tmpfs).length > 0 ? { Tmpfs: { ...flags.tmpfs } } : {}),
        ...(flags.shmSize === undefined ? {} : { ShmSize: flags.shmSize }),
        ...(flags.ulimits.length > 0 ? { Ulimits: flags.ulimits.map((u) => ({ ...u })) } : {}),
        ...(flags.extraHosts.length > 0 ? { ExtraHosts: [...flags.extraHosts] } : {}),
        ...(flags.dns.length > 0 ? { Dns: [...flags.dns] } : {}),
        ...(Object.keys(flags.sysctls).length > 0 ? { Sysctls: { ...flags.sysctls } } : {})
      }
    })

    const removeContainer = (id: string) =>
      call("remove the container", (signal) => docker.getContainer(id).remove({ force: true, v: true, abortSignal: signal })).pipe(
        Effect.asVoid,
        Effect.catchAll((error) => (error.status === 404 ? Effect.void : Effect.fail(fromEngine(error))))
      )

    /** Creates and starts a container; "conflict" when the name was taken meanwhile. */
    const createAndStart = (spec: ComputerSpec, image: string): Effect.Effect<string | "conflict", BackendError> =>
      Effect.gen(function*() {
        for (let attempt = 0; attempt < 3; attempt++) {
          const init = !(yield* Ref.get(noInit))
          const created = yield* call("create the container", (signal) =>
            docker.createContainer({ ...createBody(spec, image, init), abortSignal: signal } as Docker.ContainerCreateOptions)).pipe(
              Effect.map((container) => container.id),
              Effect.catchAll((error) => Effect.succeed(error))
            )
          if (typeof created !== "string") {
            if (created.status === 409) return "conflict" as const
            if (created.status === 404 && attempt === 0) {
              yield* ensureImage(image)
              continue
            }
            return yield* fromEngine(created)
          }
          const started = yield* call("start the container", (signal) => docker.getContainer(created).start({ abortSignal: signal })).pipe(
            Effect.either
          )
          if (Either.isRight(started)) return created
          yield* removeContainer(created).pipe(Effect.ignore)
          const said = DockerExec.describeError(started.left.what, started.left.error)
          if (init && /init/i.test(said)) {
            yield* Effect.logWarning(
              `${NAME} backend: the engine has no init binary (${said}); containers run a shell loop as PID 1 to reap zombies instead`
            )
            yield* Ref.set(noInit, true)
            continue
          }
          return yield* fail(`cannot start the container ${containerName(spec.id)}: ${said}`)
        }
        return yield* fail(`cannot create the container ${containerName(spec.id)}`)
      })

    // ---- engine events: containers lost from outside ---------------------------------------------
    const registry = new Map<string, Live>()
    const events = yield* Queue.unbounded<EngineEvent>()
    let since = Math.floor(Date.now() / 1000)

    const subscribe = Effect.async<void>((resume, signal) => {
      let stream: NodeJS.ReadableStream | undefined
      let done = false
      let partial = ""
      const finish = () => {
        if (done) return
        done = true
        resume(Effect.void)
      }
      docker.getEvents({
        since,
        filters: { type: ["container"], event: ["die", "destroy"], label: [`${LABEL.marker}=true`] },
        abortSignal: signal
      }).then((output) => {
        stream = output
        output.on("data", (chunk: Buffer) => {
          partial += chunk.toString("utf8")
          const lines = partial.split("\n")
          partial = lines.pop() ?? ""
          for (const line of lines) {
            if (line.trim() === "") continue
            try {
              const event = JSON.parse(line) as EngineEvent
              if (typeof event.time === "number") since = Math.max(since, event.time)
              Queue.unsafeOffer(events, event)
            } catch {
              // not an event
            }
          }
        })
        output.on("end", finish)
        output.on("close", finish)
        output.on("error", finish)
      }, finish)
      return Effect.sync(() => {
        done = true
        ;(stream as { destroy?: () => void } | undefined)?.destroy?.()
      })
    })
    yield* subscribe.pipe(Effect.andThen(Effect.sleep("1 second")), Effect.forever, Effect.forkScoped)

    const markLost = (live: Live, reason: string) =>
      Effect.gen(function*() {
        if (live.gone !== undefined) return
        live.gone = reason
        registry.delete(live.containerId)
        for (const process of live.processes) process.abort()
        yield* Effect.logWarning(`${NAME} backend: computer ${live.spec.id}: ${reason}`)
        yield* Deferred.succeed(live.lost, reason)
      })

    const handleEvent = (event: EngineEvent) =>
      Effect.gen(function*() {
        const id = event.id ?? event.Actor?.ID
        if (id === undefined) return
        const live = registry.get(id)
        if (live === undefined || live.busy > 0 || live.gone !== undefined) return
        if ((event.Action ?? event.status) === "die") yield* Effect.sleep("200 millis")
        const state = yield* call("inspect", (signal) => docker.getContainer(id).inspect({ abortSignal: signal })).pipe(
          Effect.map((info) => ({ exists: true as const, running: info.State.Running, code: info.State.ExitCode })),
          Effect.catchAll((error) => Effect.succeed(error.status === 404 ? { exists: false as const } : undefined))
        )
        if (state === undefined || live.busy > 0 || live.containerId !== id) return
        if (!state.exists) {
          return yield* markLost(live, `its container ${live.name} was removed outside kilntainers`)
        }
        if (!state.running) {
          return yield* markLost(live, `its container ${live.name} was stopped outside kilntainers (exit code ${state.code})`)
        }
      })
    yield* Queue.take(events).pipe(
      Effect.flatMap((event) => handleEvent(event).pipe(Effect.catchAllCause(Effect.logDebug))),
      Effect.forever,
      Effect.forkScoped
    )

    // ---- reaper -------------------------------------------------------------------------------
    const temporaries = yield* call("list containers", (signal) =>
      docker.listContainers({
        all: true,
        filters: { label: [`${LABEL.marker}=true`, `${LABEL.temporary}=true`] },
        abortSignal: signal
      })).pipe(Effect.mapError(fromEngine))
    for (const container of temporaries) {
      const labels = container.Labels ?? {}
      const pid = Number(labels[LABEL.ownerPid])
      if (labels[LABEL.ownerHost] !== ownerHost || labels[LABEL.instance] === options.instanceId) continue
      if (!Number.isInteger(pid) || ownerAlive(pid, labels[LABEL.ownerStart])) continue
      const name = container.Names?.[0]?.replace(/^\//, "") ?? container.Id
      yield* removeContainer(container.Id).pipe(
        Effect.andThen(Effect.logInfo(
          `${NAME} backend: reaped temporary container ${name} (computer ${labels[LABEL.computerId]}) left by server instance ${
            labels[LABEL.instance]
          } (pid ${pid}, no longer running)`
        )),
        Effect.catchAll((error) => Effect.logWarning(`${NAME} backend: cannot reap ${name}: ${error.reason}`))
      )
    }

    // ---- processes ----------------------------------------------------------------------------
    const killExec = (live: Live, pgid: number, signal: string, session: boolean) =>
      Effect.gen(function*() {
        const exec = yield* call("signal the process", (abort) =>
          docker.getContainer(live.containerId).exec({
            Cmd: ["/bin/sh", "-c", KILL_SCRIPT, "kilntainers", signal.replace(/^SIG/, ""), String(pgid), session ? "session" : ""],
            AttachStdout: true,
            AttachStderr: true,
            abortSignal: abort
          }))
        const said = yield* call("signal the process", () =>
          new Promise<string>((resolve, reject) => {
            exec.start({}).then((stream: NodeJS.ReadableStream) => {
              const chunks: Array<Buffer> = []
              stream.on("data", (chunk: Buffer) => chunks.push(chunk))
              stream.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
              stream.on("error", reject)
            }, reject)
          }))
        const info = yield* call("signal the process", (abort) => exec.inspect({ abortSignal: abort }))
        if (info.ExitCode !== 0) {
          return yield* fail(
            `cannot deliver ${signal}: ${said.replace(/[\x00-\x08]/g, "").trim() || `exit code ${info.ExitCode}`}${
              /resource temporarily unavailable/i.test(said) ? " (the computer's pids limit is reached; restart it)" : ""
            }`
          )
        }
      }).pipe(Effect.mapError((error) => ("_tag" in error ? error : fromEngine(error))))

    // ---- the agent: the fast path for processes without a terminal -------------------------------
    // Found once; without it (or when a container cannot run it) every process is an Engine exec.
    const binaries = yield* NativeBinaries.locate(NAME).pipe(
      Effect.tapError((error) => Effect.logWarning(`${NAME} backend: no kt-agent (${error.reason}); every process will be an Engine API exec`)),
      Effect.option
    )
    let agentUnavailable: string | undefined = Option.isNone(binaries) ? "no agent binary" : undefined

    const closeAgent = (live: Live) =>
      Effect.suspend(() => {
        const agent = live.agent
        live.agent = undefined
        return agent === undefined ? Effect.void : Scope.close(agent.scope, Exit.void)
      })

    /** The container's agent for its current generation, started on first use; undefined: use exec. */
    const agentOf = (live: Live): Effect.Effect<AgentClient.AgentClient | undefined> =>
      live.agentLock.withPermits(1)(Effect.gen(function*() {
        if (agentUnavailable !== undefined || Option.isNone(binaries)) return undefined
        const current = live.agent
        if (current !== undefined && current.generation === live.generation && current.client.failure === undefined) {
          return current.client
        }
        yield* closeAgent(live)
        const generation = live.generation
        const scope = yield* Scope.make()
        const started = yield* DockerAgent.start(NAME, docker, live.containerId, binaries.value).pipe(
          Scope.extend(scope),
          Effect.either
        )
        if (Either.isLeft(started)) {
          yield* Scope.close(scope, Exit.void)
          // A container that cannot run the agent (another architecture, a read-only root, …) still
          // works through Engine exec; one that just died will be reported as lost by the events.
          if (live.gone === undefined && live.generation === generation) {
            agentUnavailable = started.left.reason
            yield* Effect.logWarning(`${NAME} backend: ${started.left.reason}; processes will run through Engine API exec`)
          }
          return undefined
        }
        live.agent = { client: started.right, scope, generation }
        return started.right
      }))

    const spawn = (live: Live) => (spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | BackendError, Scope.Scope> =>
      Effect.gen(function*() {
        const command = spec.argv.join(" ")
        if (live.gone !== undefined) return yield* fail(`computer ${live.spec.id} is gone: ${live.gone}`)
        const invalid = DockerExec.invalidSpec(spec)
        if (invalid !== undefined) return yield* new SpawnFailed({ command, reason: invalid })
        const tty = spec.tty !== undefined
        if (!tty) {
          const agent = yield* agentOf(live)
          if (agent !== undefined) return yield* AgentProcesses.spawnPipes(NAME, agent, spec)
        }
        const env = tty && spec.env["TERM"] === undefined ? { ...spec.env, TERM: "xterm-256color" } : spec.env
        const generation = live.generation
        const exec = yield* call("create the process", (signal) =>
          docker.getContainer(live.containerId).exec({
            Cmd: DockerExec.wrapperArgv(spec, env),
            Env: [],
            WorkingDir: spec.cwd,
            AttachStdin: true,
            AttachStdout: true,
            AttachStderr: true,
            Tty: tty,
            abortSignal: signal
          })).pipe(Effect.mapError((error) =>
            error.status === 409 || error.status === 404
              ? fail(`computer ${live.spec.id} is not running (${DockerExec.describeError(error.what, error.error)})`)
              : fromEngine(error)
          ))
        const host: DockerExec.ExecHost = {
          backend: NAME,
          current: () => live.generation === generation && live.gone === undefined,
          kill: (pgid, signal, session) => killExec(live, pgid, signal, session)
        }
        const process = yield* Effect.acquireRelease(
          DockerExec.start({ exec, host, command, tty }).pipe(Effect.tap((process) => Effect.sync(() => live.processes.add(process)))),
          (process) => process.terminate.pipe(Effect.ensuring(Effect.sync(() => live.processes.delete(process))))
        )
        if (tty) yield* process.resize(spec.tty!.cols, spec.tty!.rows).pipe(Effect.ignore)
        const result: BackendProcess = {
          pid: process.pid,
          events: process.events,
          write: process.write,
          closeStdin: process.closeStdin,
          signal: process.signal,
          resize: process.resize
        }
        return result
      })

    // ---- computers ----------------------------------------------------------------------------
    /** SIGKILLs the computer's processes (bounded): used when the container stays. */
    const endProcesses = (live: Live) =>
      Effect.forEach([...live.processes], (process) => process.terminate, { concurrency: "unbounded", discard: true })
    /** Drops the processes' connections: used when the engine is about to kill them all anyway. */
    const dropProcesses = (live: Live) =>
      Effect.sync(() => {
        for (const process of live.processes) process.abort()
      })

    const busy = <A, E>(live: Live, effect: Effect.Effect<A, E>) =>
      Effect.acquireUseRelease(
        Effect.sync(() => {
          live.busy++
          live.generation++
        }),
        () => effect,
        () => Effect.sync(() => live.busy--)
      )

    const attachOrCreate = (spec: ComputerSpec) =>
      Effect.gen(function*() {
        const name = containerName(spec.id)
        for (let attempt = 0; attempt < 3; attempt++) {
          const existing = yield* call("inspect the container", (signal) => docker.getContainer(name).inspect({ abortSignal: signal })).pipe(
            Effect.map((info): Docker.ContainerInspectInfo | undefined => info),
            Effect.catchAll((error) => (error.status === 404 ? Effect.succeed(undefined) : Effect.fail(fromEngine(error))))
          )
          if (existing === undefined) {
            const created = yield* createAndStart(spec, options.image)
            if (created === "conflict") continue
            yield* Effect.logInfo(`${NAME} backend: created ${name} from ${options.image}${spec.temporary ? " (temporary)" : ""}`)
            return { containerId: created, image: options.image }
          }
          const labels = existing.Config.Labels ?? {}
          if (labels[LABEL.marker] !== "true" || labels[LABEL.computerId] !== spec.id) {
            return yield* fail(
              `a container named ${name} exists but was not created by kilntainers for computer '${spec.id}' (its labels do not match); it is left untouched — remove or rename it, or use another computer id`
            )
          }
          const temporary = labels[LABEL.temporary] === "true"
          if (temporary !== spec.temporary) {
            return yield* fail(
              `computer '${spec.id}' exists as a ${temporary ? "temporary" : "permanent"} computer; it cannot be opened as a ${
                spec.temporary ? "temporary" : "permanent"
              } one`
            )
          }
          if (existing.State.Paused) {
            yield* call("unpause the container", (signal) => docker.getContainer(existing.Id).unpause({ abortSignal: signal })).pipe(
              Effect.mapError(fromEngine)
            )
          } else if (!existing.State.Running) {
            yield* call("start the container", (signal) => docker.getContainer(existing.Id).start({ abortSignal: signal })).pipe(
              Effect.catchAll((error) => (error.status === 304 ? Effect.void : Effect.fail(fromEngine(error))))
            )
          }
          return { containerId: existing.Id, image: labels[LABEL.image] ?? existing.Config.Image }
        }
        return yield* fail(`cannot create ${name}: its name keeps being taken`)
      })

    const open = Effect.fn("DockerBackend.open")(function*(spec: ComputerSpec) {
      if (!COMPUTER_ID.test(spec.id)) return yield* fail(`invalid computer id '${spec.id}'`)
      const { containerId, image } = yield* attachOrCreate(spec)
      const live: Live = {
        spec,
        name: containerName(spec.id),
        containerId,
        image,
        generation: 0,
        busy: 0,
        gone: undefined,
        destroyed: false,
        processes: new Set(),
        lost: yield* Deferred.make<string>(),
        agent: undefined,
        agentLock: yield* Effect.makeSemaphore(1)
      }
      registry.set(containerId, live)
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          registry.delete(live.containerId)
          yield* closeAgent(live)
          // A permanent container stays: its processes are killed. A temporary one is removed, which
          // kills them anyway (also when it was stopped from outside).
          if (live.destroyed || !spec.temporary) {
            return yield* (live.gone === undefined ? endProcesses(live) : dropProcesses(live))
          }
          yield* dropProcesses(live)
          yield* removeContainer(live.containerId).pipe(
            Effect.interruptible,
            Effect.timeout(REMOVE_TIMEOUT),
            Effect.catchAll((error) =>
              Effect.logWarning(`${NAME} backend: cannot remove the temporary container ${live.name}: ${"reason" in error ? error.reason : "timed out"}`)
            )
          )
        })
      )

      const usable = Effect.suspend(() =>
        live.gone === undefined ? Effect.void : Effect.fail(fail(`computer ${spec.id} is gone: ${live.gone}`))
      )
      const restart = usable.pipe(
        Effect.andThen(busy(live, Effect.gen(function*() {
          yield* closeAgent(live)
          yield* dropProcesses(live)
          yield* call("restart the container", (signal) => docker.getContainer(live.containerId).restart({ t: 5, abortSignal: signal })).pipe(
            Effect.mapError(fromEngine)
          )
        })))
      )
      const factoryReset = usable.pipe(
        Effect.andThen(busy(live, Effect.gen(function*() {
          yield* closeAgent(live)
          yield* dropProcesses(live)
          yield* ensureImage(live.image)
          registry.delete(live.containerId)
          yield* removeContainer(live.containerId)
          const created = yield* createAndStart(spec, live.image).pipe(
            Effect.tapError((error) => Effect.sync(() => (live.gone = `factory reset failed: ${error.reason}`)))
          )
          if (created === "conflict") {
            live.gone = "factory reset failed: the container name was taken by someone else"
            return yield* fail(`factory reset of ${spec.id} failed: the name ${live.name} was taken meanwhile`)
          }
          live.containerId = created
          registry.set(created, live)
          yield* Effect.logInfo(`${NAME} backend: factory reset ${live.name} from ${live.image}`)
        })))
      )
      const destroy = Effect.gen(function*() {
        if (live.destroyed) return
        live.destroyed = true
        live.gone ??= "it was deleted"
        registry.delete(live.containerId)
        yield* closeAgent(live)
        yield* dropProcesses(live)
        yield* removeContainer(live.containerId)
      })
      const computer: BackendComputer = {
        get providerId() {
          return live.containerId
        },
        home: HOME,
        get image() {
          return live.image
        },
        spawn: spawn(live),
        restart,
        factoryReset,
        destroy,
        lost: Deferred.await(live.lost)
      }
      return computer
    })

    const list = call("list containers", (signal) =>
      docker.listContainers({ all: true, filters: { label: [`${LABEL.marker}=true`] }, abortSignal: signal })).pipe(
        Effect.mapError(fromEngine),
        Effect.map((containers) =>
          containers.flatMap((container): Array<ProviderComputer> => {
            const labels = container.Labels ?? {}
            const id = labels[LABEL.computerId]
            if (id === undefined) return []
            return [{
              id,
              temporary: labels[LABEL.temporary] === "true",
              providerId: container.Id,
              image: labels[LABEL.image] ?? container.Image,
              createdAt: labels[LABEL.created] ?? new Date(container.Created * 1000).toISOString(),
              state: container.State
            }]
          })
        )
      )

    return Backend.of({ name: NAME, capabilities, open, list })
  })

/** The Docker backend as a Layer (its event watcher lives as long as the layer). */
export const layer = (options: DockerBackendOptions): Layer.Layer<Backend, BackendError> => Layer.scoped(Backend, make(options))
