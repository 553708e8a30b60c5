/**
 * Terminals owned by the agent inside the computer: resize delivers SIGWINCH to the application,
 * EOF on a terminal is Ctrl-D, and what the server writes (a terminal's answers to queries) reaches
 * the application's input.
 */
import { assert, it } from "@effect/vitest"
import { Effect, Fiber, Stream } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as HostBackend from "../../../../src/layers/backends/host/HostBackend.js"
import { type BackendProcess, ownedEvents } from "../../../../src/services/Backend.js"
import * as ProviderComputer from "../../../support/ProviderComputer.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"

const dir = mkdtempSync(join(tmpdir(), "kt-terminal-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const env = { PATH: "/usr/local/bin:/usr/bin:/bin" }

/** Collects the terminal's output; `waitFor` polls it (bounded). */
const watch = (process: BackendProcess) =>
  Effect.gen(function*() {
    let text = ""
    let exit: unknown
    const fiber = yield* Effect.fork(Stream.runForEach(ownedEvents(process), (event) =>
      Effect.sync(() => {
        if (event._tag === "Exit") exit = event.exit
        else text += Buffer.from(event.data).toString()
      })))
    const waitFor = (pattern: RegExp) =>
      Effect.gen(function*() {
        for (let i = 0; i < 500 && !pattern.test(text); i++) yield* Effect.sleep("10 millis")
        assert.match(text, pattern)
      })
    return { fiber, waitFor, exit: () => exit, text: () => text }
  })

describeIf(bwrapWorks, "bubblewrap")("terminals through the agent", () => {
  it.scopedLive("resize sends SIGWINCH, EOF is Ctrl-D, and written answers reach the application", () =>
    Effect.gen(function*() {
      const backend = yield* HostBackend.make({ stateDir: dir, network: false, sandbox: "bwrap" })
      const computer = (yield* ProviderComputer.open(backend, `terminal-${globalThis.process.pid}`)).connection
      // Python runs signal handlers while blocked in a read (PEP 475), unlike bash's read builtin.
      const script = [
        "import os, signal, sys",
        "signal.signal(signal.SIGWINCH, lambda *_: print('winch %d %d' % os.get_terminal_size(), flush=True))",
        "print('ready', flush=True)",
        "for line in sys.stdin: print('got [%s]' % line.rstrip('\\n'), flush=True)",
        "print('eof seen', flush=True)"
      ].join("\n")
      const process = yield* computer.spawn({ argv: ["python3", "-c", script], cwd: "/home/agent", env, tty: { cols: 80, rows: 24 } })
      const screen = yield* watch(process)
      yield* screen.waitFor(/ready/)
      yield* process.resize(132, 40)
      yield* screen.waitFor(/winch 132 40/)
      yield* process.write(new TextEncoder().encode("\x1b[12;34R answer\r"))
      yield* screen.waitFor(/got \[\x1b\[12;34R answer\]/)
      yield* process.closeStdin
      yield* screen.waitFor(/eof seen/)
      yield* Fiber.join(screen.fiber)
      assert.deepStrictEqual(screen.exit(), { exitCode: 0, signal: null })
    }), 30_000)
})
