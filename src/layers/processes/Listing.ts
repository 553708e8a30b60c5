/**
 * What `ps` shows: the running processes, then the finished ones newest first (by default only the
 * last `psFinished` of them), within `limit`, and how many it left out.
 */
import type { ProcessInfo } from "../../domain/Process.js"
import type { ListFilter } from "../../services/ProcessInputs.js"
import type { ListResult } from "../../services/Processes.js"

/** `infos` oldest first, as the table lists them. */
export const listing = (infos: ReadonlyArray<ProcessInfo>, filter: ListFilter, psFinished: number): ListResult => {
  const status = filter.status ?? (filter.limit === undefined ? "default" : "all")
  const running = infos.filter((info) => info.status === "running")
  const done = infos.filter((info) => info.status !== "running").reverse()
  const shown = status === "running"
    ? running
    : status === "terminated"
    ? done
    : status === "all"
    ? [...running, ...done]
    : [...running, ...done.slice(0, psFinished)]
  const limited = filter.limit === undefined ? shown : shown.slice(0, filter.limit)
  const candidates = status === "running" ? running.length : status === "terminated" ? done.length : infos.length
  const hidden = candidates - limited.length
  return { processes: limited, ...(hidden > 0 ? { hidden } : {}) }
}
