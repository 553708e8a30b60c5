/**
 * The host sandbox: how bubblewrap is found, checked and told what a computer's processes see.
 * See HostBackend.ts for the layout, GuestUser.ts for who the processes are, EtcView.ts for /etc
 * and Launcher.ts for how bubblewrap is started.
 */
import * as Effect from "effect/Effect"
import { execFile, execFileSync } from "node:child_process"
import { existsSync, lstatSync, readlinkSync, statSync } from "node:fs"
import { providerError } from "../../../domain/Errors.js"
import { etcArgs } from "./EtcView.js"
import { GUEST } from "./GuestUser.js"

const NAME = "host"
const MINIMAL_ENV = { PATH: "/usr/local/bin:/usr/bin:/bin" }
export const NO_SANDBOX_HINT = "or start with --unsafe-no-sandbox to run unsandboxed (NOT isolated)"
/** The sandbox cannot work on this host: the message says how to fix it. */
const fail = (detail: string) => providerError(NAME, "start sandboxes", "Unavailable", detail)

export const findBwrap = (configured: string | undefined): string | undefined =>
  configured ?? ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"].find((path) => existsSync(path))

/** Options of bubblewrap newer than some distributions ship (0.8: --disable-userns; 0.7: --size). */
export interface BwrapFeatures {
  readonly disableUserns: boolean
  readonly tmpfsSize: boolean
}

/** What this bubblewrap supports, from its --help. */
export const bwrapFeatures = (bwrap: string): BwrapFeatures => {
  let help = ""
  try {
    help = execFileSync(bwrap, ["--help"], { env: MINIMAL_ENV, timeout: 10_000, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })
  } catch (error) {
    help = String((error as { stdout?: unknown }).stdout ?? "")
  }
  return { disableUserns: help.includes("--disable-userns"), tmpfsSize: help.includes("--size") }
}

/**
 * /proc files and directories hidden from guests, as Docker hides them: those this kernel has and
 * that anyone may read or write (the root-only ones are out of an unprivileged guest's reach
 * already; each mask costs a mount at every sandbox start).
 */
const PROC_MASKED_FILES = ["kcore", "keys", "key-users", "timer_list", "timer_stats", "sched_debug", "latency_stats", "sysrq-trigger", "kmsg"]
const PROC_MASKED_DIRS = ["acpi", "scsi", "asound", "driver"]
const openToAll = (path: string) => {
  try {
    return (statSync(path).mode & 0o066) !== 0
  } catch {
    return false
  }
}

/** How a computer's sandbox is laid out. */
export interface SandboxLayout {
  readonly hostname: string
  readonly network: boolean
  /**
   * The guest is `agent` (GuestUser.GUEST) in a user namespace of its own, with no way to create
   * further ones, and /etc/passwd etc. are written for it (needs kt-sandbox, see Launcher.ts).
   * Absent: bwrap runs as whoever starts it and binds the host's account files (test fakes).
   */
  readonly guest?: { readonly features: BwrapFeatures; readonly tmpfsBytes: number } | undefined
}

/** bwrap arguments for the filesystem layout and namespaces, without the computer's own mounts. */
export const sandboxArgs = (options: SandboxLayout): Array<string> => {
  const guest = options.guest
  const args: Array<string> = []
  if (guest !== undefined) {
    args.push("--unshare-user", "--uid", String(GUEST.uid), "--gid", String(GUEST.gid))
    if (guest.features.disableUserns) args.push("--disable-userns")
  }
  args.push("--ro-bind", "/usr", "/usr")
  for (const name of ["bin", "lib", "lib64", "sbin", "lib32", "libx32"]) {
    const path = `/${name}`
    try {
      const stat = lstatSync(path)
      if (stat.isSymbolicLink()) args.push("--symlink", readlinkSync(path), path)
      else if (stat.isDirectory()) args.push("--ro-bind", path, path)
    } catch {
      // absent on this host
    }
  }
  args.push(...etcArgs({ hostname: options.hostname, network: options.network, accounts: guest ? "synthesised" : "host" }))
  if (existsSync("/opt")) args.push("--ro-bind", "/opt", "/opt")
  const sized = (bytes: number | undefined) => (bytes !== undefined && guest?.features.tmpfsSize ? ["--size", String(bytes)] : [])
  args.push("--proc", "/proc")
  for (const name of PROC_MASKED_FILES) {
    if (openToAll(`/proc/${name}`)) args.push("--ro-bind", "/dev/null", `/proc/${name}`)
  }
  for (const name of PROC_MASKED_DIRS) {
    if (existsSync(`/proc/${name}`)) args.push("--tmpfs", `/proc/${name}`, "--remount-ro", `/proc/${name}`)
  }
  args.push(
    "--dev", "/dev",
    ...sized(guest?.tmpfsBytes), "--tmpfs", "/dev/shm",
    ...(guest ? ["--remount-ro", "/dev"] : []),
    ...sized(guest?.tmpfsBytes), "--tmpfs", "/tmp",
    ...sized(guest?.tmpfsBytes), "--tmpfs", "/var/tmp",
    "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
    ...(options.network ? [] : ["--unshare-net"]),
    "--die-with-parent",
    "--new-session",
    "--cap-drop", "ALL",
    "--hostname", options.hostname,
    "--clearenv"
  )
  return args
}

