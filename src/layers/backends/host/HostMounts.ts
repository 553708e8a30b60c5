/**
 * The user's own files in a host computer (see `domain/Mounts.ts`): each --mount bound at its
 * target, --deny-write paths inside writable mounts bound again read-only, --deny-read paths masked
 * (an empty read-only tmpfs on a directory, /dev/null on a file) wherever the sandbox would show
 * them: inside a mount, or under /usr, /etc, /opt and /bin, /sbin, /lib*.
 *
 * Ownership: when the server is root, every computer runs as a dedicated unprivileged host uid
 * (GuestUser.ts), which could not write the user's files. kt-sandbox therefore idmaps each mount
 * (`--kt-user-bind`): the owner of the mounted directory on disk is the computer's uid through it,
 * so the agent works on the files as `agent`, and what it creates is owned, on disk, by the
 * directory's owner, who can use it afterwards. Files of other owners keep their ids (shown as
 * `nobody` inside) and are writable only where their modes let anyone write. Because what the
 * computer creates there belongs to the directory's owner (root, for a root-owned directory), the
 * agent is started with `--no-setid-files`: no setuid or setgid file can be made. When the server
 * is not root, the sandbox runs as the server's own uid and writes as it.
 */
import { statSync } from "node:fs"
import * as Mounts from "../../../domain/Mounts.js"
import type { Bind } from "./Launcher.js"

/** Host directories the sandbox shows read-only (Sandbox.ts, EtcView.ts). */
const VISIBLE = ["/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"]

const exists = (path: string) => {
  try {
    return statSync(path).isDirectory() ? "directory" : "file"
  } catch {
    return undefined
  }
}

/** The binds and masks of a policy, in the order bubblewrap must make them (after the workspace). */
export const binds = (policy: Mounts.FilesystemPolicy): Array<Bind> => {
  const hostMounts = policy.mounts.filter((mount) => !mount.volume)
  const result: Array<Bind> = Mounts.ordered(hostMounts).map((mount) => ({
    source: mount.source,
    dest: mount.target,
    mode: mount.readOnly ? "user-read-only" : "user-read-write"
  }))
  for (const path of policy.denyWrite) {
    if (exists(path) === undefined) continue
    for (const place of Mounts.placesOf(hostMounts, path)) {
      if (!place.mount.readOnly) result.push({ source: path, dest: place.at, mode: "user-read-only" })
    }
  }
  for (const path of policy.denyRead) {
    const kind = exists(path)
    if (kind === undefined) continue
    const places = Mounts.placesOf(hostMounts, path).map((place) => place.at)
    if (VISIBLE.some((base) => Mounts.within(path, base))) places.push(path)
    for (const dest of new Set(places)) result.push({ source: "", dest, mode: kind === "directory" ? "mask-directory" : "mask-file" })
  }
  return result
}

/** Whether the computer can write the user's files (its agent then refuses setuid/setgid modes). */
export const writable = (policy: Mounts.FilesystemPolicy) => policy.mounts.some((mount) => !mount.volume && !mount.readOnly)
