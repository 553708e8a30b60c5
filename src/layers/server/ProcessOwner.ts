/**
 * Who owns a provider-side computer: the server process that created it, told apart from a later
 * process that reused its pid by its start time. The reaper reads it.
 */
import * as Layer from "effect/Layer"
import { randomBytes } from "node:crypto"
import { existsSync, readFileSync } from "node:fs"
import { hostname } from "node:os"
import type { Owner } from "../../domain/ComputerMetadata.js"
import { ServerIdentity } from "../../services/ServerIdentity.js"

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

/** This server process as an owner. */
export const self = (): Owner => ({ host: hostname(), pid: process.pid, start: processStartTime("self") ?? "" })

/** The identity of this server process: a fresh instance id, this host and pid. */
export const layer = (instanceId: string = randomBytes(6).toString("hex")) =>
  Layer.sync(ServerIdentity, () => {
    const owner = self()
    return {
      instanceId,
      owner,
      alive: (other: Owner) => other.host !== owner.host || ownerAlive(other.pid, other.start)
    }
  })

