/**
 * The user's files in computers, checked against this machine before the server starts: mount
 * sources exist (the operator's symlinks resolved once, here, but never one inside a writable
 * mount, where a computer could have made it), no mount covers the kernel's views, the agent's own
 * paths, the state directory or the audit log, deny lists make sense with the mounts, and flags
 * that a backend could not honour are refused (never ignored: a computer that sees more than the
 * user allowed fails open).
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { lstatSync, readlinkSync, realpathSync, statSync } from "node:fs"
import { basename, dirname, join } from "node:path"
import * as Mounts from "../domain/Mounts.js"
import { parseRunFlags } from "../layers/backends/docker/DockerRunFlags.js"
import type { SettingsShape } from "../services/Settings.js"
import type { BackendChoice } from "./BackendChoice.js"
import { ConfigRefused } from "./CliError.js"
import type { FlagValues } from "./FlagTable.js"

const refuse = (message: string) => Effect.fail(new ConfigRefused({ message }))

/** The computer's home on host and Docker computers (HOME and the default working directory). */
const HOME = "/home/agent"

/** The path with its symlinks resolved, when it exists; as given otherwise (the checks refuse it then). */
const real = (path: string) => {
  try {
    return realpathSync(path)
  } catch {
    return Mounts.clean(path)
  }
}

/**
 * `path` with the symlinks resolved the way realpath does, except one in a directory within
 * `guarded` (a writable mount's source, where a computer can make links): there the rest of the path
 * is left as it is, for the checks to refuse (a mount) and the backend to ignore (a deny rule).
 */
export const canonical = (path: string, guarded: ReadonlyArray<string>): string => {
  let done = "/"
  let rest = Mounts.clean(path).split("/").filter((part) => part !== "" && part !== ".")
  for (let links = 0; rest.length > 0;) {
    const part = rest.shift()!
    if (part === "..") {
      done = dirname(done)
      continue
    }
    const next = join(done, part)
    let link: string | undefined
    try {
      link = lstatSync(next).isSymbolicLink() ? readlinkSync(next) : undefined
    } catch {
      return join(next, ...rest)
    }
    if (link === undefined) {
      done = next
      continue
    }
    if (guarded.some((base) => Mounts.within(done, base)) || ++links > 40) return join(next, ...rest)
    if (link.startsWith("/")) done = "/"
    rest = [...link.split("/").filter((p) => p !== "" && p !== "."), ...rest]
  }
  return done
}

/** The first symlink on `path` (which `canonical` left there), or undefined. */
const symlinkOn = (path: string): string | undefined => {
  let at = ""
  for (const part of path.split("/").filter((p) => p !== "")) {
    at = `${at}/${part}`
    try {
      if (lstatSync(at).isSymbolicLink()) return at
    } catch {
      return undefined
    }
  }
  return undefined
}

/**
 * The policy the flags ask for: --mount, SANDBOX_ALLOW_WRITE (a writable mount at the same path),
 * DOCKER_VOLUME (a named volume at the working directory), the deny lists; host paths canonical.
 */
export const filesystemPolicy = (values: FlagValues): Mounts.FilesystemPolicy => {
  const specs: Array<Mounts.Mount> = []
  for (const text of values.mount) {
    const parsed = Mounts.parseMount(text)
    if (Either.isRight(parsed)) specs.push(parsed.right)
  }
  for (const path of values.allowWrite) specs.push({ source: path, target: Mounts.clean(path), readOnly: false })
  const guarded = specs.filter((mount) => !mount.readOnly).map((mount) => real(mount.source))
  const resolve = (path: string) => canonical(path, guarded)
  const mounts: Array<Mounts.Mount> = specs.map((mount) => ({ ...mount, source: resolve(mount.source) }))
  if (values.dockerVolume !== undefined) {
    mounts.push({ source: values.dockerVolume, target: values.workdir ?? HOME, readOnly: false, volume: true })
  }
  return { mounts, denyRead: values.denyRead.map(resolve), denyWrite: values.denyWrite.map(resolve) }
}

/** Mount targets the agent itself needs, per backend. */
const RESERVED: Record<"host" | "docker", ReadonlyArray<string>> = {
  host: [HOME, "/run/kt-agent", "/run/kt-sandbox"],
  docker: ["/.kilntainers"]
}
/** Host paths whose mount would hand a computer this machine: the engine's socket. */
const ENGINE_SOCKETS = ["/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock"]

const kind = (path: string) => {
  try {
    const stat = statSync(path)
    return stat.isDirectory() ? "directory" : stat.isFile() ? "file" : "other"
  } catch {
    return "missing"
  }
}

/** Whether two host paths overlap: one is the other or inside it. */
const overlap = (a: string, b: string) => Mounts.within(a, b) || Mounts.within(b, a)

const checkMount = (mount: Mounts.Mount, backend: "host" | "docker", stateDir: string) =>
  Effect.gen(function*() {
    const label = `--mount ${mount.source}:${mount.target}`
    const reserved = RESERVED[backend].find((path) => Mounts.within(mount.target, path) && (path !== HOME || mount.target === HOME))
    if (reserved !== undefined && !(mount.volume && backend === "docker")) {
      return yield* refuse(`${label}: ${reserved} is the computer's own (${reserved === HOME ? "its home and workspace; mount below it, e.g. /home/agent/project" : "the agent"})`)
    }
    if (mount.volume) return
    if (ENGINE_SOCKETS.includes(mount.source)) {
      return yield* refuse(`${label}: the container engine's socket would give computers control of this machine`)
    }
    const link = symlinkOn(mount.source)
    if (link !== undefined) {
      return yield* refuse(`${label}: ${link} is a symbolic link inside a writable mount, where computers can make one; name the path it leads to`)
    }
    const found = kind(mount.source)
    if (found === "missing") return yield* refuse(`${label}: the host path ${mount.source} does not exist`)
    if (found === "other") return yield* refuse(`${label}: the host path ${mount.source} is neither a directory nor a file`)
    if (mount.source === "/") return yield* refuse(`${label}: mounting the host's root would show computers this whole machine`)
    const system = ["/proc", "/sys", "/dev"].find((base) => Mounts.within(mount.source, base))
    if (system !== undefined) return yield* refuse(`${label}: ${system} of this machine is not for computers`)
    const state = real(stateDir)
    if (overlap(mount.source, state)) {
      return yield* refuse(
        `${label}: it overlaps kilntainers' state directory ${state}, where computers' workspaces and agents and the egress CA's key live`
      )
    }
  })

