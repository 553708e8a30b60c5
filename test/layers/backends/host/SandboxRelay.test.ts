/**
 * kt-sandbox's relay of bubblewrap's stderr (native/kt-sandbox.c, outer step 6), with a stand-in
 * for bubblewrap: a script that speaks as bubblewrap would while it sets a sandbox up, keeps its
 * stderr in a child as bubblewrap's init (pid 1) does, then execs the command line it was given.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as NativeChecksums from "../../../../src/layers/backends/agent/NativeChecksums.js"
import { packageRoot } from "../../../../src/layers/server/PackageRoot.js"

const dir = mkdtempSync(join(tmpdir(), "kt-sandbox-relay-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** A stand-in for bubblewrap: `script` runs first, then the command after `--args N --` is exec'd. */
const fakeBwrap = (name: string, script: string) => {
  const path = join(dir, name)
  writeFileSync(path, `#!/bin/sh\n${script}\nshift 3\nexec "$@"\n`)
  chmodSync(path, 0o755)
  return path
}

/** This checkout's kt-sandbox, checked against its manifest. */
const kt = Effect.map(NativeChecksums.find("host", packageRoot()!, "kt-sandbox"), (found) => {
  assert.strictEqual(found._tag, "Verified", "kt-sandbox is built (npm run build:native)")
  return found._tag === "Verified" ? found.path : ""
})

/** Runs kt-sandbox as the server does (stdio pipes), to the end of its output. */
const launch = (args: ReadonlyArray<string>) =>
  Effect.async<{ readonly code: number | null; readonly stdout: string; readonly stderr: string }>((resume) => {
    const child = spawn(args[0]!, args.slice(1), { stdio: ["pipe", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    child.stdin.end()
    child.on("close", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

describe("kt-sandbox's relay of bubblewrap's stderr", () => {
  it.live("what bubblewrap says while it sets up reaches the server, at most 8 KiB of it", () =>
    Effect.gen(function*() {
      const launcher = yield* kt
      const bwrap = fakeBwrap("says-too-much", `echo "bwrap: Can't bind mount /x on /newroot/x: No such file" >&2; head -c 65536 /dev/zero | tr '\\0' x >&2; exit 1`)
      const { code, stderr } = yield* launch([launcher, "--channel", "--", bwrap, "--", "/bin/true"])
      assert.strictEqual(code, 1)
      assert.match(stderr, /^bwrap: Can't bind mount \/x on \/newroot\/x: No such file\n/)
      assert.isAtMost(stderr.length, 8192 + 100)
      assert.match(stderr, /kt-sandbox: (\d+) more bytes from bubblewrap not shown\n$/)
      const shown = stderr.length - stderr.slice(stderr.lastIndexOf("kt-sandbox:")).length
      const notShown = Number(/(\d+) more bytes/.exec(stderr)![1])
      assert.strictEqual(shown + notShown, "bwrap: Can't bind mount /x on /newroot/x: No such file\n".length + 65536)
    }))

  it.live("once the command runs, bubblewrap's stderr has no reader, and the command writes to the server's", () =>
    Effect.gen(function*() {
      const launcher = yield* kt
      const started = join(dir, "started")
      const result = join(dir, "pid1-result")
      // The stand-in's child keeps bubblewrap's stderr as pid 1 does, and writes to it once the
      // command runs (bounded waits).
      const bwrap = fakeBwrap("keeps-its-stderr", [
        `echo "bwrap: setting up" >&2`,
        `( trap '' PIPE; for i in $(seq 200); do [ -e ${started} ] && break; sleep 0.05; done`,
        `  echo "late text from pid 1" >&2; echo "pid 1's write: $?" > ${result}.tmp; mv ${result}.tmp ${result} ) &`
      ].join("\n"))
      const command = `touch ${started}; echo "the command's stderr" >&2; ` +
        `for i in $(seq 200); do [ -e ${result} ] && break; sleep 0.05; done; cat ${result}`
      const { code, stdout, stderr } = yield* launch([
        launcher, "--channel", "--", bwrap, "--",
        launcher, "--sync", "8", "--stdio", "3", "4", "7", "--", "/bin/sh", "-c", command
      ])
      assert.strictEqual(code, 0, stderr)
      assert.strictEqual(stdout, "pid 1's write: 1\n", "the write failed (EPIPE)")
      assert.strictEqual(stderr, "bwrap: setting up\nthe command's stderr\n")
      assert.strictEqual(readFileSync(result, "utf8"), "pid 1's write: 1\n")
    }))
})
