/**
 * The host sandbox's pid 1 (bubblewrap's init) runs as the guest's uid and is dumpable, so a guest
 * can take any descriptor it holds (pidfd_getfd, ptrace). Until issue 19 its stderr was the
 * server's pipe from the sandbox: a guest flood through it cost the server CPU, and its text (with
 * terminal escapes) became the reason the server gave for the computer's loss. Now pid 1's stderr
 * is a pipe that nothing reads once the sandbox is set up (kt-sandbox's relay). Run with the server
 * as root and as an unprivileged user; nothing here touches the host.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { describeIf } from "../support/Requirements.js"
import { type HostServer, modes, requirements, requirementsMet, startHostServer } from "./HostServer.js"

const MARKER = "KT-GUEST-TEXT-THROUGH-PID-1"

/**
 * Takes each descriptor of pid 1 and writes up to 1 MiB of the marker (with a terminal escape) into
 * each pipe or socket among them, without blocking; eventfds and files are left alone. Prints
 * `{fd: {target, wrote, error}}`.
 */
const TAKE_PID1_FDS = `
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
PIDFD_GETFD = 438
chunk = b"${MARKER}\\x1b[31m\\n" * 2048
pidfd = os.pidfd_open(1)
found = {}
for name in sorted(os.listdir("/proc/1/fd"), key=int):
    fd = libc.syscall(PIDFD_GETFD, pidfd, int(name), 0)
    if fd < 0:
        found[name] = {"target": "not taken: " + errno.errorcode[ctypes.get_errno()]}
        continue
    target = os.readlink("/proc/self/fd/%d" % fd)
    entry = {"target": target.split(":")[0], "wrote": 0}
    if target.startswith(("pipe:", "socket:")):
        os.set_blocking(fd, False)
        try:
            while entry["wrote"] < (1 << 20):
                entry["wrote"] += os.write(fd, chunk)
        except OSError as e:
            entry["error"] = errno.errorcode[e.errno]
    os.close(fd)
    found[name] = entry
print(json.dumps(found))
`

/** Kills the computer's agent (the guest's uid may): the server reports the computer lost, and why. */
const KILL_AGENT = `
import os, signal
for pid in os.listdir("/proc"):
    if pid.isdigit() and open("/proc/%s/comm" % pid).read().strip() == "kt-agent":
        os.kill(int(pid), signal.SIGKILL)
`

interface Taken {
  readonly target: string
  readonly wrote: number
  readonly error?: string
}

describeIf(requirementsMet, requirements)("host sandbox: pid 1 holds nothing that reaches the server", () => {
  for (const mode of modes) {
    describe(`server run as ${mode === "root" ? "root" : "an unprivileged user"}`, () => {
      let server: HostServer
      const id = "pid1-stderr"
      beforeAll(async () => {
        server = await startHostServer(mode)
        const created = await server.call("computer_create", { computer_id: id })
        assert.isFalse(created.isError, created.text)
      }, 180_000)
      afterAll(async () => {
        await server?.close()
      })

      it("a guest that takes pid 1's stderr writes into a pipe nobody reads: not a byte reaches the server", async () => {
        const result = await server.call("sandbox_exec", { args: ["python3", "-c", TAKE_PID1_FDS], computer_id: id })
        assert.strictEqual(result.structured?.exit_code, 0, result.text)
        const taken = JSON.parse(result.structured.stdout as string) as Record<string, Taken>
        assert.strictEqual(taken["2"]?.target, "pipe", "pid 1's stderr is bubblewrap's own pipe, not the server's")
        for (const [fd, { target, wrote, error }] of Object.entries(taken)) {
          if (target !== "pipe" && target !== "socket") continue
          assert.strictEqual(wrote, 0, `pid 1's fd ${fd} (${target}) took ${wrote} bytes`)
          assert.strictEqual(error, "EPIPE", `pid 1's fd ${fd}`)
        }
      }, 120_000)

      it("the reason the server gives for a computer's loss carries no guest text", async () => {
        await server.call("sandbox_exec", { args: ["python3", "-c", TAKE_PID1_FDS], computer_id: id })
        const killed = await server.call("sandbox_exec", { args: ["python3", "-c", KILL_AGENT], computer_id: id })
        assert.notStrictEqual(killed.structured?.exit_code, 0, "the agent's death ends its processes")
        // The computer is opened again on its next use.
        const again = await server.call("sandbox_exec", { command: "echo again", computer_id: id })
        assert.strictEqual(again.structured?.stdout, "again\n", again.text)
        const list = await server.call("computer_list", { audit: true })
        const audit = (list.structured.audit ?? []) as Array<{ summary: string }>
        const lost = audit.filter((entry) => entry.summary.startsWith("computer lost"))
        assert.isAbove(lost.length, 0, JSON.stringify(audit))
        for (const entry of lost) assert.notInclude(entry.summary, MARKER)
        assert.notInclude(server.stderr(), MARKER)
        assert.include(server.stderr(), `computer ${id} was lost`)
      }, 180_000)
    })
  }
})
