/**
 * Issue 23 — what a new user and an agent trip over — through the MCP SDK's client and the built
 * CLI, on Docker and on the host backend: a computer with the tools agents use by default, file
 * tools that resolve paths as the shell does, a lean `computer_list`, one guest identity, results
 * that say what happened.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { spawnSync } from "node:child_process"
import { chownSync, existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { COMPUTER_IMAGE, engineWorks, removeOurContainersOn } from "../support/Docker.js"
import { binPath, type Harness, startServer } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

/** What agents reach for first (the README's examples, the list). */
const TOOLS = ["bash", "python3", "pip3", "node", "npm", "git", "curl", "vim", "less", "ps", "top", "gcc", "make", "ls", "sed"]

const exec = async (server: Harness, command: string, extra: Record<string, unknown> = {}) => {
  const result = await server.call("sandbox_exec", { command, ...extra })
  assert.isFalse(result.isError, result.text)
  return result.structured as { stdout: string; stderr: string; exit_code: number; computer_id: string }
}

/** The owner of the mounted project: an unprivileged uid that is neither the guest's 1000 nor the server's. */
const OWNER = 2345

/** A file of the host's system directories (the host backend shows /usr), hidden by --deny-read. */
const SYSTEM_FILE = "/usr/lib/os-release"

/** The tools this machine has where the host backend's sandbox shows them (/usr, /bin). */
const hostHas = (tool: string) =>
  spawnSync("sh", ["-c", `command -v ${tool}`], { env: { PATH: "/usr/local/bin:/usr/bin:/bin" } }).status === 0

const backends = [
  {
    name: "docker",
    // No flags: the README's quick start, on the default image.
    args: [],
    available: engineWorks("docker", COMPUTER_IMAGE) && engineWorks("docker"),
    needs: `a Docker engine with ${COMPUTER_IMAGE} (kilntainers image build; the server builds it on first use)`,
    expected: TOOLS
  },
  {
    name: "host",
    args: ["--backend", "host"],
    available: bwrapWorks,
    needs: "bubblewrap",
    expected: TOOLS.filter(hostHas)
  }
] as const

