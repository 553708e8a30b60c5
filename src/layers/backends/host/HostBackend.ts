/**
 * The host backend: a computer is a workspace directory on this machine,
 * `<stateDir>/computers/<id>/home`, and its processes run in one bubblewrap sandbox per computer.
 *
 * The sandbox is set up once per computer: bwrap starts `kt-agent`, which then forks every process
 * of the computer on request and keeps them, their records and their output (see AgentClient.ts,
 * native/kt-agent.c), so a spawn costs a fork+exec, not a new sandbox. TTY processes run on a
 * pseudo-terminal the agent allocates inside the sandbox; their bytes travel like pipe output. Servers
 * reach the agent through its listening socket `<computer>/agent.sock` (bound by kt-sandbox before
 * the sandbox starts, 0600, never mounted in the sandbox) and prove the computer's key (its record's
 * `agentKey`); the agent's store is `<computer>/store`, handed in as a descriptor. No host-side
 * helper ever opens a path inside the sandbox.
 *
 * A permanent computer's sandbox outlives the server (its own session, no parent-death signal):
 * its processes run on when the server exits, crashes or is upgraded, and the next server (or one
 * running beside it) attaches to the same agent. A temporary computer's ends with the server that
 * started it, as its agent's stdin does.
 *
 * A stateless provider (see Backend.ts): the kernel owns every computer's lifecycle. Workspaces.ts
 * finds, creates, renames and removes computers (their directories, 0700, and their records,
 * ComputerRecord.ts: the kernel's metadata as labels, plus the keys and uids); `connect` attaches
 * to the computer's agent, starting it when none runs, and its `lost` completes when the connection
 * ends other than through the kernel. Restart ends the agent (and every process) and connects
 * again on the same workspace; factory reset is remove and create; remove ends the agent first.
 *
 * Who runs inside (GuestUser.ts): always `agent` (uid/gid 1000) in a user namespace of its own.
 * When the server is root, the sandbox runs as a dedicated unprivileged host uid per computer,
 * which owns the workspace; otherwise as the server's user. kt-sandbox (Launcher.ts) starts it:
 * cgroups joined, uid dropped, a fresh session keyring, bubblewrap's options passed in a memfd.
 *
 * Sandbox layout (what a process sees):
 *   /home/agent      the workspace, read-write; HOME and the default working directory
 *   /usr             read-only; /bin /lib /lib64 /sbin (/lib32 /libx32) as on the host — symlinks
 *                    into /usr on merged-usr systems, read-only binds otherwise
 *   /etc             an allowlist of the host's /etc, read-only, plus passwd, group, hosts,
 *                    hostname and nsswitch.conf written for the guest (EtcView.ts)
 *   /opt             read-only, when the host has it
 *   /proc            a new procfs (own pid namespace); keys, key-users, acpi, driver (those of
 *                    Docker's masked paths anyone may read) masked; /proc/sys writable only for
 *                    the sandbox's own namespaces (ipc, mqueue, ns_last_pid, pid_max on 6.14+)
 *   /dev             a minimal /dev (read-only) with its own devpts and a /dev/shm tmpfs
 *   /tmp /var/tmp    private tmpfs, each at most --memory bytes
 *   --mount targets the user's own directories (HostMounts.ts: idmapped to the computer's uid when
 *                    the server is root), --deny-read paths masked, --deny-write ones read-only
 *   /run/kt-agent    the agent (a copy in the sandbox's own tmpfs); /run/kt-sandbox the launcher
 *   nothing else: no /root, /home/*, /var, /srv, /mnt, /media, /sys, no host /run; the root itself
 *   is read-only
 * Namespaces: user (no nested ones with bubblewrap 0.8+), pid, ipc, uts (hostname = the computer's
 * id when its sandbox started: a warm pool's computer keeps its pool name),
 * cgroup when possible, and net unless the network is on (then the host's network is shared). The
 * capability bounding set is empty, the sandbox gets a new session (no TIOCSTI into the server's
 * terminal) and dies with the server. The server's environment is never passed in: bwrap starts
 * with an empty one and every process gets exactly `SpawnSpec.env`. Limits (Cgroups.ts): processes
 * (RLIMIT_NPROC inside the user namespace, and a pids cgroup when possible), memory and CPU
 * (cgroups only; what cannot be limited is said at startup).
 *
 * `sandbox: "none"` runs the agent directly on the host (NOT isolated): cwd and HOME are the
 * workspace directory itself.
 */
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Random from "effect/Random"
import type * as Scope from "effect/Scope"
import { join, resolve } from "node:path"
import type { ProviderError } from "../../../domain/Errors.js"
import type { ComputerEgress } from "../../egress/Egress.js"
import type { FilesystemPolicy } from "../../../domain/Mounts.js"
import { Backend, type Capabilities, type Connection, type Instance, capabilitiesWithout } from "../../../services/Backend.js"
import { ownerAlive, processStartTime } from "../../server/ProcessOwner.js"
import * as AgentLauncher from "../agent/AgentLauncher.js"
import * as AgentProcesses from "../agent/AgentProcesses.js"
import * as NativeBinaries from "../agent/NativeBinaries.js"
import * as PrivateHelpers from "../agent/PrivateHelpers.js"
import * as Relay from "../agent/Relay.js"
import * as Cgroups from "./Cgroups.js"
import * as HostCheckpoints from "./HostCheckpoints.js"
import * as HostTrust from "./HostTrust.js"
import * as Launcher from "./Launcher.js"
import * as ComputerRecord from "./ComputerRecord.js"
import * as Workspaces from "./Workspaces.js"

