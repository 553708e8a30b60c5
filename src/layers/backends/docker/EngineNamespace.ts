/**
 * Whether the container engine behind a unix socket sees this server's mounts: the process that
 * listens on the socket (found in /proc/net/unix and among the descriptors in /proc) is in this
 * process's mount namespace. Only then can a mount the server makes be what the engine binds
 * (DockerMounts.ts, "staged"); an engine on another machine, in another namespace (the server in a
 * container with the socket mounted), or one this server cannot inspect (not root) is not.
 */
import { readdirSync, readFileSync, readlinkSync, realpathSync } from "node:fs"

/** The inodes of the sockets listening at `path` (this network namespace's, as /proc/net/unix lists them). */
const listeningInodes = (path: string): Set<string> => {
  const names = new Set([path])
  try {
    names.add(realpathSync(path))
  } catch {
    return new Set()
  }
  const inodes = new Set<string>()
  for (const line of readFileSync("/proc/net/unix", "utf8").split("\n").slice(1)) {
    // Num RefCount Protocol Flags Type St Inode Path; flag 0x10000 (__SO_ACCEPTCON) marks a listening socket.
    const fields = line.trim().split(/\s+/)
    if (fields.length >= 8 && (parseInt(fields[3]!, 16) & 0x10000) !== 0 && names.has(fields.slice(7).join(" "))) inodes.add(fields[6]!)
  }
  return inodes
}

/** The pid of a process holding one of the socket `inodes`, or undefined. */
const holder = (inodes: Set<string>): string | undefined => {
  const links = new Set([...inodes].map((inode) => `socket:[${inode}]`))
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    let fds: Array<string>
    try {
      fds = readdirSync(`/proc/${pid}/fd`)
    } catch {
      continue
    }
    for (const fd of fds) {
      try {
        if (links.has(readlinkSync(`/proc/${pid}/fd/${fd}`))) return pid
      } catch {
        // closed meanwhile
      }
    }
  }
  return undefined
}

/** Whether the engine listening at the unix socket `path` is in this process's mount namespace. */
export const sharesMounts = (path: string): boolean => {
  try {
    const inodes = listeningInodes(path)
    if (inodes.size === 0) return false
    const pid = holder(inodes)
    return pid !== undefined && readlinkSync(`/proc/${pid}/ns/mnt`) === readlinkSync("/proc/self/ns/mnt")
  } catch {
    return false
  }
}
