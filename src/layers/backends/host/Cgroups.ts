/**
 * Per-computer limits on processes, memory and CPU for the host backend, with cgroups.
 *
 * Each limited controller is taken from wherever this server may create cgroups:
 * - cgroup v2 as root: `<hierarchy root>/kilntainers/kt-…`, beside the rest of the machine;
 * - cgroup v2 delegated to the server (its own cgroup is writable by it, e.g. under
 *   `systemd-run --user --scope -p Delegate=yes`). Since a v2 cgroup with children may hold no
 *   processes, the server first moves itself into a leaf `<own>/kilntainers-server`; computers get
 *   `<own>/kt-…` beside it. That only works when the server is alone in its cgroup;
 * - cgroup v1 as root, under `<controller mount><own path>/kilntainers/kt-…`.
 * A controller offered by neither is not limited (said at startup; the process count still has
 * RLIMIT_NPROC inside the sandbox, see kt-sandbox).
 *
 * A temporary computer's cgroups are named `kt-<server pid>-<server start time>-<computer key>`:
 * they are removed when the computer ends (its processes killed first), and a new server removes
 * those of servers that died. A permanent computer's (its agent outlives the server) are named
 * `kt-c-<computer key>`: made when its agent starts, kept while it runs whatever server comes and
 * goes, removed when the computer is restarted, reset or deleted.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { accessSync, constants, readFileSync } from "node:fs"
import { mkdir, readdir, readFile, rmdir, stat, writeFile } from "node:fs/promises"
import { dirname, join } from "node:path"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import { parseSize } from "../../../domain/Size.js"
import { type Mount, mounts, ownPaths, within } from "./CgroupMounts.js"

export { type Mount, mounts, ownPaths, within } from "./CgroupMounts.js"

const NAME = "host"
const invalid = (detail: string) => providerError(NAME, "apply the limits", "Invalid", detail)

/** Per-computer limits of the host backend (the Docker backend's flags). */
export interface HostLimits {
  readonly pids?: number | undefined
  /** A size such as 512m or 2g. */
  readonly memory?: string | undefined
  readonly cpu?: number | undefined
}

/** Docker's defaults, so one configuration means the same on both backends. */
const DEFAULT_LIMITS = { pids: 512, memory: "1g", cpu: 1 }

/** Checks the configured limits and fills in the defaults. */
export const resolveLimits = (limits: HostLimits | undefined): Effect.Effect<Limits, ProviderError> => {
  const pids = limits?.pids ?? DEFAULT_LIMITS.pids
  const memory = limits?.memory ?? DEFAULT_LIMITS.memory
  const memoryBytes = parseSize(memory)
  const cpus = limits?.cpu ?? DEFAULT_LIMITS.cpu
  if (!Number.isInteger(pids) || pids < 16) return Effect.fail(invalid(`invalid pids limit ${pids} (at least 16)`))
  if (memoryBytes === undefined || memoryBytes < 16 * 1024 * 1024) {
    return Effect.fail(invalid(`invalid memory limit '${memory}' (a size such as 512m or 2g, at least 16m)`))
  }
  if (!(Number.isFinite(cpus) && cpus > 0)) return Effect.fail(invalid(`invalid CPU count ${cpus}`))
  return Effect.succeed({ pids, memoryBytes, cpus })
}

/** What each computer may use. */
export interface Limits {
  readonly pids: number
  readonly memoryBytes: number
  readonly cpus: number
}

export type Controller = "pids" | "memory" | "cpu"
const CONTROLLERS: ReadonlyArray<Controller> = ["pids", "memory", "cpu"]
const CPU_PERIOD_US = 100_000
const SERVER_LEAF = "kilntainers-server"
const NAMED = /^kt-(\d+)-(\d+)-[0-9a-z]+$/
/** A permanent computer's cgroup (durableName), and how old an empty one must be to be reaped. */
const DURABLE = /^kt-c-[0-9a-z]+$/
const DURABLE_GRACE_MS = 60_000

/** Where computers' cgroups go for some controllers. */
export interface Hierarchy {
  readonly version: 1 | 2
  /** Where computers' cgroups are created. */
  readonly parent: string
  readonly controllers: ReadonlyArray<Controller>
}

/** Which controllers are limited, where, and why the others are not. */
export interface CgroupPlan {
  readonly hierarchies: ReadonlyArray<Hierarchy>
  readonly missing: ReadonlyArray<Controller>
  readonly notes: ReadonlyArray<string>
}

const writable = (path: string) => {
  try {
    accessSync(path, constants.W_OK)
    return true
  } catch {
    return false
  }
}

const readText = (path: string) => {
  try {
    return readFileSync(path, "utf8")
  } catch {
    return undefined
  }
}

