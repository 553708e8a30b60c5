import { assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import * as Cgroups from "../../../../src/layers/backends/host/Cgroups.js"

describe("Cgroups", () => {
  it.effect("limits default to Docker's and are checked", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* Cgroups.resolveLimits(undefined), { pids: 512, memoryBytes: 1 << 30, cpus: 1 })
      assert.deepStrictEqual(yield* Cgroups.resolveLimits({ pids: 64, memory: "256m", cpu: 0.5 }), {
        pids: 64,
        memoryBytes: 256 << 20,
        cpus: 0.5
      })
      for (const bad of [{ pids: 3 }, { memory: "lots" }, { memory: "1k" }, { cpu: 0 }, { cpu: Number.NaN }]) {
        const error = yield* Effect.flip(Cgroups.resolveLimits(bad))
        assert.strictEqual(error._tag, "ProviderError")
        assert.strictEqual(error.reason, "Invalid")
      }
    }))

  it("says what each computer is held to, and what is not limited and why", () => {
    const limits = { pids: 100, memoryBytes: 128 << 20, cpus: 0.25 }
    const none = Cgroups.describe({ ...Cgroups.none, notes: ["cgroup v2: the server's cgroup /user.slice is not delegated to it"] }, limits, true)
    assert.strictEqual(none.limited, "host backend: each computer is limited to 100 processes (RLIMIT_NPROC)")
    assert.isTrue(Option.isSome(none.unlimited))
    assert.match(Option.getOrThrow(none.unlimited), /memory and CPU of computers NOT limited/)
    assert.include(Option.getOrThrow(none.unlimited), "not delegated")

    const all = Cgroups.describe(
      { hierarchies: [{ version: 2, parent: "/sys/fs/cgroup/x", controllers: ["pids", "memory", "cpu"] }], missing: [], notes: [] },
      limits,
      true
    )
    assert.strictEqual(
      all.limited,
      "host backend: each computer is limited to 100 processes (cgroup v2 + RLIMIT_NPROC), 128 MiB of memory (cgroup v2), 0.25 CPU (cgroup v2)"
    )
    assert.isTrue(Option.isNone(all.unlimited))

    // Before Linux 5.14 RLIMIT_NPROC is per uid, not per computer: without cgroups nothing is limited.
    const old = Cgroups.describe(Cgroups.none, limits, false)
    assert.strictEqual(old.limited, "host backend: computers have no limits")
    assert.match(Option.getOrThrow(old.unlimited), /^host backend: processes, memory and CPU of computers NOT limited/)
  })

  it.live("a permanent computer's cgroup is reaped only when empty and older than a minute; a dead server's temporary one always", () =>
    Effect.gen(function*() {
      const parent = mkdtempSync(join(tmpdir(), "kt-cgroups-reap-"))
      const make = (name: string, procs: string, ageMs: number) => {
        const dir = join(parent, name)
        mkdirSync(dir)
        if (procs !== "") writeFileSync(join(dir, "cgroup.procs"), procs)
        const at = (Date.now() - ageMs) / 1000
        utimesSync(dir, at, at)
        return dir
      }
      const emptyOld = make("kt-c-emptyold0001", "", 120_000)
      const emptyNew = make("kt-c-emptynew0001", "", 1_000)
      const busyOld = make("kt-c-busyold00001", "4242\n", 120_000)
      const deadServer = make("kt-1-2-deadserver01", "", 0)
      const plan = { hierarchies: [{ version: 2 as const, parent, controllers: ["pids" as const] }], missing: [], notes: [] }
      yield* Cgroups.reapStale(plan, () => false)
      assert.isFalse(existsSync(emptyOld))
      assert.isTrue(existsSync(emptyNew), "a starting agent may be about to join it")
      assert.isTrue(existsSync(busyOld), "its agent runs: never touched")
      assert.isFalse(existsSync(deadServer))
      rmSync(parent, { recursive: true, force: true })
    }))

  it("names a computer's cgroups after its server and its key", () => {
    assert.strictEqual(Cgroups.cgroupName({ pid: 42, startTime: "1234" }, "abc123"), "kt-42-1234-abc123")
  })
})

describe("Cgroups on cgroup v2 (a directory laid out like cgroupfs)", () => {
  const fake = (files: Record<string, string>) => {
    const root = mkdtempSync(join(tmpdir(), "kt-cgroup2-"))
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(root, path)), { recursive: true })
      writeFileSync(join(root, path), text)
    }
    return { root, mount: { root: "/", point: root, type: "cgroup2", options: ["rw"] } satisfies Cgroups.Mount }
  }
  const read = (path: string) => readFileSync(path, "utf8")

  it("as root: computers go under <root>/kilntainers, with the controllers enabled on the way", async () => {
    const { root, mount } = fake({ "cgroup.controllers": "cpuset cpu io memory pids\n", "cgroup.subtree_control": "memory\n" })
    const hierarchy = await Cgroups.v2AtTop(mount, ["pids", "memory", "cpu"])
    assert.deepStrictEqual(hierarchy, { version: 2, parent: join(root, "kilntainers"), controllers: ["pids", "memory", "cpu"] })
    assert.strictEqual(read(join(root, "cgroup.subtree_control")), "+pids +cpu")
    assert.strictEqual(read(join(root, "kilntainers", "cgroup.subtree_control")), "+pids +memory +cpu")
    rmSync(root, { recursive: true, force: true })
  })

  it("delegated: the server moves itself into a leaf and computers go beside it, only when it is alone", async () => {
    const own = "/user.slice/app.scope"
    const alone = fake({
      [`${own}/cgroup.controllers`]: "memory pids\n",
      [`${own}/cgroup.subtree_control`]: "",
      [`${own}/cgroup.procs`]: `${process.pid}\n`
    })
    const notes: Array<string> = []
    const hierarchy = await Cgroups.v2Delegated(alone.mount, own, ["pids", "memory", "cpu"], notes)
    assert.deepStrictEqual(hierarchy, { version: 2, parent: join(alone.root, own), controllers: ["pids", "memory"] })
    assert.strictEqual(read(join(alone.root, own, "kilntainers-server", "cgroup.procs")), String(process.pid))
    assert.strictEqual(read(join(alone.root, own, "cgroup.subtree_control")), "+pids +memory")
    // Started again from the leaf: the parent is found above it.
    const again = await Cgroups.v2Delegated(alone.mount, `${own}/kilntainers-server`, ["pids", "memory"], notes)
    assert.strictEqual(again?.parent, join(alone.root, own))
    assert.deepStrictEqual(notes, [])

    const crowded = fake({
      [`${own}/cgroup.controllers`]: "memory pids\n",
      [`${own}/cgroup.subtree_control`]: "",
      [`${own}/cgroup.procs`]: `${process.pid}\n1\n`
    })
    assert.isUndefined(await Cgroups.v2Delegated(crowded.mount, own, ["pids", "memory"], notes))
    assert.match(notes[0]!, /also holds other processes/)
    rmSync(alone.root, { recursive: true, force: true })
    rmSync(crowded.root, { recursive: true, force: true })
  })
})
