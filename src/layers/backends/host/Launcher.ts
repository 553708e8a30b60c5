/**
 * How a host computer's sandbox is started: `native/kt-sandbox` (see its header) joins the
 * computer's cgroups, drops to the computer's unprivileged uid when the server is root, gives the
 * sandbox a fresh session keyring and execs bubblewrap with its options in a memfd, so that no host
 * path appears in the sandbox's pid 1 command line. Inside, kt-sandbox sets the process limit and
 * execs the agent.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import type * as Scope from "effect/Scope"
import { release } from "node:os"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import { locateHelper, type VerifiedHelper } from "../agent/NativeBinaries.js"
import * as PrivateHelpers from "../agent/PrivateHelpers.js"
import * as Cgroups from "./Cgroups.js"
import * as Freezer from "./Freezer.js"
import * as GuestUser from "./GuestUser.js"
import type { HostIds } from "./GuestUser.js"
import * as HostMounts from "./HostMounts.js"
import type { FilesystemPolicy } from "../../../domain/Mounts.js"
import * as MountObjects from "../mounts/MountObjects.js"
import * as MountTemplates from "../mounts/MountTemplates.js"
import { bwrapFeatures, checkBwrap, findBwrap, sandboxArgs, type SandboxLayout, sealArgs } from "./Sandbox.js"

const NAME = "host"
const kernelAtLeast = (major: number, minor: number) => {
  const [a = 0, b = 0] = release().split(".").map((part) => parseInt(part, 10))
  return a > major || (a === major && b >= minor)
}

/** Where the launcher itself is inside the sandbox (it sets the process limit there). */
export const SANDBOX_LAUNCHER = "/run/kt-sandbox"

/** Finds `kt-sandbox`, checked against its manifest (NativeBinaries.locateHelper). */
export const locate: Effect.Effect<VerifiedHelper, ProviderError> = locateHelper(NAME, "kt-sandbox")

/**
 * What the sandbox sees at `dest`:
 *   - a host path, bound (staged by kt-sandbox, so the unprivileged uid need not reach it), or, for
 *     "copy", an executable copied into the sandbox's own tmpfs, so that the sandbox's mount table
 *     does not show where kilntainers is installed;
 *   - "mask-*": nothing (`dest` hidden);
 *   - "user-*": the user's own directory (--mount), copied out of its mount template with the deny
 *     rules on it (MountTemplates.ts; `template` is kt-sandbox's TEMPLATE and FD), idmapped to the
 *     computer's uid when the server is root (HostMounts.ts).
 */
export type Bind =
  | { readonly source: string; readonly dest: string; readonly mode: "read-write" | "read-only" | "copy" }
  | { readonly dest: string; readonly mode: "mask-directory" | "mask-file" }
  | { readonly dest: string; readonly mode: "user-read-write" | "user-read-only"; readonly template: readonly [string, string] }

const bindOption = { "read-write": "--kt-bind", "read-only": "--kt-ro-bind", copy: "--kt-exec" } as const

const bindArgs = (bind: Bind): Array<string> => {
  switch (bind.mode) {
    case "mask-directory":
      return ["--tmpfs", bind.dest, "--remount-ro", bind.dest]
    case "mask-file":
      // An empty read-only file, as on Docker: /dev/null would be a device on a nodev mount (EACCES).
      return ["--kt-data", bind.dest, ""]
    case "user-read-write":
    case "user-read-only":
      return [bind.mode === "user-read-write" ? "--kt-user-bind" : "--kt-user-ro-bind", ...bind.template, bind.dest]
    default:
      return [bindOption[bind.mode], bind.source, bind.dest]
  }
}

export interface LaunchSpec {
  readonly launcher: string
  /**
   * The computer's directory, where kt-sandbox opens the agent's lock, socket and store (never a
   * path inside the sandbox); absent: no agent (the startup check).
   */
  readonly agentDir?: string | undefined
  /** The sandbox outlives the server (a permanent computer). */
  readonly detach?: boolean | undefined
  readonly bwrap: string
  readonly layout: SandboxLayout
  /** The computer's host uid/gid when the server is root; undefined: the server's own. */
  readonly ids: HostIds | undefined
  readonly cgroups: ReadonlyArray<string>
  /** kt-sandbox's options naming the mount templates (MountTemplates.ts), when there are any. */
  readonly templates?: ReadonlyArray<string> | undefined
  readonly binds: ReadonlyArray<Bind>
  /** RLIMIT_NPROC inside the sandbox; undefined: none. */
  readonly nproc: number | undefined
  readonly cwd: string
  readonly command: ReadonlyArray<string>
}

