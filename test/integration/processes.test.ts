import { assert, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as HostBackend from "../../src/layers/backends/host/HostBackend.js"
import * as Runtime from "../../src/layers/Runtime.js"
import { decoding, Processes } from "../../src/services/Processes.js"
import { Settings, type SettingsShape } from "../../src/services/Settings.js"
import { processesWith, waitFor } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const runtime = (overrides: Partial<SettingsShape> = {}) => {
  const stateDir = mkdtempSync(join(tmpdir(), "kt-int-"))
  const settings = Settings.make({ stateDir, ...overrides })
  return Runtime.layer(settings, HostBackend.layer({ stateDir, network: settings.network, sandbox: "bwrap" }))
}

const withProcesses = <A, E>(
  body: (processes: ReturnType<typeof decoding>) => Effect.Effect<A, E>,
  overrides: Partial<SettingsShape> = {}
) => Effect.flatMap(Effect.map(Processes, decoding), body).pipe(Effect.provide(runtime(overrides)))

const waitUntil = (processes: ReturnType<typeof decoding>, id: string, pattern: string, timeoutMs = 10_000) =>
  Effect.gen(function*() {
    const result = yield* processes.wait("t", { id, pattern, timeoutMs })
    assert.strictEqual(result.outcome, "matched", `waiting for /${pattern}/ in ${id}`)
  })

describeIf(bwrapWorks, "bubblewrap")("processes on the host backend", () => {
  it.live("exit codes and the stderr of a process that fails within milliseconds", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        const ok = yield* processes.spawn("t", { command: "exit 0" })
        assert.strictEqual(ok.exitCode, 0)
        const failed = yield* processes.spawn("t", { command: "echo 'fatal: no such thing' >&2; exit 128" })
        assert.strictEqual(failed.status, "terminated")
        assert.strictEqual(failed.exitCode, 128)
        assert.strictEqual(failed.stderr, "fatal: no such thing\n")
        const missing = yield* processes.spawn("t", { command: "definitely-not-a-command" })
        assert.strictEqual(missing.exitCode, 127)
        assert.match(missing.stderr, /not found/)
        // still readable later, from ps and stdout
        const read = yield* processes.read("t", { id: failed.pid })
        assert.strictEqual(read.stderr, "fatal: no such thing\n")
        const listed = (yield* processes.list("t", { status: "all" })).processes.find((p) => p.pid === failed.pid)
        assert.strictEqual(listed?.exitCode, 128)
      })
    ))

  it.live("a python REPL on a TTY, driven through stdin and read through stdout", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        const { pid: id } = yield* processes.spawn("t", { command: "python3 -q", tty: true, background: true })
        yield* waitUntil(processes, id, ">>> ")
        yield* processes.stdin("t", { id, input: "x = 6 * 7\\r" })
        yield* processes.stdin("t", { id, input: "print(f'answer={x}')\\r" })
        yield* waitUntil(processes, id, "answer=42")
        const view = yield* processes.read("t", { id })
        assert.match(view.stdout, /^>>> x = 6 \* 7$/m)
        assert.match(view.stdout, /^answer=42$/m)
        assert.isDefined(view.screen)
        assert.isUndefined(view.screen!.alternateScreen)
        yield* processes.stdin("t", { id, input: "exit()\\r" })
        const done = yield* processes.wait("t", { id, timeoutMs: 10_000 })
        assert.strictEqual(done.outcome, "exited")
        assert.strictEqual(done.exitCode, 0)
      })
    ))

  it.live("less shows a long file on the alternate screen and quits with q", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        yield* processes.exec("t", { command: "seq 1 5000 > long.txt" })
        const { pid: id } = yield* processes.spawn("t", { command: "less long.txt", tty: true, background: true, rows: 20 })
        yield* waitUntil(processes, id, "long\\.txt")
        const first = yield* processes.read("t", { id })
        assert.isTrue(first.screen!.alternateScreen)
        assert.match(first.stdout, /^1\n2\n3\n/)
        yield* processes.stdin("t", { id, input: " " })
        yield* Effect.sleep(Duration.millis(300))
        const paged = yield* processes.read("t", { id })
        assert.match(paged.stdout, /^20$/m)
        yield* processes.stdin("t", { id, input: "q" })
        const done = yield* processes.wait("t", { id, timeoutMs: 10_000 })
        assert.strictEqual(done.outcome, "exited")
        assert.strictEqual(done.exitCode, 0)
      })
    ))

  it.live("vim edits a file and writes it", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        const { pid: id } = yield* processes.spawn("t", { command: "vim -u NONE -N notes.txt", tty: true, background: true })
        yield* waitUntil(processes, id, "notes\\.txt")
        yield* processes.stdin("t", { id, input: "ihello from vim\\e:wq\\r" })
        const done = yield* processes.wait("t", { id, timeoutMs: 10_000 })
        assert.strictEqual(done.exitCode, 0)
        const cat = yield* processes.exec("t", { command: "cat notes.txt" })
        assert.strictEqual(cat.stdout, "hello from vim\n")
      })
    ))

  it.live("kill reaches the whole tree: no sleep is left alive", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        // A duration no other test uses: the check scans every process of the machine.
        const marker = `sleep 300.${process.pid}`
        const { pid: id } = yield* processes.spawn("t", { command: `sh -c '${marker} & ${marker}'`, background: true })
        yield* Effect.sleep(Duration.millis(200))
        const before = yield* Effect.promise(() => processesWith(marker))
        assert.isAtLeast(before.length, 2)
        const killed = yield* processes.kill("t", { id })
        assert.strictEqual(killed.status, "terminated")
        assert.strictEqual(killed.sent, "SIGTERM")
        assert.strictEqual(killed.signal, "SIGTERM")
        const gone = yield* Effect.promise(() => waitFor(async () => (await processesWith(marker)).length === 0))
        assert.isTrue(gone, "both sleeps are gone")
      })
    ))

  it.live("a flood of 200 MB of output keeps server memory bounded and counts every byte", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        const before = process.memoryUsage().rss
        let peak = before
        const sampler = setInterval(() => {
          peak = Math.max(peak, process.memoryUsage().rss)
        }, 20)
        const result = yield* processes.spawn("t", { command: "head -c 200000000 /dev/urandom", timeoutMs: 60_000 }).pipe(
          Effect.ensuring(Effect.sync(() => clearInterval(sampler)))
        )
        assert.strictEqual(result.status, "terminated")
        assert.strictEqual(result.exitCode, 0)
        assert.isAtMost(result.stdout.length, 64 * 1024)
        assert.isAbove(result.omitted?.stdout ?? 0, 199_000_000)
        // The computer keeps a quarter of --retain-bytes (32 MiB) from the start and the rest from
        // the end; a cursor in the middle skips to the end's first kept byte and says how many fell out.
        const middle = yield* processes.read("t", { id: result.pid, stdoutCursor: 100_000_000, maxBytes: 1024 })
        const fell = middle.omitted?.stdout ?? 0
        assert.isAbove(fell, 0, "the bytes that fell out of retention are counted")
        assert.isAtLeast(100_000_000 + fell, 200_000_000 - 24 * 1024 * 1024, "at most the tail is kept")
        // Random bytes are not UTF-8, so the page is measured by its cursor, not its decoded text.
        const page = (middle.next?.stdout ?? 0) - 100_000_000 - fell
        assert.isTrue(page > 0 && page <= 1024, `the page read after the gap is at most maxBytes (${page})`)
        const growth = (peak - before) / (1024 * 1024)
        assert.isBelow(growth, 128, `RSS grew by ${growth.toFixed(1)} MiB`)
      })
    ), 120_000)

  it.live("100 concurrent background processes all finish with their output", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        const started = yield* Effect.forEach(
          Array.from({ length: 100 }, (_, i) => i),
          (i) => processes.spawn("t", { command: `sleep 1; echo done-${i}`, background: true }),
          { concurrency: "unbounded" }
        )
        const results = yield* Effect.forEach(started, ({ pid }) => processes.wait("t", { id: pid, timeoutMs: 30_000 }), { concurrency: "unbounded" })
        assert.isTrue(results.every((r) => r.outcome === "exited" && r.exitCode === 0))
        const outputs = yield* Effect.forEach(started, ({ pid }) => processes.read("t", { id: pid }))
        assert.deepStrictEqual(outputs.map((o) => o.stdout), started.map((_, i) => `done-${i}\n`))
      }), { maxFinished: 200 }), 60_000)

  it.live("sandbox_exec keeps head and tail of output over the limit and marks the cut", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        const result = yield* processes.exec("t", { command: "echo FIRST; head -c 300000 /dev/zero | tr '\\0' x; echo; echo LAST" })
        assert.strictEqual(result.exit_code, 0)
        assert.isTrue(result.truncated)
        assert.isTrue(result.stdout.startsWith("FIRST\n"))
        assert.isTrue(result.stdout.endsWith("LAST\n"))
        assert.isAtMost(Buffer.byteLength(result.stdout), 24 * 1024 + 200)
        // The marker stands on its own line: `\n[… N bytes omitted …]\n` between head and tail.
        const omitted = /\n\[… (\d+) bytes omitted …\]\n/.exec(result.stdout)
        assert.isNotNull(omitted)
        assert.strictEqual(Buffer.byteLength(result.stdout.replace(omitted![0], "")) + Number(omitted![1]), 6 + 300_000 + 1 + 5, "the marker is exact")
        assert.match(result.stderr, /output was 300012 bytes of stdout/)
        assert.strictEqual(result.stdout_bytes, 6 + 300_000 + 1 + 5)
        assert.isDefined(result.pid, "the rest can be read through stdout")
        assert.isUndefined(result.output_limit_exceeded, "under --output-limit the command runs to its end")
      }), { outputLimit: 1_000_000 }))

  it.live("sandbox_exec stops a command whose stdout and stderr together pass --output-limit (Kilntainers' contract)", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        // Kilntainers' TestSharedOutputLimit: 2048 bytes against a limit of 1024.
        const theirs = yield* processes.exec("t", { command: "head -c 2048 /dev/zero | tr '\\0' 'a'", timeout: 5 })
        assert.strictEqual(theirs.exit_code, 1)
        assert.include(theirs.stderr, "output limit exceeded")
        assert.isTrue(theirs.output_limit_exceeded)
        assert.strictEqual(theirs.stdout_bytes, 2048, "the exact count")
        const omitted = /\n\[… (\d+) bytes omitted …\]\n/.exec(theirs.stdout)
        assert.isNotNull(omitted, "head and tail, the middle marked")
        const carried = Buffer.byteLength(theirs.stdout.replace(omitted![0], ""))
        assert.isAtMost(carried, 1024, "no more of the command's bytes than the limit")
        assert.strictEqual(carried + Number(omitted![1]), 2048)
        // A command that would never end is stopped, its tree killed, both streams counted together.
        const endless = yield* processes.exec("t", { command: "(yes err >&2 &); yes out", timeout: 30 })
        assert.strictEqual(endless.exit_code, 1)
        assert.isTrue(endless.output_limit_exceeded)
        assert.include(endless.stderr, "the command was stopped and its process tree killed")
        assert.isAbove(endless.stdout_bytes! + endless.stderr_bytes!, 1024)
        assert.isBelow(endless.exec_duration_ms, 20_000)
        const ps = yield* processes.list("t", { status: "all" })
        const entry = ps.processes.find((p) => p.pid === endless.pid)
        assert.include(entry?.reason ?? "", "output limit exceeded")
        // Within the limit nothing changes.
        const small = yield* processes.exec("t", { command: "head -c 1000 /dev/zero | tr '\\0' b" })
        assert.strictEqual(small.exit_code, 0)
        assert.strictEqual(small.stdout, "b".repeat(1000))
        assert.isUndefined(small.output_limit_exceeded)
      }), { outputLimit: 1024 }), 60_000)

  it.live("wait returns when output goes quiet", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        const { pid: id } = yield* processes.spawn("t", { command: "echo a; sleep 0.2; echo b; sleep 30", background: true })
        const quiet = yield* processes.wait("t", { id, quietMs: 500, timeoutMs: 10_000 })
        assert.strictEqual(quiet.outcome, "quiet")
        assert.isBelow(quiet.waitedMs, 5_000)
        const out = yield* processes.read("t", { id, stdoutCursor: 0 })
        assert.strictEqual(out.stdout, "a\nb\n")
        yield* processes.kill("t", { id, signal: "SIGKILL" })
      })
    ))

  it.live("non-TTY processes get the non-interactive environment and none of the server's", () =>
    Effect.gen(function*() {
      process.env.KT_SERVER_SECRET = "hunter2"
      const result = yield* withProcesses((processes) => processes.exec("t", { command: "env" }))
      delete process.env.KT_SERVER_SECRET
      assert.notInclude(result.stdout, "hunter2")
      assert.include(result.stdout, "PAGER=cat")
      assert.include(result.stdout, "GIT_TERMINAL_PROMPT=0")
      assert.include(result.stdout, "HOME=/home/agent")
    }))
})