/**
 * Arguments that end the layout: the sandbox's own root (a tmpfs of bwrap's) becomes read-only
 * once every mount point on it exists, so nothing outside the workspace, /tmp, /var/tmp and
 * /dev/shm can be written.
 */
export const sealArgs = (): Array<string> => ["--remount-ro", "/"]

const run = (file: string, args: ReadonlyArray<string>) =>
  Effect.async<{
    readonly code: number | null
    readonly stderr: string
    readonly message: string
    readonly notFound: boolean
    readonly notRunnable: boolean
  }>((resume) => {
    const child = execFile(file, [...args], { env: MINIMAL_ENV, timeout: 20_000 }, (error, _stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : null) : 0
      resume(Effect.succeed({ code, stderr, message: error?.message ?? "", notFound: error?.code === "ENOENT", notRunnable: error?.code === "EACCES" }))
    })
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/**
 * Runs a trivial sandbox once, the way computers will be started (`command`: the launcher and
 * its arguments ending in `true`), and explains how to fix the host when it does not work.
 */
export const checkBwrap = (bwrap: string | undefined, command: (bwrap: string) => { readonly file: string; readonly args: ReadonlyArray<string> }, asUid: number | undefined) =>
  Effect.gen(function*() {
    if (bwrap === undefined) {
      return yield* fail(
        `bubblewrap (bwrap) is not installed, so processes cannot be isolated. Install it with 'sudo apt-get install bubblewrap' (dnf/pacman: package 'bubblewrap'), ${NO_SANDBOX_HINT}.`
      )
    }
    if (!existsSync(bwrap)) {
      return yield* fail(`bwrap was not found at ${bwrap}. Install it with 'sudo apt-get install bubblewrap', ${NO_SANDBOX_HINT}.`)
    }
    const { file, args } = command(bwrap)
    const result = yield* run(file, args)
    if (result.notFound) return yield* fail(`the sandbox launcher ${file} is missing; run 'npm run build:native'`)
    if (result.notRunnable) {
      // The launcher runs from the server's private copy in the state directory (PrivateHelpers.ts).
      return yield* fail(`the sandbox launcher ${file} cannot be run (EACCES): is the state directory on a filesystem mounted noexec? Choose another --state-dir`)
    }
    if (result.code === 0) return
    const said = result.stderr.trim() || result.message || `exit code ${result.code}`
    const who = asUid === undefined ? "" : ` as the unprivileged uid ${asUid} that computers run as when the server is root`
    if (/namespace|uid map|Operation not permitted|Permission denied/i.test(said)) {
      return yield* fail(
        `bwrap cannot create a sandbox here${who} (${said}). Unprivileged user namespaces are probably disabled: enable them with 'sudo sysctl -w kernel.unprivileged_userns_clone=1' (Debian) or 'sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0' (Ubuntu 23.10+), or allow them in the container runtime, ${NO_SANDBOX_HINT}.`
      )
    }
    return yield* fail(`bwrap does not work on this host${who} (${said}); ${NO_SANDBOX_HINT}.`)
  })
