/**
 * Freezing a host computer while its workspace is copied (HostCheckpoints.ts), so that the copy
 * is one moment of the files, not a mix of before and after a guest's write.
 *
 * - cgroup v2: the computer's own cgroup (Cgroups.ts) has `cgroup.freeze`; frozen when its
 *   `cgroup.events` says `frozen 1`.
 * - cgroup v1: the freezer is a hierarchy of its own, which limits nothing, so the computer gets a
 *   freezer cgroup beside its other ones (`withFreezer` adds it to the plan: created, joined by
 *   the sandbox, reaped and removed like them); frozen when `freezer.state` says FROZEN.
 * - neither: nothing is frozen and the checkpoint says the copy was taken live.
 *
 * A freeze that does not settle within SETTLE_MS is undone and the copy is taken live: a computer
 * is never left frozen (the thaw runs when the copy's Scope closes, whatever its exit).
 */
import * as Effect from "effect/Effect"
import { constants } from "node:fs"
import { access, mkdir, readFile, writeFile } from "node:fs/promises"
import { join } from "node:path"
import type { CgroupPlan } from "./Cgroups.js"
import * as Cgroups from "./Cgroups.js"

const SETTLE_MS = 5_000

/** The plan with a v1 freezer hierarchy for each computer, when v2 cannot freeze and v1 can. */
export const withFreezer = (plan: CgroupPlan): Effect.Effect<CgroupPlan> =>
  Effect.promise(async () => {
    if (plan.hierarchies.some((hierarchy) => hierarchy.version === 2)) return plan
    const mount = Cgroups.mounts().find((m) => m.type === "cgroup" && m.options.includes("freezer"))
    if (mount === undefined) return plan
    const own = Cgroups.ownPaths().find((p) => p.controllers.includes("freezer"))?.path ?? "/"
    const parent = join(Cgroups.within(mount, own), "kilntainers")
    // Made, or there already and ours to add to: a parent another user made (a root server before
    // an unprivileged one) is left alone, and the computer goes without a freezer.
    const made = await mkdir(parent, { recursive: true }).then(() => access(parent, constants.W_OK)).then(() => true, () => false)
    // No limits to write (`controllers` is empty): the cgroup is only joined, frozen and removed.
    return made ? { ...plan, hierarchies: [...plan.hierarchies, { version: 1 as const, parent, controllers: [] }] } : plan
  })

interface Switch {
  readonly file: string
  readonly on: string
  readonly off: string
  /** Whether the freeze has reached every task. */
  readonly settled: () => Promise<boolean>
}

const switchOf = (plan: CgroupPlan, name: string): Switch | undefined => {
  const v2 = plan.hierarchies.find((hierarchy) => hierarchy.version === 2)
  if (v2 !== undefined) {
    const dir = join(v2.parent, name)
    return {
      file: join(dir, "cgroup.freeze"),
      on: "1",
      off: "0",
      settled: () => readFile(join(dir, "cgroup.events"), "utf8").then((events) => /^frozen 1$/m.test(events), () => false)
    }
  }
  const v1 = plan.hierarchies.find((hierarchy) => hierarchy.version === 1 && hierarchy.controllers.length === 0)
  if (v1 === undefined) return undefined
  const file = join(v1.parent, name, "freezer.state")
  return { file, on: "FROZEN", off: "THAWED", settled: () => readFile(file, "utf8").then((state) => state.trim() === "FROZEN", () => false) }
}

const write = (file: string, value: string) => Effect.promise(() => writeFile(file, value).then(() => true, () => false))

/**
 * Freezes the computer's cgroup `name` for the life of the Scope; answers whether it is frozen
 * (false: no freezer here, or the freeze did not settle and was undone).
 */
export const hold = (plan: CgroupPlan, name: string) =>
  Effect.gen(function*() {
    const freezer = switchOf(plan, name)
    if (freezer === undefined) return false
    const thaw = write(freezer.file, freezer.off)
    const frozen = yield* Effect.acquireRelease(write(freezer.file, freezer.on), (asked) => (asked ? thaw : Effect.void))
    if (!frozen) return false
    for (let waited = 0; waited < SETTLE_MS; waited += 20) {
      if (yield* Effect.promise(freezer.settled)) return true
      // v1 stays FREEZING when a task could not be frozen on the first pass (busy in the kernel,
      // just forked): writing FROZEN again retries it. Harmless on v2.
      if (waited > 0 && waited % 200 === 0) yield* write(freezer.file, freezer.on)
      yield* Effect.sleep("20 millis")
    }
    yield* thaw
    yield* Effect.logWarning(`host backend: the freeze of ${name} did not settle within ${SETTLE_MS} ms; the checkpoint is copied live`)
    return false
  })
