/**
 * The user's own files in a computer (`--mount`, `--deny-read`, `--deny-write`, process-mcp's
 * `SANDBOX_ALLOW_WRITE`, `DOCKER_VOLUME`): the specs as written, and where a host path lands
 * inside a computer. Pure: the checks against this machine's filesystem are `cli/MountChecks.ts`,
 * the bwrap and Docker forms are the backends'.
 */
import * as Either from "effect/Either"
import { isAbsolute, normalize } from "node:path"

/** A host directory (or file, or a Docker named volume) seen inside every computer at `target`. */
export interface Mount {
  /** An absolute host path (resolved: no symlink in it), or a Docker volume name (`volume: true`). */
  readonly source: string
  /** An absolute path inside the computer. */
  readonly target: string
  readonly readOnly: boolean
  /** `source` names a Docker named volume (process-mcp's DOCKER_VOLUME), not a host path. */
  readonly volume?: boolean | undefined
}

/** What of the host a computer sees and may change, beyond the backend's own layout. */
export interface FilesystemPolicy {
  readonly mounts: ReadonlyArray<Mount>
  /** Host paths hidden inside computers (masked where they would be visible). */
  readonly denyRead: ReadonlyArray<string>
  /** Host paths inside writable mounts that stay read-only. */
  readonly denyWrite: ReadonlyArray<string>
}

export const emptyPolicy: FilesystemPolicy = { mounts: [], denyRead: [], denyWrite: [] }

/** Paths no mount may cover or sit in: the kernel's views and the root itself. */
const SYSTEM = ["/proc", "/sys", "/dev"]

/** `/a/b/` and `/a//b` as `/a/b`. */
export const clean = (path: string) => {
  const normal = normalize(path)
  return normal.length > 1 && normal.endsWith("/") ? normal.slice(0, -1) : normal
}

/** `path` is `base` or below it. */
export const within = (path: string, base: string) => base === "/" || path === base || path.startsWith(`${base}/`)

/**
 * `HOST_PATH:PATH[:ro|:rw]` (as docker -v). Only the syntax and the target are checked here; the
 * source's existence is checked at startup.
 */
export const parseMount = (text: string): Either.Either<Mount, string> => {
  const parts = text.split(":")
  let mode: string | undefined
  if (parts.length === 3) mode = parts.pop()
  if (parts.length !== 2 || parts[0] === "" || parts[1] === "") {
    return Either.left(`expected HOST_PATH:PATH or HOST_PATH:PATH:ro, got '${text}'`)
  }
  if (mode !== undefined && mode !== "ro" && mode !== "rw") {
    return Either.left(`the mode of '${text}' must be ro or rw (got '${mode}')`)
  }
  const [source, target] = parts as [string, string]
  if (!isAbsolute(source)) return Either.left(`the host path of '${text}' must be absolute (got '${source}')`)
  const problem = targetProblem(target)
  if (problem !== undefined) return Either.left(`'${text}': ${problem}`)
  return Either.right({ source: clean(source), target: clean(target), readOnly: mode === "ro" })
}

/** Why a path inside a computer cannot receive a mount, or undefined. */
export const targetProblem = (target: string): string | undefined => {
  if (!isAbsolute(target)) return `the path inside the computer must be absolute (got '${target}')`
  if (target.split("/").includes("..")) return `the path inside the computer must not contain '..' (got '${target}')`
  const path = clean(target)
  if (path === "/") return "a mount over / would replace the computer's whole filesystem"
  const system = SYSTEM.find((base) => within(path, base))
  if (system !== undefined) return `a mount over ${path} would hide the computer's ${system}`
  return undefined
}

/** An absolute host path for --deny-read/--deny-write/SANDBOX_ALLOW_WRITE, or why not. */
export const hostPathProblem = (path: string): string | undefined =>
  isAbsolute(path) ? undefined : `must be an absolute host path (got '${path}')`

/** Where the host path `path` is inside a computer through `mount`, or undefined when it is not under it. */
export const inside = (mount: Mount, path: string): string | undefined => {
  if (mount.volume || !within(path, mount.source)) return undefined
  const rest = path.slice(mount.source === "/" ? 0 : mount.source.length)
  return clean(mount.target + (rest.startsWith("/") || rest === "" ? rest : `/${rest}`))
}

/** Every place a host path is seen inside a computer through the mounts (a path can be under several). */
export const placesOf = (mounts: ReadonlyArray<Mount>, path: string): Array<{ readonly mount: Mount; readonly at: string }> =>
  mounts.flatMap((mount) => {
    const at = inside(mount, path)
    return at === undefined ? [] : [{ mount, at }]
  })

/**
 * The mounts ordered so that a mount inside another one's target comes after it (the shorter
 * target first), as Docker orders them too.
 */
export const ordered = (mounts: ReadonlyArray<Mount>): Array<Mount> =>
  [...mounts].sort((a, b) => a.target.split("/").length - b.target.split("/").length)