export interface HostBackendOptions {
  /** Computers live in `<stateDir>/computers/<id>`. */
  readonly stateDir: string
  /** false → the sandbox has only a loopback interface. */
  readonly network: boolean
  /** "none" = explicit unsandboxed mode: processes run directly on the host, NOT isolated. */
  readonly sandbox: "bwrap" | "none"
  /** Path of bwrap; found in /usr/bin, /usr/local/bin or /bin when absent. */
  readonly bwrap?: string | undefined
  /** Per-computer limits, as Docker's --pids-limit (512), --memory (1g) and --cpu (1). */
  readonly limits?: Cgroups.HostLimits | undefined
  /** A relay port inside each computer whose connections the server serves (the egress proxy). */
  readonly relay?: Relay.RelaySettings | undefined
  /** The user's own files in every computer (--mount, --deny-read, --deny-write; HostMounts.ts). */
  readonly filesystem?: FilesystemPolicy | undefined
  /** The egress proxy's variables for every process, and its CA bundle (HostTrust.ts). */
  readonly egress?: ComputerEgress | undefined
  /** Output each computer keeps per stream on its disk (its agent's --retain; default 32 MiB). */
  readonly retainBytes?: number | undefined
  /** Finished processes each computer keeps listable (its agent's --max-finished; default 100). */
  readonly maxFinished?: number | undefined
}

const NAME = "host"
/** A host computer's base image: an empty home. */
const IMAGE = "host"
const MINIMAL_ENV = { PATH: "/usr/local/bin:/usr/bin:/bin" }

/** The capabilities of the host backend. */
export const capabilities: Capabilities = capabilitiesWithout()