/** The launcher's command line for one sandbox. */
export const launchArgs = (spec: LaunchSpec): Array<string> => [
  // The channel (stdin: the key; stdout: the agent's socket, see --agent-dir) and the agent's stderr
  // bypass bubblewrap's init, whose descriptors the guest can take (it is dumpable and runs as the
  // guest's uid): its own stderr is a pipe that only kt-sandbox's relay reads, and only until the
  // sandbox is set up (kt-sandbox.c, step 6).
  "--channel",
  ...(spec.agentDir === undefined ? [] : ["--agent-dir", spec.agentDir]),
  ...(spec.detach ? ["--detach"] : []),
  ...(spec.ids === undefined ? [] : ["--uid", String(spec.ids.uid), "--gid", String(spec.ids.gid)]),
  ...spec.cgroups.flatMap((dir) => ["--cgroup", dir]),
  ...(spec.templates ?? []),
  "--",
  spec.bwrap,
  ...sandboxArgs(spec.layout),
  ...spec.binds.flatMap(bindArgs),
  "--kt-exec", spec.launcher, SANDBOX_LAUNCHER,
  ...sealArgs(),
  "--chdir", spec.cwd,
  "--",
  SANDBOX_LAUNCHER, ...(spec.nproc === undefined ? [] : ["--nproc", String(spec.nproc)]), "--sync", "8", "--stdio", "3", "4", "7", "--",
  ...spec.command
]

/** Where the workspace and the agent are inside the sandbox. */
export const SANDBOX_HOME = GuestUser.GUEST.home
export const SANDBOX_AGENT = "/run/kt-agent"

type Owner = { readonly pid: number; readonly startTime: string }

export interface LauncherOptions {
  readonly bwrap: string | undefined
  readonly network: boolean
  readonly limits: Cgroups.Limits
  /** kt-agent on the host: the server's private copy (PrivateHelpers.ts). */
  readonly agent: string
  /** Where the server keeps private copies of the helpers it runs (PrivateHelpers.helpersDir). */
  readonly helpers: string
  /** This server, and how to tell whether another server is alive (stale cgroups). */
  readonly owner: Owner
  readonly ownerAlive: (owner: Owner) => boolean
  /** The user's own files in every computer (--mount, --deny-read, --deny-write). */
  readonly filesystem?: FilesystemPolicy | undefined
  /** Where the deny rules' objects are recorded across restarts (MountObjects.hold). */
  readonly stateDir?: string | undefined
}

/** A computer about to start: its workspace on the host, its identity, the agent's extra options. */
export interface ComputerSandbox {
  readonly id: string
  readonly key: string
  /** The computer's directory on the host (its agent's socket, lock and store). */
  readonly dir: string
  readonly home: string
  /** Its agent outlives the server (a permanent computer); else it ends with the server. */
  readonly durable: boolean
  readonly ids: HostIds | undefined
  readonly agentArgs: ReadonlyArray<string>
  /** More host paths it sees (the egress CA bundle), bound after the /etc view. */
  readonly binds?: ReadonlyArray<Bind> | undefined
}

/** Starts computers' sandboxes for the host backend. */
export interface SandboxLauncher {
  /** The host ids of a computer when the server is root: those recorded, or new ones; else undefined. */
  readonly hostIds: (recorded: HostIds | undefined, taken: ReadonlySet<number>) => Effect.Effect<HostIds | undefined, ProviderError>
  /**
   * Creates the computer's cgroups (removed with the Scope; a durable computer's outlive it) and
   * gives the command that starts its agent.
   */
  readonly prepare: (
    computer: ComputerSandbox
  ) => Effect.Effect<
    { readonly file: string; readonly args: ReadonlyArray<string>; readonly fds: ReadonlyArray<number> },
    ProviderError,
    Scope.Scope
  >
  /** After a durable computer's agent ended: its cgroups go, and whatever is left in them. */
  readonly release: (key: string) => Effect.Effect<void>
  /**
   * Freezes the running computer with this key for the life of the Scope (a durable one's cgroups
   * have their own name); false when it cannot be frozen (Freezer.ts).
   */
  readonly freeze: (key: string, durable: boolean) => Effect.Effect<boolean, never, Scope.Scope>
}

/**
 * Checks that sandboxes can start here (as the unprivileged uid when the server is root), finds
 * where computers can be limited, removes cgroups of dead servers, holds the user's directories
 * and their templates for as long as the Scope lasts, and says on stderr what is limited and what
 * is not.
 */