const describeError = (error: unknown) => (error instanceof Error ? error.message : String(error))

const enable = async (dir: string, controllers: ReadonlyArray<Controller>) => {
  const enabled = (readText(join(dir, "cgroup.subtree_control")) ?? "").trim().split(/\s+/)
  const missing = controllers.filter((c) => !enabled.includes(c))
  if (missing.length > 0) await writeFile(join(dir, "cgroup.subtree_control"), missing.map((c) => `+${c}`).join(" "))
}

const offeredIn = (dir: string, wanted: ReadonlyArray<Controller>) => {
  const offered = (readText(join(dir, "cgroup.controllers")) ?? "").trim().split(/\s+/)
  return wanted.filter((c) => offered.includes(c))
}

/**
 * cgroup v2, as root: `<hierarchy root>/kilntainers`, beside whatever else runs on the machine (as
 * Docker's cgroupfs driver does), so the server's own cgroup is left as it is.
 */
export const v2AtTop = async (mount: Mount, wanted: ReadonlyArray<Controller>): Promise<Hierarchy | undefined> => {
  const controllers = offeredIn(mount.point, wanted)
  if (controllers.length === 0) return undefined
  await enable(mount.point, controllers)
  const parent = join(mount.point, "kilntainers")
  await mkdir(parent, { recursive: true })
  await enable(parent, controllers)
  return { version: 2, parent, controllers }
}

/**
 * cgroup v2 delegated to the server (its own cgroup is writable by it): computers' cgroups go
 * beside the server, which first moves itself into the leaf `kilntainers-server` (a v2 cgroup with
 * children may hold no processes). Only when the server is alone in its cgroup.
 */
export const v2Delegated = async (mount: Mount, ownPath: string, wanted: ReadonlyArray<Controller>, notes: Array<string>): Promise<Hierarchy | undefined> => {
  const dir = within(mount, ownPath)
  const inLeaf = ownPath.endsWith(`/${SERVER_LEAF}`)
  const parent = inLeaf ? dirname(dir) : dir
  const controllers = offeredIn(parent, wanted)
  if (controllers.length === 0) return undefined
  if (!writable(join(parent, "cgroup.subtree_control")) || !writable(join(parent, "cgroup.procs"))) {
    notes.push(`cgroup v2: the server's cgroup ${ownPath} is not delegated to it`)
    return undefined
  }
  if (!inLeaf) {
    const others = (readText(join(dir, "cgroup.procs")) ?? "").trim().split("\n").filter((pid) => pid !== "" && Number(pid) !== process.pid)
    if (others.length > 0) {
      notes.push(`cgroup v2: the server's cgroup ${ownPath} also holds other processes; start the server in a cgroup of its own (e.g. systemd-run --user --scope -p Delegate=yes)`)
      return undefined
    }
    await mkdir(join(dir, SERVER_LEAF), { recursive: true })
    await writeFile(join(dir, SERVER_LEAF, "cgroup.procs"), String(process.pid))
  }
  await enable(parent, controllers)
  return { version: 2, parent, controllers }
}

/** cgroup v2: at the top of the hierarchy as root, else in the server's delegated cgroup. */
const planV2 = (wanted: ReadonlyArray<Controller>, notes: Array<string>) =>
  Effect.gen(function*() {
    const mount = mounts().find((m) => m.type === "cgroup2")
    const own = ownPaths().find((p) => p.controllers.length === 0)
    if (mount === undefined || own === undefined) return undefined
    const attempt = (what: string, make: () => Promise<Hierarchy | undefined>) =>
      Effect.tryPromise(make).pipe(
        Effect.catchAll((error) => {
          notes.push(`cgroup v2 ${what}: ${describeError(error.error)}`)
          return Effect.succeed(undefined)
        })
      )
    const top = process.getuid?.() === 0 ? yield* attempt("(root)", () => v2AtTop(mount, wanted)) : undefined
    return top ?? (yield* attempt("(delegated)", () => v2Delegated(mount, own.path, wanted, notes)))
  })

/** cgroup v1: one hierarchy per mount holding any of the wanted controllers (root only, in practice). */
const planV1 = (wanted: ReadonlyArray<Controller>, notes: Array<string>) =>
  Effect.gen(function*() {
    const found: Array<Hierarchy> = []
    const own = ownPaths()
    for (const mount of mounts().filter((m) => m.type === "cgroup")) {
      const controllers = wanted.filter((c) => mount.options.includes(c) && !found.some((h) => h.controllers.includes(c)))
      if (controllers.length === 0) continue
      const path = own.find((p) => controllers.every((c) => p.controllers.includes(c)))?.path ?? "/"
      const parent = join(within(mount, path), "kilntainers")
      const made = yield* Effect.tryPromise(() => mkdir(parent, { recursive: true })).pipe(
        Effect.map(() => {
          if (writable(parent)) return true
          notes.push(`cgroup v1 ${controllers.join(",")}: ${parent} is not writable by this server`)
          return false
        }),
        Effect.catchAll((error) => {
          notes.push(`cgroup v1 ${controllers.join(",")}: cannot create ${parent}: ${describeError(error.error)}`)
          return Effect.succeed(false)
        })
      )
      if (made) found.push({ version: 1, parent, controllers })
    }
    return found
  })

