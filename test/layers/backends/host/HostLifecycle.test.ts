/**
 * Host computers through the kernel (Runtime.layer over HostBackend.layer), for what only the host
 * shows: process trees gone from the machine after a restart or a delete, directories removed,
 * a killed agent recovered, the reaper over host records (old and new), the warm pool's renames.
 * The shared lifecycle cases are in test/conformance/host.test.ts.
 */
import { assert, it } from "@effect/vitest"
import { Duration, Effect, Layer } from "effect"
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { hostname, tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import { toLabels } from "../../../../src/domain/ComputerMetadata.js"
import * as HostBackend from "../../../../src/layers/backends/host/HostBackend.js"
import { processStartTime } from "../../../../src/layers/server/ProcessOwner.js"
import * as Runtime from "../../../../src/layers/Runtime.js"
import { Computers } from "../../../../src/services/Computers.js"
import { Processes } from "../../../../src/services/Processes.js"
import { Settings, type SettingsShape } from "../../../../src/services/Settings.js"
import { hostProcesses } from "../../../support/HostComputer.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"

const root = mkdtempSync(join(tmpdir(), "kt-host-lifecycle-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))
let counter = 0

const kernel = (stateDir: string, settings: Partial<SettingsShape> = {}) =>
  Runtime.layer(
    Settings.make({ stateDir, killGraceMs: 500, ...settings }),
    HostBackend.layer({ stateDir, network: false, sandbox: "bwrap" })
  )

/** Runs `body` on a new server over a fresh state directory (or the one given). */
const server = <A, E>(
  body: (services: { processes: Processes["Type"]; computers: Computers["Type"]; stateDir: string }) => Effect.Effect<A, E>,
  stateDir = mkdtempSync(join(root, `s${++counter}-`)),
  settings: Partial<SettingsShape> = {}
) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(kernel(stateDir, settings))
    const processes = yield* Effect.provide(Processes, context)
    const computers = yield* Effect.provide(Computers, context)
    return yield* body({ processes, computers, stateDir })
  }).pipe(Effect.scoped)

const until = (condition: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100 && !condition(); i++) yield* Effect.sleep(Duration.millis(50))
    return condition()
  })

/** The kt-agent of computer `id` (the one whose mounts hold its workspace). */
const agentPid = (id: string) => {
  const read = (path: string) => {
    try {
      return readFileSync(path, "utf8")
    } catch {
      return ""
    }
  }
  const agent = readdirSync("/proc").find((pid) =>
    /^\d+$/.test(pid) &&
    read(`/proc/${pid}/cmdline`).startsWith("/run/kt-agent\0") &&
    read(`/proc/${pid}/mountinfo`).includes(`/computers/${id}/home /home/agent `)
  )
  return agent === undefined ? undefined : Number(agent)
}