for (const backend of backends) {
  describeIf(backend.available && existsSync(binPath), `${backend.needs} and a built CLI`)(`issue 23 on ${backend.name}`, () => {
    let server: Harness
    beforeAll(async () => {
      server = await startServer([...backend.args])
    }, 180_000)
    afterAll(async () => {
      await server?.client.close()
      if (backend.name === "docker") await removeOurContainersOn("docker")()
    })

    describe("item 1: a computer with what agents use", () => {
      it("has bash, coreutils, procps, python3 and pip, node and npm, git, curl, vim, less and a compiler", async () => {
        const found = await exec(server, `for t in ${backend.expected.join(" ")}; do command -v $t >/dev/null || echo missing $t; done; python3 --version`)
        assert.strictEqual(found.exit_code, 0, found.stderr)
        assert.match(found.stdout, /^Python 3\.\d+\.\d+\n$/, found.stdout)
        if (backend.name === "docker") assert.deepStrictEqual(backend.expected, TOOLS)
      }, 180_000)

      it("computer_list says what image each computer runs", async () => {
        const { computer_id } = await exec(server, "true")
        const listed = await server.call("computer_list", {})
        const mine = listed.structured.computers.find((c: { computer_id: string }) => c.computer_id === computer_id)
        assert.isDefined(mine, listed.text)
        assert.strictEqual(mine.backend, backend.name)
        if (backend.name === "docker") assert.strictEqual(mine.image, COMPUTER_IMAGE)
        else assert.isString(mine.image)
      }, 60_000)
    })

    it("item 7: computer_list stays the same size as an agent works; its audit entries come when asked for", async () => {
      await exec(server, "true")
      const before = await server.call("computer_list", {})
      for (let i = 0; i < 40; i++) await exec(server, `echo ${i}`)
      const after = await server.call("computer_list", {})
      assert.isUndefined(after.structured.audit, after.text)
      assert.strictEqual(after.text.length, before.text.length, `${before.text}\n${after.text}`)
      const asked = await server.call("computer_list", { audit: true })
      const audit = asked.structured.audit as Array<{ kind: string; summary: string }>
      assert.lengthOf(audit, 20)
      assert.isTrue(audit.some((entry) => entry.summary.includes("started: echo 39")), asked.text)
    }, 120_000)

    describe("item 2: a ready pattern that does not come says why", () => {
      it("python's http.server is seen ready at once: PYTHONUNBUFFERED=1 is in the environment", async () => {
        const spawned = await server.call("spawn", { command: "python3 -m http.server 0 --bind 127.0.0.1", pattern: "Serving HTTP", timeoutMs: 20_000 })
        assert.isFalse(spawned.isError, spawned.text)
        assert.match(spawned.structured.match, /Serving HTTP/, spawned.text)
        assert.isUndefined(spawned.structured.note, spawned.text)
        await server.call("kill", { id: spawned.structured.pid, signal: "SIGKILL" })
      }, 60_000)

      it("a pattern not seen gets a note naming buffered output and the fix, from spawn and from wait", async () => {
        const spawned = await server.call("spawn", { command: "printf 'starting\\n'; sleep 30", pattern: "ready", timeoutMs: 500 })
        assert.isFalse(spawned.isError, spawned.text)
        assert.strictEqual(spawned.structured.status, "running")
        assert.isUndefined(spawned.structured.match)
        assert.match(spawned.structured.note, /^pattern not seen in 500 ms; \S+ runs on\. If it buffers output on a pipe/)
        assert.include(spawned.structured.note, "python3 -u (PYTHONUNBUFFERED=1 is set), stdbuf -oL, or tty=true")
        const waited = await server.call("wait", { id: spawned.structured.pid, pattern: "ready", timeoutMs: 300 })
        assert.strictEqual(waited.structured.outcome, "timeout", waited.text)
        assert.match(waited.structured.note, /^pattern not seen in \d+ ms; /)
        // A process that ends is its own answer: no note.
        const ended = await server.call("spawn", { command: "echo done", pattern: "ready", timeoutMs: 5_000 })
        assert.strictEqual(ended.structured.status, "terminated", ended.text)
        assert.isUndefined(ended.structured.note, ended.text)
        await server.call("kill", { id: spawned.structured.pid, signal: "SIGKILL" })
      }, 60_000)
    })

    describe("item 8: what the egress allowlist refused reaches the agent", () => {
      let guarded: Harness
      beforeAll(async () => {
        guarded = await startServer([...backend.args, "--allow-host", "allowed.test"])
      }, 180_000)
      afterAll(async () => {
        await guarded?.client.close()
      })

      it("sandbox_exec names each refused host and port with the rule to add, in its result and its stderr", async () => {
        const none = await guarded.call("sandbox_exec", { command: "true" })
        assert.isUndefined(none.structured.egress_refused, none.text)
        // curl exits 0 on the plain-HTTP 403 body: the command alone says nothing went wrong.
        const run = await guarded.call("sandbox_exec", {
          command: "curl -sS https://pypi.org/simple/ >/dev/null 2>&1; curl -s -o /dev/null http://files.pythonhosted.org/x; echo done"
        })
        assert.isFalse(run.isError, run.text)
        assert.strictEqual(run.structured.exit_code, 0)
        const refused = run.structured.egress_refused as Array<{ host: string; port: number; reason: string }>
        assert.deepStrictEqual(refused.map((r) => `${r.host}:${r.port}`), ["pypi.org:443", "files.pythonhosted.org:80"], run.text)
        assert.include(refused[0]!.reason, "start kilntainers with --allow-host pypi.org")
        assert.include(run.structured.stderr, "[kilntainers: egress refused: pypi.org:443 is not on the egress allowlist")
      }, 60_000)

      it("spawn, wait and stdout say it too; a later call does not repeat an earlier call's refusals", async () => {
        const spawned = await guarded.call("spawn", { command: "curl -s -o /dev/null http://example.org/", timeoutMs: 20_000 })
        assert.strictEqual(spawned.structured.status, "terminated", spawned.text)
        assert.deepStrictEqual(spawned.structured.egress_refused.map((r: { host: string }) => r.host), ["example.org"])
        const later = await guarded.call("spawn", { command: "sleep 0.5; curl -s -o /dev/null http://example.net/; exit 0", background: true })
        assert.isUndefined(later.structured.egress_refused, later.text)
        const waited = await guarded.call("wait", { id: later.structured.pid, timeoutMs: 20_000 })
        assert.strictEqual(waited.structured.outcome, "exited", waited.text)
        assert.deepStrictEqual(waited.structured.egress_refused.map((r: { host: string; port: number }) => `${r.host}:${r.port}`), ["example.net:80"])
        const read = await guarded.call("stdout", { id: later.structured.pid })
        assert.deepStrictEqual(read.structured.egress_refused.map((r: { host: string }) => r.host), ["example.net"], read.text)
      }, 60_000)
    })

    describe("items 5 and 6: terminal screens, settled and free of raw sequences", () => {
      /** An escape sequence, or a terminal's answer shown as text (`^[[2;2R`, `[30;1H`, `;276;0c`, `$y`). */
      const RAW = /\x1b|\^\[\[|\[\d+(;\d+)*[A-Za-z]|\d+;\d+R|;276;0c|\$[py]/

      it("vim, 20 times: spawn with a pattern returns the drawn screen, :wq reports the exit, no screen shows a raw sequence", async () => {
        for (let run = 0; run < 20; run++) {
          const file = `notes-${run}.txt`
          const spawned = await server.call("spawn", { command: `vim ${file}`, tty: true, pattern: file, timeoutMs: 20_000, cols: 100, rows: 30 })
          assert.isFalse(spawned.isError, spawned.text)
          assert.strictEqual(spawned.structured.status, "running", spawned.text)
          const id = spawned.structured.pid as string
          // Drawn, not just its first bytes: the empty buffer's tildes and the ruler are there.
          assert.match(spawned.structured.stdout, /^~$/m, `run ${run}: ${spawned.text}`)
          assert.match(spawned.structured.stdout, /0,0-1\s+All/, `run ${run}: ${spawned.text}`)
          const typed = await server.call("stdin", { id, input: "ihello from vim\\rsecond line\\e" })
          assert.match(typed.structured.stdout, /^hello from vim\nsecond line\n~/, `run ${run}: ${typed.text}`)
          assert.notInclude(typed.structured.stdout, "-- INSERT --", `run ${run}: vim has taken the Escape: ${typed.text}`)
          const read = await server.call("stdout", { id })
          const saved = await server.call("stdin", { id, input: ":wq\\r" })
          assert.strictEqual(saved.structured.status, "terminated", `run ${run}: ${saved.text}`)
          assert.strictEqual(saved.structured.exitCode, 0, saved.text)
          for (const [what, screen] of [["spawn", spawned], ["stdin", typed], ["stdout", read], [":wq", saved]] as const) {
            assert.notMatch(screen.structured.stdout, RAW, `run ${run}, ${what}: ${screen.structured.stdout}`)
          }
          assert.strictEqual((await exec(server, `cat ${file}`)).stdout, "hello from vim\nsecond line\n")
        }
      }, 600_000)

      it("an app in raw mode that asks where the cursor is gets the answer before keys sent right after", async () => {
        const app = [
          "import os, sys, termios, tty",
          "old = termios.tcgetattr(0); tty.setraw(0)",
          "os.write(1, b'ready> \\x1b[6n')",
          "got = b''",
          "while not got.endswith(b'!'): got += os.read(0, 64)",
          "termios.tcsetattr(0, termios.TCSANOW, old)",
          "print(); print('got', got.decode().replace(chr(27), 'ESC'))"
        ].join("\n")
        await exec(server, `cat > ask.py <<'EOF'\n${app}\nEOF`)
        for (let run = 0; run < 5; run++) {
          const spawned = await server.call("spawn", { command: "python3 ask.py", tty: true, background: true })
          const id = spawned.structured.pid as string
          // The keys go as soon as the server has the query: the terminal answers it first.
          const waited = await server.call("wait", { id, pattern: "ready> ", timeoutMs: 20_000 })
          assert.strictEqual(waited.structured.outcome, "matched", waited.text)
          const sent = await server.call("stdin", { id, input: "keys!" })
          assert.match(sent.structured.stdout, /^got ESC\[1;8Rkeys!$/m, `run ${run}: ${sent.text}`)
          assert.notMatch(sent.structured.stdout, /\^\[/, sent.text)
        }
      }, 120_000)
    })

    it("item 10: --state-dir is used, and said to be, with no warning that it is ignored", async () => {
      await exec(server, "true")
      assert.notMatch(server.stderr(), /--state-dir[^\n]*(ignored|does not apply)/)
      assert.include(server.stderr(), `state ${server.stateDir}`)
    }, 60_000)

    it("item 9: the guest is agent, uid 1000, home /home/agent, not root", async () => {
      const who = await exec(server, "id -un; id -u; id -g; echo $HOME; cd && pwd")
      assert.strictEqual(who.stdout, "agent\n1000\n1000\n/home/agent\n/home/agent\n", who.stderr)
    }, 60_000)

    // The README's "Your project in a computer": a project mounted as the working directory, its .env hidden.
    describe("a mounted project (--mount DIR:/home/agent/app --workdir /home/agent/app --deny-read DIR/.env)", () => {
      let project: string
      let mounted: Harness
      beforeAll(async () => {
        project = mkdtempSync(join(tmpdir(), "kt-e2e-project-"))
        writeFileSync(join(project, ".env"), "API_KEY=not-for-the-agent\n")
        chownSync(join(project, ".env"), OWNER, OWNER)
        chownSync(project, OWNER, OWNER)
        mounted = await startServer([
          ...backend.args,
          "--mount",
          `${project}:/home/agent/app`,
          "--workdir",
          "/home/agent/app",
          "--deny-read",
          join(project, ".env"),
          // On host also a file of the system directories the sandbox shows (a container shows none of the host's).
          ...(backend.name === "host" ? ["--deny-read", SYSTEM_FILE] : [])
        ])
      }, 180_000)
      afterAll(async () => {
        await mounted?.client.close()
      })

      it("item 4: file_write and file_read resolve a relative path against --workdir, as the shell does", async () => {
        const written = await mounted.call("file_write", { path: "notes/todo.txt", content: "ship it\n" })
        assert.isFalse(written.isError, written.text)
        assert.strictEqual(readFileSync(join(project, "notes", "todo.txt"), "utf8"), "ship it\n")
        const read = await mounted.call("file_read", { path: "notes/todo.txt" })
        assert.isFalse(read.isError, read.text)
        assert.strictEqual(read.structured.content, "ship it\n")
        const shell = await exec(mounted, "pwd; cat notes/todo.txt")
        assert.strictEqual(shell.stdout, "/home/agent/app\nship it\n")
        // An absolute path is still the computer's own.
        const home = await mounted.call("file_write", { path: "/home/agent/elsewhere.txt", content: "x" })
        assert.isFalse(home.isError, home.text)
        assert.isFalse(existsSync(join(project, "elsewhere.txt")))
      }, 120_000)

      it("item 10: a --deny-read file reads as empty, as the README says (not EACCES), to the shell and file_read, and stays unwritten", async () => {
        const shell = await exec(mounted, "cat .env; echo \"cat $?\"; wc -c < .env; echo changed > .env; echo \"write $?\"")
        assert.strictEqual(shell.stdout, "cat 0\n0\nwrite 1\n", shell.stderr)
        assert.notInclude(shell.stderr, "Permission denied")
        assert.match(shell.stderr, /\.env: Read-only file system/)
        const read = await mounted.call("file_read", { path: ".env" })
        assert.isFalse(read.isError, read.text)
        assert.strictEqual(read.structured.content, "")
        const written = await mounted.call("file_write", { path: ".env", content: "changed" })
        assert.isTrue(written.isError, written.text)
        // Said as the file system says it, without the shell's name and line that wrote it.
        assert.match(written.text, /: cannot create \.env: Read-only file system$/)
        assert.notMatch(written.text, /sh: (line )?\d+:/)
        assert.strictEqual(readFileSync(join(project, ".env"), "utf8"), "API_KEY=not-for-the-agent\n")
        if (backend.name === "host") {
          const system = await exec(mounted, `cat ${SYSTEM_FILE}; echo "cat $?"; wc -c < ${SYSTEM_FILE}`)
          assert.strictEqual(system.stdout, "cat 0\n0\n", system.stderr)
        }
      }, 120_000)

      it("item 9: the same user and home as without a mount, and what it writes there belongs on the host to the directory's owner", async () => {
        const who = await exec(mounted, "id -un; echo $HOME; echo made > made.txt; mkdir -p sub && touch sub/inner")
        assert.strictEqual(who.stdout, "agent\n/home/agent\n", who.stderr)
        const written = await mounted.call("file_write", { path: "written.txt", content: "x" })
        assert.isFalse(written.isError, written.text)
        for (const file of ["made.txt", "sub", "sub/inner", "written.txt"]) {
          const stat = statSync(join(project, file))
          assert.deepStrictEqual([stat.uid, stat.gid], [OWNER, OWNER], file)
        }
        // Inside, they are agent's: the guest owns its project.
        const inside = await exec(mounted, "stat -c '%U %G' made.txt written.txt")
        assert.strictEqual(inside.stdout, "agent agent\nagent agent\n")
      }, 120_000)
    })
  })
}
