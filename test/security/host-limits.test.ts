/**
 * Per-computer limits of the host backend (issue 9 item 4), attacked from inside through the MCP
 * tools, with the server run as root and as an unprivileged user: a bounded fork bomb is held at
 * --pids-limit while another computer and the server keep answering; memory and CPU are held by
 * cgroups where the server may create them, and the server says so at startup when it may not.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmdirSync } from "node:fs"
import { dirname, join } from "node:path"
import { describeIf } from "../support/Requirements.js"
import { type HostServer, modes, requirements, requirementsMet, startHostServer } from "./HostServer.js"

const PIDS = 100

// Tries to start 2,000 sleeping processes, stops at the first failure, says how far it got, holds
// them for a while, then kills them all. Bounded whatever the limits are.
const FORK_BOMB = `
import os, sys, time, signal
kids, error = [], None
for _ in range(2000):
    try:
        pid = os.fork()
    except OSError as e:
        error = e.strerror
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    kids.append(pid)
print("spawned %d stopped-by %s" % (len(kids), error), flush=True)
time.sleep(float(sys.argv[1]))
for pid in kids:
    os.kill(pid, signal.SIGKILL)
for pid in kids:
    os.waitpid(pid, 0)
print("cleaned", flush=True)
`

/** All tasks (threads) on the host, from /proc/loadavg. */
const hostTasks = () => Number(readFileSync("/proc/loadavg", "utf8").split(" ")[3]!.split("/")[1])