export const make = (options: LauncherOptions): Effect.Effect<SandboxLauncher, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    // kt-sandbox runs, and is copied into each sandbox, from the server's copy of the bytes it checked.
    const launcher = yield* PrivateHelpers.install(NAME, options.helpers, "kt-sandbox", (yield* locate).bytes)
    const bwrap = findBwrap(options.bwrap)
    const features = bwrap === undefined ? { disableUserns: false, tmpfsSize: false } : bwrapFeatures(bwrap)
    const root = GuestUser.serverIsRoot()
    // RLIMIT_NPROC counts per user namespace since Linux 5.14; before, it counts every process of
    // the uid, which is the computer's own only when the server is root (a dedicated uid).
    const nproc = root || kernelAtLeast(5, 14) ? options.limits.pids : undefined
    const range = root ? Option.some(yield* GuestUser.uidRange()) : Option.none()
    // The first uid of the range is never given to a computer: the check runs as it.
    const checkIds = Option.map(range, (r) => ({ uid: r.first, gid: r.first }))
    const layout = (hostname: string, outlivesServer = false): SandboxLayout => ({
      hostname,
      network: options.network,
      guest: { features, tmpfsBytes: options.limits.memoryBytes },
      outlivesServer
    })
    const args = (bwrapPath: string, spec: Omit<LaunchSpec, "launcher" | "bwrap">) => launchArgs({ launcher, bwrap: bwrapPath, ...spec })
    yield* checkBwrap(bwrap, (bwrapPath) => ({
      file: launcher,
      args: args(bwrapPath, {
        layout: layout("kilntainers-check"),
        ids: Option.getOrUndefined(checkIds),
        cgroups: [],
        binds: [],
        nproc,
        cwd: "/",
        command: ["/bin/true"]
      })
    }), Option.getOrUndefined(Option.map(checkIds, (ids) => ids.uid)))
    if (!features.disableUserns) {
      yield* Effect.logWarning("host backend: this bubblewrap has no --disable-userns (0.8+): processes may create nested user namespaces")
    }

    const filesystem = options.filesystem
    const objects = filesystem === undefined ? undefined : yield* MountObjects.hold(filesystem, NAME, options.stateDir)
    const templates = objects === undefined ? undefined : yield* MountTemplates.make(launcher, objects, root ? "root" : "userns", NAME)
    const userBinds = filesystem === undefined ? [] : HostMounts.binds(filesystem, objects, templates)
    const setidArgs = filesystem !== undefined && HostMounts.writable(filesystem) ? ["--no-setid-files"] : []
    /** A source removed since the server started refuses the start, naming the mount. */
    const sourcesPresent = Effect.forEach(objects?.mounts ?? [], (held) =>
      MountObjects.present(held.object)
        ? Effect.void
        : providerError(NAME, "start the sandbox", "NotFound", `${MountObjects.mountLabel(held.mount)}: its host directory was removed`), { discard: true })

    const cgroups = yield* Freezer.withFreezer(yield* Cgroups.plan)
    yield* Cgroups.reapStale(cgroups, options.ownerAlive)
    const said = Cgroups.describe(cgroups, options.limits, nproc !== undefined)
    yield* Effect.logInfo(said.limited)
    if (Option.isSome(said.unlimited)) yield* Effect.logWarning(said.unlimited.value)

    return {
      freeze: (key, durable) => Freezer.hold(cgroups, durable ? Cgroups.durableName(key) : Cgroups.cgroupName(options.owner, key)),
      hostIds: (recorded, taken) =>
        Option.match(range, {
          onNone: () => Effect.succeed(undefined),
          onSome: (r) =>
            recorded !== undefined && recorded.uid !== r.first && recorded.uid !== 0 && recorded.gid !== 0
              ? Effect.succeed(recorded)
              : GuestUser.allocate(r, taken)
        }),
      prepare: (computer) =>
        Effect.gen(function*() {
          if (bwrap === undefined) return yield* providerError(NAME, "start the sandbox", "Unavailable", "bubblewrap is missing")
          yield* sourcesPresent
          const dirs = computer.durable
            ? yield* Cgroups.ensure(cgroups, Cgroups.durableName(computer.key), options.limits)
            : yield* Cgroups.create(cgroups, Cgroups.cgroupName(options.owner, computer.key), options.limits)
          return {
            file: launcher,
            args: args(bwrap, {
              layout: layout(computer.id, computer.durable),
              agentDir: computer.dir,
              detach: computer.durable,
              ids: computer.ids,
              cgroups: dirs,
              templates: templates?.options,
              binds: [
                { source: computer.home, dest: SANDBOX_HOME, mode: "read-write" },
                { source: options.agent, dest: SANDBOX_AGENT, mode: "copy" },
                ...userBinds,
                ...(computer.binds ?? [])
              ],
              nproc,
              cwd: SANDBOX_HOME,
              // Guests lose every capability and get the agent's seccomp filter. kt-sandbox hands the
              // agent its socket (stdout, after --stdio) and its store (descriptor 900).
              command: [
                SANDBOX_AGENT,
                "--listen-fd", "1",
                "--store-fd", "900",
                ...(computer.durable ? [] : ["--bound"]),
                "--caps", "drop",
                ...setidArgs,
                ...computer.agentArgs
              ]
            }),
            fds: templates?.fds ?? []
          }
        }),
      release: (key) => Cgroups.removeNamed(cgroups, Cgroups.durableName(key))
    }
  })
