/**
 * The README's interactive examples on the computer image (images/computer), through the MCP tools
 * of the built CLI with `--backend docker --image <computer image>`, on Docker and on Podman
 * (`--engine podman`): vim edits and saves a file, the Python REPL answers, less pages and quits,
 * top shows the processes and quits — each on a real terminal, read back as its rendered screen.
 * And the image has what agents expect, with the user agent (uid 1000) beside root.
 */
import { afterAll, assert, beforeAll, it } from "vitest"
import { existsSync } from "node:fs"
import { COMPUTER_IMAGE, engineWorks, removeOurContainersOn, SOCKETS, type TestEngine } from "../support/Docker.js"
import { binPath, type Harness, startServer } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"

/** The screen of a TTY process once it matches `pattern` (polled; bounded). */
const screenMatching = async (server: Harness, id: string, pattern: RegExp, timeoutMs = 20_000): Promise<string> => {
  const deadline = Date.now() + timeoutMs
  let text = ""
  for (;;) {
    const read = await server.call("stdout", { id })
    assert.isFalse(read.isError, read.text)
    assert.isDefined(read.structured.screen, "a TTY process's stdout is its screen")
    text = read.structured.stdout
    if (pattern.test(text)) return text
    if (Date.now() > deadline) assert.fail(`the screen did not match ${pattern} within ${timeoutMs} ms; it shows:\n${text}`)
    await new Promise((resolve) => setTimeout(resolve, 150))
  }
}

/** Waits for the process to exit; its exit code. */
const exited = async (server: Harness, id: string) => {
  const done = await server.call("wait", { id, timeoutMs: 15_000 })
  assert.strictEqual(done.structured.outcome, "exited", done.text)
  return done.structured.exitCode as number
}

const tty = async (server: Harness, command: string) => {
  const started = await server.call("spawn", { command, tty: true, background: true, cols: 100, rows: 30 })
  assert.isFalse(started.isError, started.text)
  return started.structured.pid as string
}

const exec = async (server: Harness, command: string) => {
  const result = await server.call("sandbox_exec", { command })
  assert.isFalse(result.isError, result.text)
  return result.structured as { stdout: string; stderr: string; exit_code: number }
}

