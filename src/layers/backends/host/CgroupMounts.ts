/**
 * Where this process sits among cgroups, as the kernel says: the mounts of /proc/self/mountinfo
 * (cgroup hierarchies among them), the server's own cgroup per hierarchy (/proc/self/cgroup), and
 * a cgroup path's directory under a mount. Apart from Cgroups.ts (which plans and makes computers'
 * cgroups) and read by Freezer.ts too. Unreadable files read as nothing found.
 */
import { readFileSync } from "node:fs"
import { join } from "node:path"

/** A line of /proc/self/mountinfo. */
export interface Mount {
  readonly root: string
  readonly point: string
  readonly type: string
  readonly options: ReadonlyArray<string>
}

const unescape = (field: string) => field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)))

export const mounts = (): ReadonlyArray<Mount> => {
  try {
    return readFileSync("/proc/self/mountinfo", "utf8").split("\n").flatMap((line) => {
      const [left, right] = line.split(" - ")
      if (left === undefined || right === undefined) return []
      const fields = left.split(" ")
      const [type, , superOptions] = right.split(" ")
      return [{ root: unescape(fields[3] ?? "/"), point: unescape(fields[4] ?? ""), type: type ?? "", options: (superOptions ?? "").split(",") }]
    })
  } catch {
    return []
  }
}

/** `/proc/self/cgroup`: hierarchy controllers ("" for v2) → own path. */
export const ownPaths = (): ReadonlyArray<{ readonly controllers: ReadonlyArray<string>; readonly path: string }> => {
  try {
    return readFileSync("/proc/self/cgroup", "utf8").trim().split("\n").map((line) => {
      const [, controllers = "", ...path] = line.split(":")
      return { controllers: controllers === "" ? [] : controllers.split(","), path: path.join(":") }
    })
  } catch {
    return []
  }
}

export const within = (mount: Mount, path: string) =>
  join(mount.point, mount.root !== "/" && path.startsWith(mount.root) ? path.slice(mount.root.length) : path)