const read = (path: string) => {
  try {
    return readFileSync(path, "utf8")
  } catch {
    return ""
  }
}
const pidNamespace = (pid: string) => {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`)
  } catch {
    return undefined
  }
}

/** Host processes in the pid namespace of computer `id`'s sandbox (found by its agent's workspace mount). */
const processesInComputer = (id: string) => {
  const pids = readdirSync("/proc").filter((entry) => /^\d+$/.test(entry))
  const agent = pids.find((pid) =>
    read(`/proc/${pid}/cmdline`).startsWith("/run/kt-agent\0") && read(`/proc/${pid}/mountinfo`).includes(`/computers/${id}/home /home/agent `)
  )
  const namespace = agent === undefined ? undefined : pidNamespace(agent)
  assert.isDefined(namespace, `the agent of computer ${id}`)
  return pids.filter((pid) => pidNamespace(pid) === namespace).length
}

/** cgroup directories (any hierarchy) whose name starts with `prefix`, a few levels deep. */
const cgroupsNamed = (prefix: string) => {
  const found: Array<string> = []
  const walk = (dir: string, depth: number) => {
    let entries: Array<string> = []
    try {
      entries = readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name)
    } catch {
      return
    }
    for (const name of entries) {
      if (name.startsWith(prefix)) found.push(join(dir, name))
      else if (depth < 6) walk(join(dir, name), depth + 1)
    }
  }
  walk("/sys/fs/cgroup", 0)
  return found
}

const exec = (server: HostServer, computerId: string, command: string, timeout = 60) =>
  server.call("sandbox_exec", { command, computer_id: computerId, timeout })

describeIf(requirementsMet, requirements)("host sandbox: per-computer limits", () => {
  for (const mode of modes) {
    describe(`server run as ${mode === "root" ? "root" : "an unprivileged user"}`, () => {
      let server: HostServer

      beforeAll(async () => {
        server = await startHostServer(mode, ["--pids-limit", String(PIDS), "--memory", "128m", "--cpu", "0.25"])
        for (const id of ["bomb", "bystander"]) {
          const created = await server.call("computer_create", { computer_id: id })
          assert.isFalse(created.isError, created.text)
        }
      }, 120_000)
      afterAll(async () => {
        await server?.close()
      })

      it("says at startup what each computer is held to, and what is not limited", () => {
        assert.include(server.stderr(), `each computer is limited to ${PIDS} processes`)
        const memory = /of memory \(cgroup v[12]\)/.test(server.stderr())
        const cpu = /CPU \(cgroup v[12]\)/.test(server.stderr())
        if (!memory || !cpu) assert.match(server.stderr(), /NOT limited/)
        if (mode === "root" && process.env.CI === "true") assert.isTrue(memory && cpu, "as root in CI, cgroups limit memory and CPU")
      })

      it("holds a fork bomb at the pids limit; another computer and the server keep answering", async () => {
        const before = hostTasks()
        await server.call("file_write", { path: "bomb.py", content: FORK_BOMB, computer_id: "bomb" })
        const { structured } = await server.call("spawn", { command: "python3 bomb.py 5", computer_id: "bomb", background: true })
        const bomb = structured.pid as string
        const spawned = await server.call("wait", { id: bomb, pattern: "spawned \\d+", timeoutMs: 60_000 })
        assert.strictEqual(spawned.structured.outcome, "matched", spawned.text)
        const out = await server.call("stdout", { id: bomb })
        const match = /spawned (\d+) stopped-by ([A-Za-z ]+)/.exec(out.text)
        assert.isNotNull(match, out.text)
        const count = Number(match![1])
        assert.isBelow(count, PIDS, "the bomb got past the pids limit")
        assert.isAtLeast(count, PIDS / 2, "something other than the limit stopped the bomb")
        assert.match(match![2]!, /Resource temporarily unavailable/)

        // Exactly: the computer holds at most the limit. Roughly (other tests run beside this one):
        // the host did not gain the 2,000 tasks an unlimited bomb makes.
        assert.isAtMost(processesInComputer("bomb"), PIDS)
        const grown = hostTasks() - before
        assert.isBelow(grown, PIDS + 1000, `the host gained ${grown} tasks`)

        const started = performance.now()
        const alive = await exec(server, "bystander", "echo alive")
        assert.strictEqual(alive.structured.stdout, "alive\n")
        assert.isBelow(performance.now() - started, 15_000)

        const done = await server.call("wait", { id: bomb, pattern: "cleaned", timeoutMs: 60_000 })
        assert.strictEqual(done.structured.outcome, "matched", done.text)
      }, 120_000)

      it("holds memory and CPU where cgroups allow", async () => {
        if (/of memory \(cgroup v[12]\)/.test(server.stderr())) {
          const hog = await exec(server, "bystander", "python3 -c 'b = bytearray(400 * 1024 * 1024); print(\"allocated\")'")
          assert.notStrictEqual(hog.structured.exit_code, 0, "400 MiB fit in a 128 MiB computer")
          assert.notInclude(hog.structured.stdout, "allocated")
        }
        if (/CPU \(cgroup v[12]\)/.test(server.stderr())) {
          const spin = await exec(
            server,
            "bystander",
            "python3 -c 'import time, resource\nt = time.time()\nwhile time.time() - t < 2: pass\nr = resource.getrusage(resource.RUSAGE_SELF)\nprint(r.ru_utime + r.ru_stime)'"
          )
          const cpuSeconds = Number(spin.structured.stdout)
          assert.isAbove(cpuSeconds, 0.05)
          assert.isBelow(cpuSeconds, 2 * 0.25 * 1.6 + 0.15, "a quarter CPU for 2 s")
        }
        assert.strictEqual((await exec(server, "bystander", "echo still here")).structured.stdout, "still here\n")
      }, 120_000)

      it.runIf(mode === "root")("removes a computer's cgroups when it ends, and those of dead servers at startup", async () => {
        const prefix = `kt-${server.pid}-`
        const mine = cgroupsNamed(prefix)
        assert.isAbove(mine.length, 0, "the computers' cgroups")
        for (const id of ["bomb", "bystander"]) await server.call("computer_delete", { computer_id: id })
        assert.deepStrictEqual(cgroupsNamed(prefix), [])

        // A cgroup left by a server that died (a pid that cannot exist), then a new server.
        const stale = join(dirname(mine[0]!), "kt-999999999-1-stale")
        mkdirSync(stale)
        try {
          const next = await startHostServer("root")
          // The backend (and its sweep of dead servers' cgroups) is ready once a call needing it answers.
          const listed = await next.call("computer_list", {})
          await next.close()
          assert.isFalse(listed.isError, listed.text)
          assert.isFalse(existsSync(stale), "the dead server's cgroup is still there")
        } finally {
          if (existsSync(stale)) rmdirSync(stale)
        }
      }, 120_000)
    })
  }
})