for (const engine of ["docker", "podman"] as const satisfies ReadonlyArray<TestEngine>) {
  const available = engineWorks(engine, COMPUTER_IMAGE) && existsSync(binPath)
  const needs = `a ${engine} engine at ${SOCKETS[engine]} with the computer image ${COMPUTER_IMAGE} ` +
    `(kilntainers image build${engine === "podman" ? " --engine podman" : ""}) and a built CLI`
  const args = ["--backend", "docker", "--engine", engine, "--image", COMPUTER_IMAGE]

  describeIf(available, needs)(`interactive programs on the computer image (${engine})`, () => {
    let server: Harness
    beforeAll(async () => {
      server = await startServer(args)
      // The computer is made by the first call: everything after runs in it.
      assert.strictEqual((await exec(server, "echo ready")).stdout, "ready\n")
    }, 120_000)
    afterAll(async () => {
      await server?.client.close()
      await removeOurContainersOn(engine)()
    })

    it("vim edits a file and saves it", async () => {
      const id = await tty(server, "vim notes.txt")
      // Vim is up on the file: its message names it, or, once a redraw has cleared the message, its
      // ruler shows (one CI run saw only the ruler and the tildes).
      await screenMatching(server, id, /notes\.txt|0,0-1\s+All/)
      // Insert mode, two lines, Escape, write and quit.
      await server.call("stdin", { id, input: "ihello from vim\\rsecond line\\e" })
      await screenMatching(server, id, /second line/)
      await server.call("stdin", { id, input: ":wq\\r" })
      assert.strictEqual(await exited(server, id), 0)
      assert.strictEqual((await exec(server, "cat notes.txt")).stdout, "hello from vim\nsecond line\n")
    }, 60_000)

    it("the Python REPL evaluates what it is given and exits", async () => {
      const id = await tty(server, "python3")
      await screenMatching(server, id, /Python 3\.\d+[\s\S]*^>>>/m)
      await server.call("stdin", { id, input: "import sys; print(sys.stdin.isatty(), 6 * 7)\\r" })
      await screenMatching(server, id, /^True 42$/m)
      await server.call("stdin", { id, input: "exit()\\r" })
      assert.strictEqual(await exited(server, id), 0)
    }, 60_000)

    it("less pages a long file, jumps to its end and quits", async () => {
      await exec(server, "seq -f 'line %g' 1 500 > long.txt")
      const id = await tty(server, "less long.txt")
      const first = await screenMatching(server, id, /^line 1$/m)
      assert.notMatch(first, /^line 500$/m)
      await server.call("stdin", { id, input: "G" })
      await screenMatching(server, id, /^line 500$[\s\S]*\(END\)/m)
      await server.call("stdin", { id, input: "q" })
      assert.strictEqual(await exited(server, id), 0)
    }, 60_000)

    it("top shows the computer's processes and quits on q", async () => {
      const sleeper = await server.call("spawn", { command: "sleep 600", background: true })
      const id = await tty(server, "top -d 1")
      const screen = await screenMatching(server, id, /PID\s+USER[\s\S]*\bsleep\b/)
      assert.match(screen, /^top - /m)
      assert.match(screen, /^Tasks:/m)
      await server.call("stdin", { id, input: "q" })
      assert.strictEqual(await exited(server, id), 0)
      await server.call("kill", { id: sleeper.structured.pid, signal: "SIGKILL" })
    }, 60_000)

    it("has the tools agents expect: git, curl, jq, unzip, python3 with venv and pip, a C compiler", async () => {
      const tools = await exec(server, [
        "set -e",
        "for t in git curl jq unzip zip python3 pip vim less top ps gcc make; do command -v $t >/dev/null || echo missing $t; done",
        "printf '#include <stdio.h>\\nint main(void){puts(\"compiled\");return 0;}\\n' > hello.c && gcc -o hello hello.c && ./hello",
        "git init -q repo && git -C repo -c user.email=a@b -c user.name=a commit -q --allow-empty -m first && git -C repo log --format=%s",
        "echo '{\"a\":[1,2]}' | jq -c '.a'",
        "python3 -m venv venv && venv/bin/python -c 'import sys; print(sys.prefix.endswith(\"venv\"))'",
        // pip installs into the system Python too (no network needed for a local package).
        "mkdir -p pkg/ktdemo && echo 'X = 42' > pkg/ktdemo/__init__.py",
        "printf '[build-system]\\nrequires = [\"setuptools\"]\\nbuild-backend = \"setuptools.build_meta\"\\n[project]\\nname = \"ktdemo\"\\nversion = \"1.0\"\\n' > pkg/pyproject.toml",
        "pip install -q --no-index --no-build-isolation ./pkg && cd / && python3 -c 'import ktdemo; print(ktdemo.X)'"
      ].join("\n"))
      assert.strictEqual(tools.stdout, "compiled\nfirst\n[1,2]\nTrue\n42\n", tools.stderr)
      assert.strictEqual(tools.exit_code, 0)
    }, 120_000)
  })

  describeIf(available, needs)(`the computer image's user agent (${engine})`, () => {
    it("runs processes as agent (uid 1000), whose home /home/agent is its own", async () => {
      const server = await startServer([...args, "--docker-run-flag=--user=agent"])
      try {
        const who = await exec(server, "id -un; id -u; id -g; pwd; echo $HOME; touch mine && stat -c %U mine; stat -c %U .")
        assert.strictEqual(who.stdout, "agent\n1000\n1000\n/home/agent\n/home/agent\nagent\nagent\n", who.stderr)
        // Not root, and none of root's capabilities (Podman would make them ambient): the system stays out of reach.
        const denied = await exec(server, "touch /etc/kt-agent-was-here 2>&1; echo $?")
        assert.match(denied.stdout, /Permission denied\n1\n$/)
        const caps = await exec(server, "grep -E '^Cap(Eff|Amb):' /proc/self/status")
        assert.strictEqual(caps.stdout, "CapEff:\t0000000000000000\nCapAmb:\t0000000000000000\n")
      } finally {
        await server.client.close()
        await removeOurContainersOn(engine)()
      }
    }, 120_000)
  })
}