/** Finds where this server may limit computers (creating the parent cgroups it needs). */
export const plan: Effect.Effect<CgroupPlan> = Effect.gen(function*() {
  const notes: Array<string> = []
  const v2 = yield* planV2(CONTROLLERS, notes)
  const hierarchies: Array<Hierarchy> = v2 === undefined ? [] : [v2]
  const rest = CONTROLLERS.filter((c) => !hierarchies.some((h) => h.controllers.includes(c)))
  if (rest.length > 0) hierarchies.push(...(yield* planV1(rest, notes)))
  const missing = CONTROLLERS.filter((c) => !hierarchies.some((h) => h.controllers.includes(c)))
  return { hierarchies, missing, notes }
})

/** No cgroups at all (unsandboxed mode, or tests). */
export const none: CgroupPlan = { hierarchies: [], missing: CONTROLLERS, notes: [] }

const limitFiles = (version: 1 | 2, controller: Controller, limits: Limits): ReadonlyArray<readonly [string, string, boolean]> => {
  const quota = String(Math.max(1000, Math.round(limits.cpus * CPU_PERIOD_US)))
  switch (controller) {
    case "pids":
      return [["pids.max", String(limits.pids), true]]
    case "memory":
      return version === 2
        ? [["memory.max", String(limits.memoryBytes), true], ["memory.swap.max", "0", false]]
        : [["memory.limit_in_bytes", String(limits.memoryBytes), true], ["memory.memsw.limit_in_bytes", String(limits.memoryBytes), false]]
    case "cpu":
      return version === 2
        ? [["cpu.max", `${quota} ${CPU_PERIOD_US}`, true]]
        : [["cpu.cfs_period_us", String(CPU_PERIOD_US), true], ["cpu.cfs_quota_us", quota, true]]
  }
}

const pidsIn = (dir: string) =>
  Effect.promise(() => readFile(join(dir, "cgroup.procs"), "utf8").catch(() => "")).pipe(
    Effect.map((text) => text.split("\n").filter((line) => /^\d+$/.test(line)).map(Number))
  )

/** Kills whatever is left in the cgroup and removes it, retrying while the kernel lets the tasks go. */
const removeCgroup = (dir: string) =>
  Effect.gen(function*() {
    for (let attempt = 0; attempt < 100; attempt++) {
      const pids = yield* pidsIn(dir)
      if (pids.length > 0 && !(yield* Effect.promise(() => writeFile(join(dir, "cgroup.kill"), "1").then(() => true, () => false)))) {
        for (const pid of pids) {
          try {
            process.kill(pid, "SIGKILL")
          } catch {
            // already gone
          }
        }
      }
      const removed = yield* Effect.promise(() => rmdir(dir).then(() => true, (error: NodeJS.ErrnoException) => error.code === "ENOENT"))
      if (removed) return
      yield* Effect.sleep("20 millis")
    }
    yield* Effect.logWarning(`host backend: cannot remove the cgroup ${dir}: it still holds processes`)
  })

/** The name of a computer's cgroups: owner server and computer key. */
export const cgroupName = (owner: { readonly pid: number; readonly startTime: string }, key: string) =>
  `kt-${owner.pid}-${owner.startTime}-${key}`

/**
 * Creates the computer's cgroups with their limits; they are removed (processes killed first)
 * when the Scope closes. Returns the directories the sandbox must join.
 */
export const create = (cgroupPlan: CgroupPlan, name: string, limits: Limits) =>
  Effect.forEach(cgroupPlan.hierarchies, (hierarchy) =>
    Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          const dir = join(hierarchy.parent, name)
          await mkdir(dir)
          for (const controller of hierarchy.controllers) {
            for (const [file, value, required] of limitFiles(hierarchy.version, controller, limits)) {
              await writeFile(join(dir, file), value).catch((error: unknown) => {
                if (required) throw error
              })
            }
          }
          return dir
        },
        catch: (error) =>
          providerError(NAME, `set up the computer's cgroup in ${hierarchy.parent}`, "Failed", describeError(error), error)
      }).pipe(Effect.tapError(() => removeCgroup(join(hierarchy.parent, name)))),
      removeCgroup
    ))

/** The name of a permanent computer's cgroups: its key alone (no server owns them). */
export const durableName = (key: string) => `kt-c-${key}`