describeIf(bwrapWorks, "bubblewrap")("host computers through the kernel", () => {
  it.live("restart keeps the workspace, ends the old process trees on the machine, and terminals work after", () =>
    server(({ computers, processes }) =>
      Effect.gen(function*() {
        yield* processes.exec("s", { command: "echo kept > kept.txt", computer_id: "re" })
        yield* processes.spawn("s", { command: "sleep 311 & sleep 311", background: true, computer_id: "re" })
        assert.isTrue(yield* until(() => hostProcesses(["sleep", "311"]).length === 2))
        yield* computers.restart("s", "re")
        assert.isTrue(yield* until(() => hostProcesses(["sleep", "311"]).length === 0), "no sleep left on the machine")
        assert.strictEqual((yield* processes.exec("s", { command: "cat kept.txt", computer_id: "re" })).stdout, "kept\n")
        const tty = yield* processes.spawn("s", { command: "tty", tty: true, computer_id: "re" })
        assert.match(tty.stdout, /\/dev\/pts\/\d+/)
      })), 60_000)

  it.live("factory reset erases the whole workspace, hidden files and directories too", () =>
    server(({ computers, processes, stateDir }) =>
      Effect.gen(function*() {
        yield* processes.exec("s", { command: "mkdir -p d && echo x > d/f && echo y > .hidden", computer_id: "fresh", temporary: false })
        yield* computers.factoryReset("s", "fresh")
        assert.deepStrictEqual(readdirSync(join(stateDir, "computers", "fresh", "home")), [])
        const ls = yield* processes.exec("s", { command: "ls -A /home/agent", computer_id: "fresh" })
        assert.strictEqual(ls.stdout, "")
        assert.strictEqual(ls.exit_code, 0)
      })), 60_000)

  it.live("delete removes even a permanent computer: its directory and its processes", () =>
    server(({ computers, processes, stateDir }) =>
      Effect.gen(function*() {
        yield* processes.spawn("s", { command: "sleep 312", background: true, computer_id: "perm", temporary: false })
        assert.isTrue(yield* until(() => hostProcesses(["sleep", "312"]).length === 1))
        yield* computers.delete("s", "perm")
        assert.isFalse(existsSync(join(stateDir, "computers", "perm")))
        assert.isTrue(yield* until(() => hostProcesses(["sleep", "312"]).length === 0))
      })), 60_000)

  it.live("when its last session ends, a temporary computer's processes end and its directory goes", () =>
    server(({ computers, processes, stateDir }) =>
      Effect.gen(function*() {
        yield* processes.spawn("s", { command: "sleep 3303 & sleep 3303", background: true, computer_id: "temp" })
        yield* processes.spawn("s", { command: "sleep 3304", tty: true, background: true, computer_id: "temp" })
        assert.isTrue(yield* until(() => hostProcesses(["sleep", "3303"]).length === 2 && hostProcesses(["sleep", "3304"]).length === 1))
        assert.isTrue(existsSync(join(stateDir, "computers", "temp", "home")))
        yield* computers.release("s")
        assert.isFalse(existsSync(join(stateDir, "computers", "temp")))
        assert.deepStrictEqual(hostProcesses(["sleep", "3303"]), [])
        assert.deepStrictEqual(hostProcesses(["sleep", "3304"]), [])
      })), 60_000)

  it.live("a computer whose agent is killed from outside is lost, says so, and runs again on the next call", () =>
    server(({ processes }) =>
      Effect.gen(function*() {
        const id = `lost-${process.pid}`
        yield* processes.exec("s", { command: "echo before > notes.txt", computer_id: id })
        const running = yield* processes.spawn("s", { command: "sleep 313", background: true, computer_id: id })
        process.kill(agentPid(id)!, "SIGKILL")
        let reason = ""
        for (let i = 0; i < 100 && reason === ""; i++) {
          yield* Effect.sleep(Duration.millis(50))
          reason = (yield* processes.list("s", { status: "all" })).processes.find((p) => p.pid === running.pid)?.reason ?? ""
        }
        assert.match(reason, /computer lost: the connection to the computer.s agent ended/)
        const after = yield* processes.exec("s", { command: "cat notes.txt", computer_id: id })
        assert.strictEqual(after.stdout, "before\n", "the same workspace, with a new agent")
      })), 60_000)

  it.live("the reaper removes temporary computers of dead servers, old records too, and nothing else", () =>
    Effect.gen(function*() {
      const stateDir = mkdtempSync(join(root, "reap-"))
      const write = (id: string, record: unknown) => {
        mkdirSync(join(stateDir, "computers", id, "home"), { recursive: true })
        writeFileSync(join(stateDir, "computers", id, "computer.json"), JSON.stringify(record))
      }
      const labels = (id: string, temporary: boolean, start: string) =>
        toLabels("dashed", {
          id,
          temporary,
          image: "host",
          created: "2026-01-01T00:00:00.000Z",
          instance: "an-earlier-server",
          owner: { host: hostname(), pid: process.pid, start }
        })
      const live = processStartTime("self")!
      // Same pid, another start time: the pid was reused, that server is gone.
      write("dead-temp", { labels: labels("dead-temp", true, "0"), key: "deadtemp0000" })
      write("dead-perm", { labels: labels("dead-perm", false, "0"), key: "deadperm0000" })
      write("live-temp", { labels: labels("live-temp", true, live), key: "livetemp0000" })
      write("old-dead-temp", { id: "old-dead-temp", temporary: true, createdAt: "2026-01-01T00:00:00.000Z", image: "host", owner: { pid: process.pid, startTime: "0" } })
      mkdirSync(join(stateDir, "computers", "unknown", "home"), { recursive: true })
      yield* server(({ processes }) =>
        Effect.gen(function*() {
          assert.isTrue(yield* until(() => !existsSync(join(stateDir, "computers", "dead-temp")) && !existsSync(join(stateDir, "computers", "old-dead-temp"))))
          assert.deepStrictEqual(readdirSync(join(stateDir, "computers")).sort(), ["dead-perm", "live-temp", "unknown"])
          // A dead server's permanent computer can be opened by this one.
          assert.strictEqual((yield* processes.exec("s", { command: "true", computer_id: "dead-perm" })).exit_code, 0)
        }), stateDir)
    }), 60_000)

  it.live("a warm pool's computer is handed out under its id: renamed at the provider, its sandbox already running", () =>
    server(({ computers, processes, stateDir }) =>
      Effect.gen(function*() {
        for (let i = 0; i < 100 && (yield* computers.pool)?.ready !== 1; i++) yield* Effect.sleep(Duration.millis(50))
        assert.strictEqual((yield* computers.pool)?.ready, 1)
        const [pooled] = readdirSync(join(stateDir, "computers"))
        assert.match(pooled ?? "", /^pool-/)
        const computer = yield* computers.create("s", { computer_id: "handed" })
        assert.strictEqual((yield* computers.pool)?.handedOut, 1)
        assert.isTrue(existsSync(join(stateDir, "computers", "handed", "home")))
        assert.isFalse(existsSync(join(stateDir, "computers", pooled!)))
        const record = JSON.parse(readFileSync(join(stateDir, "computers", "handed", "computer.json"), "utf8")) as { labels: Record<string, string> }
        assert.strictEqual(record.labels["kilntainers-computer-id"], "handed")
        const echo = yield* processes.exec("s", { command: "echo hi > f && cat f", computer_id: computer.id })
        assert.strictEqual(echo.stdout, "hi\n")
        assert.strictEqual(readFileSync(join(stateDir, "computers", "handed", "home", "f"), "utf8"), "hi\n")
      }), undefined, { warmPool: 1 }), 60_000)
})
