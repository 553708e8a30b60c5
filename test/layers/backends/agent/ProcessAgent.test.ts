/**
 * The agent reached through a provider's own processes (ProcessAgent.ts, as E2B and Modal use it),
 * driven here through a host computer's processes: installed and started by ordinary processes,
 * attached through the connector, and still there for a second server after the first let go.
 */
import { assert, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import type { WatchHandlers } from "../../../../src/layers/backends/agent/AgentClient.js"
import { newKey } from "../../../../src/layers/backends/agent/AgentHandshake.js"
import * as NativeBinaries from "../../../../src/layers/backends/agent/NativeBinaries.js"
import * as ProcessAgent from "../../../../src/layers/backends/agent/ProcessAgent.js"
import { connect, ENV } from "../../../support/HostComputer.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"

const stateDir = mkdtempSync(join(tmpdir(), "kt-process-agent-"))
afterAll(() => rmSync(stateDir, { recursive: true, force: true }))

const collecting = () => {
  const seen = { out: "", exit: undefined as number | null | undefined, closed: false }
  const handlers: WatchHandlers = {
    onOutput: (_stream, _offset, data) => void (seen.out += Buffer.from(data).toString()),
    onExit: (exit) => void (seen.exit = exit.exitCode),
    onClosed: () => void (seen.closed = true)
  }
  return { seen, handlers }
}

const until = (condition: () => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 500 && !condition(); i++) yield* Effect.sleep("10 millis")
    assert.isTrue(condition())
  })

describeIf(bwrapWorks, "bubblewrap")("an agent reached through the computer's own processes", () => {
  it.scopedLive("is installed, started and attached; its processes outlive the attach, and another server finds them", () =>
    Effect.gen(function*() {
      const { connection } = yield* connect({ stateDir, id: `pa-${process.pid}` })
      const binaries = yield* NativeBinaries.locate("host")
      const host: ProcessAgent.ProcessHost = {
        backend: "host",
        spawn: connection.spawn,
        dir: "/home/agent/.kilntainers",
        cwd: "/home/agent",
        env: ENV
      }
      const key = newKey()
      const binary = Effect.sync(() => readFileSync(binaries.agent))
      const first = yield* Scope.make()
      const client = yield* ProcessAgent.open(host, binary, { key, bound: false, args: [] }).pipe(Scope.extend(first))
      const a = collecting()
      const { handle } = yield* client.spawn({ argv: ["sh", "-c", "echo one; sleep 1; echo two; exit 5"], cwd: "/home/agent", env: ENV }, a.handlers)
      yield* until(() => a.seen.out === "one\n")
      yield* Scope.close(first, Exit.void)
      // Another attach (a later server): the same agent, and the process under its handle.
      const later = yield* ProcessAgent.open(host, binary, { key, bound: false, args: [] })
      assert.strictEqual(later.boot, client.boot)
      const b = collecting()
      yield* later.watch(handle, { stdout: 0, stderr: 0 }, b.handlers)
      yield* until(() => b.seen.closed)
      assert.strictEqual(b.seen.out, "one\ntwo\n")
      assert.strictEqual(b.seen.exit, 5)
      // Without the key, nothing.
      const forged = yield* Effect.either(Effect.scoped(ProcessAgent.attach(host, newKey())))
      assert.strictEqual(forged._tag, "Left")
    }), 60_000)
})
