/**
 * The user's own files in Docker computers (see `domain/Mounts.ts`) as the container's HostConfig:
 * each --mount a bind (`SRC:DEST[:ro]`, a DOCKER_VOLUME a named volume), --deny-write paths inside
 * writable mounts bound again read-only, --deny-read paths inside mounts masked (an empty read-only
 * tmpfs on a directory, /dev/null on a file). A container sees nothing else of the host, so a
 * --deny-read path outside every mount has nothing to hide. The engine orders the mounts by depth.
 *
 * Ownership: Docker's own. Processes run as the image's user (root unless --docker-run-flag --user),
 * and what they create in a bind mount belongs on disk to that uid; run them as the directory's owner
 * with `--docker-run-flag=--user=UID:GID` to get files the user owns.
 */
import { statSync } from "node:fs"
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
export const containerMounts = (policy: Mounts.FilesystemPolicy): ContainerMounts => {
  const binds: Array<string> = Mounts.ordered(policy.mounts).map((mount) =>
    `${mount.source}:${mount.target}${mount.readOnly ? ":ro" : ""}`
  )
  const hostMounts = policy.mounts.filter((mount) => !mount.volume)
  for (const path of policy.denyWrite) {
    if (kind(path) === undefined) continue
    for (const place of Mounts.placesOf(hostMounts, path)) if (!place.mount.readOnly) binds.push(`${path}:${place.at}:ro`)
  }
  const tmpfs: Record<string, string> = {}
  for (const path of policy.denyRead) {
    const found = kind(path)
    if (found === undefined) continue
    for (const place of Mounts.placesOf(hostMounts, path)) {
      if (found === "directory") tmpfs[place.at] = "ro,size=64k"
      else binds.push(`/dev/null:${place.at}:ro`)
    }
  }
  return { binds, tmpfs }
}