/**
 * Creates a permanent computer's cgroups with their limits, or keeps those it has (its agent was
 * started before and ended by itself); they outlive the server. Returns the directories to join.
 */
export const ensure = (cgroupPlan: CgroupPlan, name: string, limits: Limits) =>
  Effect.forEach(cgroupPlan.hierarchies, (hierarchy) =>
    Effect.tryPromise({
      try: async () => {
        const dir = join(hierarchy.parent, name)
        await mkdir(dir).catch((error: NodeJS.ErrnoException) => {
          if (error.code !== "EEXIST") throw error
        })
        for (const controller of hierarchy.controllers) {
          for (const [file, value, required] of limitFiles(hierarchy.version, controller, limits)) {
            await writeFile(join(dir, file), value).catch((error: unknown) => {
              if (required) throw error
            })
          }
        }
        return dir
      },
      catch: (error) => providerError(NAME, `set up the computer's cgroup in ${hierarchy.parent}`, "Failed", describeError(error), error)
    }))

/** Removes a permanent computer's cgroups, killing whatever is left in them. */
export const removeNamed = (cgroupPlan: CgroupPlan, name: string) =>
  Effect.forEach(cgroupPlan.hierarchies, (hierarchy) => removeCgroup(join(hierarchy.parent, name)), { discard: true })

/** Removes the cgroups of computers whose server died (crash, SIGKILL). */
export const reapStale = (cgroupPlan: CgroupPlan, alive: (owner: { readonly pid: number; readonly startTime: string }) => boolean) =>
  Effect.forEach(cgroupPlan.hierarchies, (hierarchy) =>
    Effect.gen(function*() {
      const entries = yield* Effect.promise(() => readdir(hierarchy.parent).catch(() => [] as Array<string>))
      const now = yield* Clock.currentTimeMillis
      for (const entry of entries) {
        const dir = join(hierarchy.parent, entry)
        if (DURABLE.test(entry)) {
          // A permanent computer's cgroup left empty (its agent ended by itself: the computer's
          // directory was removed): only an empty one, and not one a starting agent may be about
          // to join (made in the last minute), is removed; never anything in it.
          const made = yield* Effect.promise(() => stat(dir).then((info) => info.mtimeMs, () => now))
          if (now - made > DURABLE_GRACE_MS && (yield* pidsIn(dir)).length === 0) {
            yield* Effect.promise(() => rmdir(dir).catch(() => undefined))
          }
          continue
        }
        const match = NAMED.exec(entry)
        if (match === null || alive({ pid: Number(match[1]), startTime: match[2]! })) continue
        yield* removeCgroup(dir)
      }
    }), { discard: true })

const mebibytes = (bytes: number) => (bytes % (1 << 30) === 0 ? `${bytes / (1 << 30)} GiB` : `${Math.round(bytes / (1 << 20))} MiB`)

const controllerWords: Record<Controller, string> = { pids: "processes", memory: "memory", cpu: "CPU" }

/** One line for stderr at startup: what each computer is held to, and what is not limited. */
export const describe = (
  cgroupPlan: CgroupPlan,
  limits: Limits,
  rlimit: boolean
): { readonly limited: string; readonly unlimited: Option.Option<string> } => {
  const where = (c: Controller) => {
    const hierarchy = cgroupPlan.hierarchies.find((h) => h.controllers.includes(c))
    return hierarchy === undefined ? undefined : `cgroup v${hierarchy.version}`
  }
  const parts: Array<string> = []
  const pidsBy = [where("pids"), rlimit ? "RLIMIT_NPROC" : undefined].filter(Boolean)
  if (pidsBy.length > 0) parts.push(`${limits.pids} processes (${pidsBy.join(" + ")})`)
  if (where("memory")) parts.push(`${mebibytes(limits.memoryBytes)} of memory (${where("memory")})`)
  if (where("cpu")) parts.push(`${limits.cpus} CPU (${where("cpu")})`)
  const missing = cgroupPlan.missing.filter((c) => c !== "pids" || !rlimit).map((c) => controllerWords[c])
  const unlimited = missing.length === 0
    ? Option.none()
    : Option.some(
      `host backend: ${missing.length > 1 ? `${missing.slice(0, -1).join(", ")} and ${missing.at(-1)}` : missing[0]} of computers NOT limited: no cgroup this server may create` +
        (cgroupPlan.notes.length > 0 ? ` (${cgroupPlan.notes.join("; ")})` : "") +
        ". Run the server as root, or in a delegated cgroup v2 subtree, to limit them."
    )
  const limited = parts.length === 0 ? "host backend: computers have no limits" : `host backend: each computer is limited to ${parts.join(", ")}`
  return { limited, unlimited }
}
