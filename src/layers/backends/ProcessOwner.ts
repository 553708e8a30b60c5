/**
 * Who owns a provider-side computer: the server process that created it, told apart from a later
 * process that reused its pid by its start time. The reapers of the backends use it.
 */
import { existsSync, readFileSync } from "node:fs"

/** Start time (clock ticks since boot, /proc/<pid>/stat field 22) of a process, or undefined. */
export const processStartTime = (pid: number | "self"): string | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    // Field 2 (comm) may hold spaces and parentheses: count fields after its closing ')'.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]
  } catch {
    return undefined
  }
}

/** Whether the process that created a computer is still running on this host. */
export const ownerAlive = (pid: number, start: string | undefined): boolean => {
  if (!Number.isInteger(pid) || pid <= 0) return true
  if (existsSync("/proc/self/stat")) {
    const now = processStartTime(pid)
    if (now === undefined) return false
    return start === undefined || start === "" || start === now
  }
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as { code?: string }).code === "EPERM"
  }
}
