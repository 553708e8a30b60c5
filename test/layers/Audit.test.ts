/**
 * The runtime's audit trail and the backend's variables, over a fake backend: every process started
 * and ended (with the session, the command, the exit and its output bytes; a spawn that failed too),
 * the computer's lifecycle, the dashboard's one-line summaries; and the environment order
 * (defaults, the backend's variables, --env, the call's own).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as Runtime from "../../src/layers/Runtime.js"
import * as RecentActivity from "../../src/layers/mcp/RecentActivity.js"
import { AuditLog } from "../../src/services/AuditLog.js"
import { Backend, type SpawnSpec } from "../../src/services/Backend.js"
import { Computers } from "../../src/services/Computers.js"
import { Processes } from "../../src/services/Processes.js"
import { Settings } from "../../src/services/Settings.js"
import * as QuickBackend from "../support/QuickBackend.js"

const seen: Array<SpawnSpec> = []
/** The quick backend, with variables of its own and every spawn's spec kept. */
const backend = Layer.effect(
  Backend,
  Effect.map(Effect.provide(Backend, QuickBackend.layer), (quick) => ({
    ...quick,
    environment: { HTTPS_PROXY: "http://127.0.0.1:3128", FROM: "backend", PAGER: "backend-pager" },
    connect: (instance) =>
      Effect.map(quick.connect(instance), (connection) => ({
        ...connection,
        spawn: (spec: SpawnSpec) => Effect.zipRight(Effect.sync(() => seen.push(spec)), connection.spawn(spec))
      }))
  }))
)

const settings = Settings.make({ spawnTimeoutMs: 200, killGraceMs: 50, env: { FROM: "--env", OWN: "server" } })
const runtime = Runtime.layer(settings, backend, "audit-test")

describe("the audit trail of the runtime", () => {
  it.scoped("records processes started and ended, a spawn that failed, and the computer's creation", () =>
    Effect.gen(function*() {
      const processes = yield* Processes
      const audit = yield* AuditLog
      const done = yield* processes.exec("session-a", { computer_id: "audited", command: "echo hi" })
      assert.strictEqual(done.exit_code, 0)
      yield* processes.exec("session-a", { computer_id: "audited", args: ["printf", "x"] })
      const failed = yield* Effect.either(processes.exec("session-a", { computer_id: "audited", command: "missing" }))
      assert.isTrue(failed._tag === "Left" || failed.right.exit_code !== 0)
      const entries = yield* audit.recent(new Set(["audited"]), 100)
      const started = entries.filter((entry) => entry.type === "process.started")
      assert.deepInclude(started.map((entry) => ({ ...entry, time: "" })), {
        time: "",
        type: "process.started",
        session: "session-a",
        computer: "audited",
        pid: "p1",
        command: "echo hi",
        cwd: "/home/agent",
        tty: false
      })
      assert.isTrue(started.some((entry) => entry.type === "process.started" && entry.argv?.join(" ") === "printf x"), "argv without a shell")
      const ended = entries.filter((entry) => entry.type === "process.ended")
      const first = ended.find((entry) => entry.type === "process.ended" && entry.pid === "p1")
      assert.include(first, { exitCode: 0, stdoutBytes: "ran: echo hi\n".length, stderrBytes: 0, session: "session-a" })
      assert.isTrue(ended.some((entry) => entry.type === "process.ended" && entry.reason?.startsWith("not started:") === true))
      assert.isTrue(entries.some((entry) => entry.type === "computer" && entry.event === "created" && entry.session === "session-a"))
      assert.deepStrictEqual(yield* audit.recent(new Set(["someone-else"]), 100), [], "only the computers asked for")
      const lines = entries.map(RecentActivity.summary)
      assert.include(lines, "p1 started: echo hi")
      assert.isTrue(lines.some((line) => /^p1 ended: exit 0 after \d+\.\d s$/.test(line)), lines.join("\n"))
      assert.include(lines, "computer created")
    }).pipe(Effect.provide(runtime)))

  it.scoped("gives processes the defaults, then the backend's variables, then --env, then the call's own", () =>
    Effect.gen(function*() {
      const processes = yield* Processes
      seen.length = 0
      yield* processes.exec("s", { computer_id: "env", command: "env", env: { OWN: "call" } })
      const env = seen.at(-1)!.env
      assert.strictEqual(env.HTTPS_PROXY, "http://127.0.0.1:3128")
      assert.strictEqual(env.PAGER, "backend-pager", "the backend's variables come after the defaults")
      assert.strictEqual(env.FROM, "--env", "--env wins over the backend")
      assert.strictEqual(env.OWN, "call", "the call wins over --env")
      yield* (yield* Computers).delete("s", "env")
      const audit = yield* AuditLog
      const deleted = (yield* audit.recent(new Set(["env"]), 100)).filter((entry) => entry.type === "computer").map((entry) =>
        entry.type === "computer" ? entry.event : ""
      )
      assert.deepStrictEqual(deleted, ["created", "deleted"])
    }).pipe(Effect.provide(runtime)))
})