describeIf(bwrapWorks, "bubblewrap")("isolation", () => {
  it.live("a sandboxed process cannot write outside its workspace", () =>
    withProcesses((processes) =>
      Effect.gen(function*() {
        const marker = join(tmpdir(), `kt-escape-${process.pid}`)
        writeFileSync(marker, "original")
        const result = yield* processes.exec("t", {
          command: `echo pwned > ${marker}; echo x > /usr/kt-x; echo x > /etc/kt-x; echo ok > /home/agent/inside; cat /home/agent/inside`
        })
        assert.include(result.stderr, "Read-only file system")
        assert.strictEqual(result.stdout, "ok\n")
        const { readFileSync, existsSync } = yield* Effect.promise(() => import("node:fs"))
        assert.strictEqual(readFileSync(marker, "utf8"), "original")
        assert.isFalse(existsSync("/usr/kt-x"))
        assert.isFalse(existsSync("/etc/kt-x"))
      })
    ))

  it.live("has no network unless --network", () =>
    Effect.gen(function*() {
      const offline = yield* withProcesses((processes) => processes.exec("t", { command: "cat /proc/net/dev | tail -n +3 | cut -d: -f1" }))
      assert.deepStrictEqual(offline.stdout.trim().split(/\s+/), ["lo"])
      const online = yield* withProcesses((processes) => processes.exec("t", { command: "cat /proc/net/dev | tail -n +3 | cut -d: -f1" }), { network: true })
      assert.isAbove(online.stdout.trim().split(/\s+/).length, 1)
    }))
})