/** The host paths of `--docker-run-flag --volume` binds (named volumes are not host paths). */
const flagBinds = (values: FlagValues): Array<string> => {
  const parsed = parseRunFlags(values.dockerRunFlag)
  return Either.isLeft(parsed) ? [] : parsed.right.binds.map((bind) => bind.split(":")[0]!).filter((source) => source.startsWith("/")).map(real)
}

/** Refuses a state directory or an audit log that a computer could see (through any mount). */
const checkPrivatePaths = (values: FlagValues, backend: "host" | "docker", settings: SettingsShape, sources: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const all = backend === "docker" ? [...sources, ...flagBinds(values)] : sources
    const state = real(settings.stateDir)
    const covering = all.find((source) => overlap(source, state))
    if (covering !== undefined) {
      return yield* refuse(`--docker-run-flag --volume ${covering}: it overlaps kilntainers' state directory ${state}, where the egress CA's key lives`)
    }
    const audit = values.auditLog
    if (audit === undefined) return
    const file = join(real(dirname(audit)), basename(audit))
    const seen = [...all, join(state, "computers")].find((source) => overlap(source, file))
    if (seen !== undefined) {
      return yield* refuse(
        `--audit-log ${audit}: it is inside ${seen}, which computers see: they could read it or put a link in its place; keep it outside every mount`
      )
    }
  })

/** Refuses what cannot work or would expose more than asked; returns warnings. */
export const mountChecks = (values: FlagValues, choice: BackendChoice, settings: SettingsShape) =>
  Effect.gen(function*() {
    const warnings: Array<string> = []
    const policy = settings.filesystem
    const backend = choice.backend
    const hostPaths = policy.mounts.filter((mount) => !mount.volume)
    if (backend !== "host" && backend !== "docker") {
      if (hostPaths.length > 0) {
        return yield* refuse(
          `--mount (and SANDBOX_ALLOW_WRITE) cannot apply to --backend ${backend}: its computers do not run on this machine; ` +
            `use --backend host or docker, or copy files in with file_write`
        )
      }
      if (policy.denyRead.length + policy.denyWrite.length > 0) {
        warnings.push(`--deny-read/--deny-write have nothing to hide on --backend ${backend}: none of this host's files are visible there`)
      }
      if (settings.dockerContainer !== undefined) warnings.push(`--docker-container applies to --backend docker only: ignored`)
      return warnings
    }
    if (backend === "host" && values.unsafeNoSandbox && (hostPaths.length > 0 || policy.denyRead.length > 0)) {
      return yield* refuse("--mount and --deny-read need the sandbox: with --unsafe-no-sandbox processes see this whole machine")
    }
    const targets = new Set<string>()
    for (const mount of policy.mounts) {
      if (mount.volume && backend !== "docker") continue
      yield* checkMount(mount, backend, settings.stateDir)
      if (targets.has(mount.target)) return yield* refuse(`--mount: two mounts at ${mount.target}`)
      targets.add(mount.target)
    }
    yield* checkPrivatePaths(values, backend, settings, hostPaths.map((mount) => mount.source))
    for (const path of policy.denyRead) {
      const covering = hostPaths.find((mount) => Mounts.within(mount.source, path) && mount.source !== path)
      if (covering !== undefined || hostPaths.some((mount) => mount.source === path)) {
        return yield* refuse(`--deny-read ${path} hides the whole of --mount ${(covering ?? hostPaths.find((m) => m.source === path))!.source}: drop one of them`)
      }
      if (kind(path) === "missing") warnings.push(`--deny-read ${path}: no such path on this machine; nothing to hide`)
    }
    for (const path of policy.denyWrite) {
      if (kind(path) === "missing") {
        warnings.push(`--deny-write ${path}: no such path on this machine; ignored`)
        continue
      }
      if (!hostPaths.some((mount) => !mount.readOnly && Mounts.inside(mount, path) !== undefined)) {
        warnings.push(`--deny-write ${path} is in no writable mount: computers cannot write it anyway`)
      }
    }
    const workdir = settings.workdir
    if (workdir !== undefined && backend === "host") {
      const visible = [HOME, "/tmp", "/var/tmp", ...policy.mounts.map((mount) => mount.target)]
      if (!visible.some((base) => Mounts.within(workdir, base))) {
        return yield* refuse(
          `--workdir ${workdir} does not exist in host computers, which see only /home/agent, /tmp, /var/tmp and the ` +
            `mounts; mount the directory there (--mount ${workdir}:${workdir}) or choose a path below /home/agent`
        )
      }
    }
    if (settings.dockerContainer !== undefined && backend !== "docker") {
      warnings.push(`--docker-container applies to --backend docker only: ignored`)
    }
    if (settings.dockerContainer !== undefined && backend === "docker" && policy.mounts.length > 0) {
      warnings.push(`--mount does not change the adopted container ${settings.dockerContainer}: its mounts were fixed when it was created`)
    }
    return warnings
  })
