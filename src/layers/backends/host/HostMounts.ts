/**
 * The user's own files in a host computer (see `domain/Mounts.ts`): each --mount copied out of its
 * mount template (`mounts/MountTemplates.ts`) at its target, with its --deny-write paths read-only
 * and its --deny-read paths hidden on the objects themselves, so that renaming or replacing
 * anything in a shared directory changes nothing; and --deny-read paths in the system directories
 * the sandbox shows (/usr, /etc, /opt and /bin, /sbin, /lib*, which no computer can write) masked
 * where they are: an empty read-only tmpfs on a directory, an empty read-only file on a file (the
 * /etc files written for the guest hold none of the host's bytes and stay).
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
import type { MountObjects } from "../mounts/MountObjects.js"
import type { MountTemplates } from "../mounts/MountTemplates.js"
import * as EtcView from "./EtcView.js"
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
export const binds = (policy: Mounts.FilesystemPolicy, objects?: MountObjects, templates?: MountTemplates): Array<Bind> => {
  const result: Array<Bind> = []
  if (objects !== undefined && templates !== undefined) {
    const depth = (target: string) => target.split("/").length
    for (const held of [...objects.mounts].sort((a, b) => depth(a.mount.target) - depth(b.mount.target))) {
      const [template, fd] = templates.spec(held)
      result.push({ dest: held.mount.target, mode: held.mount.readOnly ? "user-read-only" : "user-read-write", template: [template, fd] })
    }
  }
  for (const path of policy.denyRead) {
    const kind = exists(path)
    if (kind === undefined || !VISIBLE.some((base) => Mounts.within(path, base)) || EtcView.written.includes(path)) continue
    result.push({ dest: path, mode: kind === "directory" ? "mask-directory" : "mask-file" })
  }
  return result
}

/** Whether the computer can write the user's files (its agent then refuses setuid/setgid modes). */
export const writable = (policy: Mounts.FilesystemPolicy) => policy.mounts.some((mount) => !mount.volume && !mount.readOnly)
