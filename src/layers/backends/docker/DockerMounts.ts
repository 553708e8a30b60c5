/**
 * The user's own files in Docker computers (see `domain/Mounts.ts`) as the container's HostConfig:
 * each --mount a bind (`SRC:DEST[:ro]`, a DOCKER_VOLUME a named volume), --deny-write paths inside
 * writable mounts bound again read-only, --deny-read paths inside mounts masked (an empty read-only
 * directory of the server's bound over a directory, /dev/null over a file: binds, because Podman
 * mounts every tmpfs before the binds, where a bind mount would cover it). A container sees nothing else of the host, so a
 * --deny-read path outside every mount has nothing to hide. The engine orders the mounts by depth.
 *
 * Ownership: Docker's own. Processes run as the image's user (root unless --docker-run-flag --user),
 * and what they create in a bind mount belongs on disk to that uid; run them as the directory's owner
 * with `--docker-run-flag=--user=UID:GID` to get files the user owns.
 */
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Mounts from "../../../domain/Mounts.js"

export interface ContainerMounts {
  readonly binds: ReadonlyArray<string>
  readonly tmpfs: Readonly<Record<string, string>>
}

export const none: ContainerMounts = { binds: [], tmpfs: {} }

const kind = (path: string) => {
  try {
    return statSync(path).isDirectory() ? "directory" : "file"
  } catch {
    return undefined
  }
}

/** The binds and tmpfs masks of a policy. */
export const containerMounts = (policy: Mounts.FilesystemPolicy, emptyDir: string): ContainerMounts => {
  const binds: Array<string> = Mounts.ordered(policy.mounts).map((mount) =>
    `${mount.source}:${mount.target}${mount.readOnly ? ":ro" : ""}`
  )
  const hostMounts = policy.mounts.filter((mount) => !mount.volume)
  for (const path of policy.denyWrite) {
    if (kind(path) === undefined) continue
    for (const place of Mounts.placesOf(hostMounts, path)) if (!place.mount.readOnly) binds.push(`${path}:${place.at}:ro`)
  }
  for (const path of policy.denyRead) {
    const found = kind(path)
    if (found === undefined) continue
    for (const place of Mounts.placesOf(hostMounts, path)) {
      binds.push(`${found === "directory" ? emptyDir : "/dev/null"}:${place.at}:ro`)
    }
  }
  return { binds, tmpfs: {} }
}

/**
 * The empty read-only directory that masks denied directories: made once under the state
 * directory (or a fresh temporary one), and refused when something was put in it.
 */
export const emptyDirectory = (stateDir: string | undefined): string => {
  const dir = stateDir === undefined ? mkdtempSync(join(tmpdir(), "kilntainers-empty-")) : join(stateDir, "docker-empty")
  mkdirSync(dir, { recursive: true, mode: 0o555 })
  chmodSync(dir, 0o555)
  if (readdirSync(dir).length > 0) throw new Error(`${dir} must be empty: it masks --deny-read directories`)
  return dir
}