/** The host backend: bubblewrap sandboxes (or, explicitly, none) around workspace directories. */
export const make = (options: HostBackendOptions) =>
  Effect.gen(function*() {
    const binaries = yield* NativeBinaries.locate(NAME)
    // The helpers run from private copies of the bytes just checked, never from the package's files.
    const helpers = PrivateHelpers.helpersDir(resolve(options.stateDir))
    const agent = yield* PrivateHelpers.install(NAME, helpers, "kt-agent", binaries.agentBytes)
    const sandboxed = options.sandbox === "bwrap"
    const limits = yield* Cgroups.resolveLimits(options.limits)
    const owner = { pid: process.pid, startTime: processStartTime("self") ?? "" }
    const launcher = sandboxed
      ? yield* Launcher.make({
        bwrap: options.bwrap,
        network: options.network,
        limits,
        agent,
        helpers,
        owner,
        ownerAlive: (other) => ownerAlive(other.pid, other.startTime),
        filesystem: options.filesystem,
        stateDir: resolve(options.stateDir)
      })
      : undefined
    if (!sandboxed) yield* Effect.logWarning("host backend: running WITHOUT a sandbox; processes are NOT isolated from this machine")

    const computersDir = resolve(options.stateDir, "computers")
    const token = (yield* Random.nextIntBetween(0, 0x7fffffff)).toString(36)
    const workspaces = Workspaces.make({
      computersDir,
      self: { pid: owner.pid, start: owner.startTime, token },
      hostIds: launcher === undefined ? () => Effect.succeed(undefined) : launcher.hostIds
    })
    const agentArgs = [
      ...(options.relay === undefined ? [] : ["--relay-port", String(options.relay.port)]),
      ...(options.retainBytes === undefined ? [] : ["--retain", String(options.retainBytes)]),
      ...(options.maxFinished === undefined ? [] : ["--max-finished", String(options.maxFinished)])
    ]
    const trust = options.egress === undefined ? [] : yield* HostTrust.binds(options.stateDir, options.egress)
    const placeOf = (dir: string, agentKey: string): AgentLauncher.AgentPlace => ({ socket: join(dir, "agent.sock"), key: agentKey })

    /** Attaches to the computer's agent, starting its sandbox when none runs. */
    const connect = (instance: Instance): Effect.Effect<Connection, ProviderError, Scope.Scope> =>
      Effect.gen(function*() {
        const { dir, home, record } = yield* workspaces.open(instance)
        const id = record.metadata.id
        const durable = !record.metadata.temporary
        const lost = yield* Deferred.make<string>()
        // Made only when the agent must be started. In the sandbox guests lose every capability and
        // get the seccomp filter; unsandboxed (NOT isolated, by choice) they run as the server's user would.
        const command: Effect.Effect<AgentLauncher.AgentCommand, ProviderError, Scope.Scope> = launcher !== undefined
          ? Effect.map(
            launcher.prepare({ id, key: record.key, dir, home, durable, ids: record.ids, agentArgs, binds: trust }),
            (sandbox) => ({ ...sandbox, cwd: home, env: MINIMAL_ENV })
          )
          : Effect.succeed({
            file: agent,
            args: [
              "--listen", join(dir, "agent.sock"),
              "--store", join(dir, "store"),
              ...(durable ? [] : ["--bound"]),
              "--caps", "keep", "--no-seccomp",
              ...agentArgs
            ],
            cwd: home,
            env: MINIMAL_ENV
          })
        const relay = options.relay
        const listener = relay === undefined ? undefined : yield* Relay.listener((connection) => relay.handler(id, connection))
        // Closing the Scope lets go of the agent (a temporary computer's, bound to this server, ends).
        const client = yield* AgentLauncher.open(NAME, placeOf(dir, record.agentKey), command, !durable, {
          onLost: (reason) => Deferred.unsafeDone(lost, Exit.succeed(reason)),
          relay: listener
        })
        return {
          home: sandboxed ? Launcher.SANDBOX_HOME : home,
          spawn: (spec) => AgentProcesses.spawn(NAME, client, spec),
          openPort: (port) => client.openPort(port),
          lost: Deferred.await(lost),
          held: AgentProcesses.held(NAME, client),
          lease: (step) => AgentProcesses.lease(NAME, client, id, step)
        } satisfies Connection
      }).pipe(Effect.withSpan("HostBackend.connect"))

    /** Ends the computer's agent and every process it holds, and what is left in its cgroups. */
    const stopAgent = (instance: Instance) =>
      Effect.gen(function*() {
        const dir = workspaces.dirOf(instance.metadata.id)
        const record = yield* ComputerRecord.read(dir)
        if (Option.isNone(record) || record.value.agentKey === undefined) return
        yield* AgentLauncher.stop(NAME, placeOf(dir, record.value.agentKey))
        if (launcher !== undefined && record.value.key !== undefined) yield* launcher.release(record.value.key)
      })

    return Backend.of({
      name: NAME,
      capabilities,
      labelStyle: "dashed",
      image: IMAGE,
      find: workspaces.find,
      create: workspaces.create,
      start: workspaces.start,
      connect,
      // The kernel ended the processes and closed its connection; the agent goes too, and connecting
      // again starts a fresh sandbox on the same workspace.
      restart: (instance) => Effect.zipRight(stopAgent(instance), workspaces.start(instance)),
      remove: (instance) => Effect.zipRight(stopAgent(instance), workspaces.remove(instance)),
      // Unsandboxed, processes see the workspace's host path, which a rename would pull away.
      adopt: sandboxed ? workspaces.adopt : undefined,
      checkpoints: HostCheckpoints.make({
        checkpointsDir: resolve(options.stateDir, "checkpoints"),
        computersDir,
        homeOf: workspaces.homeOf,
        freeze: launcher === undefined ? undefined : (instance) =>
          Effect.flatMap(workspaces.keyOf(instance), (key) =>
            key === undefined ? Effect.succeed(false) : launcher.freeze(key, !instance.metadata.temporary)),
        create: workspaces.create,
        remove: workspaces.remove
      }),
      environment: options.egress?.env
    })
  })

/** The host backend as a Layer; fails when the sandbox cannot work here, saying how to fix it. */
export const layer = (options: HostBackendOptions): Layer.Layer<Backend, ProviderError> => Layer.scoped(Backend, make(options))
