/**
 * Attacks on the agent from inside a computer, as a guest would try them (fixtures/agent-attacks.c): open the agent's
 * descriptors (its output channel is /proc/<agent>/fd/1) to forge frames, read its memory and
 * environment, ptrace it or its shepherd, use keyrings, mount, new user namespaces, bpf, perf,
 * setns, typing into the terminal (TIOCSTI), and reach the agent's socket: on the host it is nowhere in
 * the guest's view; in a container it is, and a connection that does not prove the computer's key is
 * closed (a SPAWN before any proof, a forged proof). Run on the host sandbox with the server as root, on the
 * host sandbox started as an unprivileged user, and in a Docker container (as the default guest, agent
 * without capabilities, and as root with a few, but not CAP_SYS_PTRACE, under --user=0). Nothing here
 * changes the machine: every attempt
 * either fails or is undone (a ptrace attach of the guest's own child, which must work).
 */
import { assert, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import { spawnSync } from "node:child_process"
import { chmodSync, copyFileSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import type { AgentClient } from "../../src/layers/backends/agent/AgentClient.js"
import { newKey } from "../../src/layers/backends/agent/AgentHandshake.js"
import * as AgentLauncher from "../../src/layers/backends/agent/AgentLauncher.js"
import * as NativeBinaries from "../../src/layers/backends/agent/NativeBinaries.js"
import * as DockerBackend from "../../src/layers/backends/docker/DockerBackend.js"
import * as HostBackend from "../../src/layers/backends/host/HostBackend.js"
import { sandboxArgs } from "../../src/layers/backends/host/Sandbox.js"
import { type Connection, type SpawnSpec, ownedEvents } from "../../src/services/Backend.js"
import { Backend } from "../../src/services/Backend.js"
import { docker, dockerWorks, requirement, TEST_IMAGE } from "../support/Docker.js"
import * as ProviderComputer from "../support/ProviderComputer.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

/** The attacks, a static C program (fixtures/agent-attacks.c) compiled once; it prints RESULT{json}. */
const dir = mkdtempSync(join(tmpdir(), "kt-isolation-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const ATTACKS = join(dir, "kt-attacks")
const compiled = spawnSync("cc", ["-static", "-O1", "-o", ATTACKS, join(import.meta.dirname, "fixtures", "agent-attacks.c")], { encoding: "utf8" })
if (compiled.status !== 0) throw new Error(`cannot compile the attacks: ${compiled.stderr || compiled.error}`)

const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/** What every backend must refuse. */
const refused = {
  agent_found: "yes",
  agent_fd_readlink: "EACCES",
  agent_fd1_forge: "EACCES",
  agent_fd0_read: "EACCES",
  agent_environ: "EACCES",
  agent_mem: "EACCES",
  shepherd_fd_readlink: "EACCES",
  ptrace_agent: "EPERM",
  ptrace_shepherd: "EPERM",
  keyctl: "EPERM",
  add_key: "EPERM",
  request_key: "EPERM",
  unshare_user: "EPERM",
  clone_newuser: "EPERM",
  clone3: "ENOSYS",
  mount: "EPERM",
  fsopen: "EPERM",
  pivot_root: "EPERM",
  bpf: "EPERM",
  perf_event_open: "EPERM",
  setns: "EPERM",
  init_module: "EPERM",
  kexec_load: "EPERM"
}

const parse = (stdout: string): Record<string, unknown> => {
  const line = stdout.split(/\r?\n/).find((l) => l.startsWith("RESULT"))
  assert.isDefined(line, `no result in: ${stdout}`)
  return JSON.parse(line!.slice("RESULT".length)) as Record<string, unknown>
}

const checkCommon = (result: Record<string, unknown>, tty: boolean) => {
  for (const [attack, expected] of Object.entries(refused)) assert.strictEqual(result[attack], expected, attack)
  // A guest whose uid owns the directory (uid 0 here) may list the agent's fd numbers, but opening
  // or resolving any of them needs CAP_SYS_PTRACE (the agent is non-dumpable).
  assert.include(["EACCES", "ok"], result["agent_fd_list"])
  assert.strictEqual(result["shepherd_is"], "kt-shepherd")
  assert.strictEqual(result["ptrace_own_child"], "ok", "gdb and strace of the guest's own children keep working")
  assert.strictEqual(result["tiocsti"], tty ? "EPERM" : "no tty")
  assert.strictEqual(result["NoNewPrivs"], "1")
  assert.strictEqual(result["Seccomp"], "2")
  // stdio only: nothing of the agent's.
  assert.strictEqual(result["own_fds"], "0 1 2")
}

const collect = (computer: Connection, spec: SpawnSpec) =>
  Effect.scoped(Effect.flatMap(computer.spawn(spec), (process) =>
    Stream.runFold(ownedEvents(process), "", (acc, event) => (event._tag === "Exit" ? acc : acc + Buffer.from(event.data).toString()))))

describeIf(bwrapWorks, "bubblewrap")("the agent is out of a guest's reach: host sandbox", () => {
  it.scopedLive("with the server as root, over pipes and on a terminal", () =>
    Effect.gen(function*() {
      const backend = yield* HostBackend.make({ stateDir: dir, network: false, sandbox: "bwrap" })
      const id = `iso-${process.pid}`
      const computer = (yield* ProviderComputer.open(backend, id)).connection
      // The workspace on the host (sandbox ids are opaque); the program stays world-executable for the computer's uid.
      copyFileSync(ATTACKS, join(dir, "computers", id, "home", "kt-attacks"))
      for (const tty of [false, true]) {
        const stdout = yield* collect(computer, {
          argv: ["/home/agent/kt-attacks"],
          cwd: "/home/agent",
          env: { PATH },
          ...(tty ? { tty: { cols: 200, rows: 50 } } : {})
        })
        const result = parse(stdout)
        checkCommon(result, tty)
        assert.strictEqual(result["CapEff"], "0000000000000000")
        assert.strictEqual(result["CapPrm"], "0000000000000000")
        // The agent's socket is in the computer's directory on the host, never in the sandbox.
        assert.strictEqual(result["socket_in_view"], "none")
      }
      // The computer still works after all that.
      assert.strictEqual(yield* collect(computer, { argv: ["echo", "fine"], cwd: "/home/agent", env: { PATH } }), "fine\n")
    }), 60_000)

  it.scopedLive("with the sandbox started by an unprivileged user", () =>
    Effect.gen(function*() {
      const binaries = yield* NativeBinaries.locate("host")
      const home = mkdtempSync(join(tmpdir(), "kt-isolation-nobody-"))
      chmodSync(home, 0o777)
      copyFileSync(ATTACKS, join(home, "kt-attacks"))
      // The agent's socket and store in a directory bound in, reachable from here.
      const outside = mkdtempSync(join(tmpdir(), "kt-isolation-socket-"))
      chmodSync(outside, 0o777)
      const place = { socket: join(outside, "agent.sock"), key: newKey() }
      const client: AgentClient = yield* AgentLauncher.open("host", place, Effect.succeed({
        file: "/usr/bin/setpriv",
        args: [
          "--reuid=65534", "--regid=65534", "--clear-groups", "--",
          "/usr/bin/bwrap", ...sandboxArgs({ hostname: "nobody-test", network: false }),
          "--bind", home, "/home/agent",
          "--bind", outside, "/run/kt",
          "--ro-bind", binaries.agent, "/run/kt-agent",
          "--", "/run/kt-agent", "--listen", "/run/kt/agent.sock", "--store", "/run/kt/store", "--bound", "--caps", "drop"
        ],
        cwd: home,
        env: { PATH }
      }), true)
      let stdout = ""
      let closed = false
      yield* client.spawn({ argv: ["/home/agent/kt-attacks", "/run/kt/agent.sock"], cwd: "/home/agent", env: { PATH } }, {
        onOutput: (stream, _offset, data) => (stream === "stdout" ? (stdout += Buffer.from(data).toString()) : undefined),
        onExit: () => {},
        onClosed: () => (closed = true)
      })
      for (let i = 0; i < 1000 && !closed; i++) yield* Effect.sleep("10 millis")
      const result = parse(stdout)
      checkCommon(result, false)
      assert.strictEqual(result["CapEff"], "0000000000000000")
      // This sandbox shows the socket (a test's layout, not the backend's): it still takes no one without the key.
      assert.strictEqual(result["socket_early_spawn"], "closed")
      assert.strictEqual(result["socket_forged_auth"], "closed")
      rmSync(home, { recursive: true, force: true })
    }), 60_000)
})

describeIf(dockerWorks, requirement())("the agent is out of a guest's reach: Docker", () => {
  // The default guest (agent, no capabilities) and root with the container's set (--user=0).
  it.scopedLive("the guest, and root with the container's capabilities, reach nothing of the agent", () =>
    Effect.forEach([[], ["--user=0"]] as const, (runFlags) => Effect.scoped(Effect.gen(function*() {
      const backend = yield* Effect.provide(
        Backend,
        Layer.fresh(DockerBackend.layer({
          engine: "docker",
          dockerHost: undefined,
          image: TEST_IMAGE,
          cpu: undefined,
          memory: undefined,
          pidsLimit: 512,
          network: false,
          runFlags
        }))
      )
      const root = runFlags.length > 0
      const { connection: computer, instance } = yield* ProviderComputer.open(backend, `iso-${root ? "root" : "agent"}-${process.pid}`)
      const archive = spawnSync("tar", ["-C", dir, "-cf", "-", "kt-attacks"])
      yield* Effect.promise(() => docker().getContainer(instance.providerId).putArchive(archive.stdout, { path: "/" }))
      for (const tty of [false, true]) {
        const stdout = yield* collect(computer, {
          argv: ["/kt-attacks", "/.kilntainers/run/agent.sock"],
          cwd: DockerBackend.HOME,
          env: { PATH },
          ...(tty ? { tty: { cols: 200, rows: 50 } } : {})
        })
        const result = parse(stdout)
        checkCommon(result, tty)
        // Docker keeps the container's reduced set for root (apt and dpkg need it), and it is not
        // empty; the default guest has none.
        if (root) assert.notStrictEqual(result["CapEff"], "0000000000000000")
        else assert.strictEqual(result["CapEff"], "0000000000000000")
        // The guest sees the agent's socket, and is not taken for a server.
        assert.strictEqual(result["socket_in_view"], "/.kilntainers/run/agent.sock")
        assert.strictEqual(result["socket_early_spawn"], "closed")
        assert.strictEqual(result["socket_forged_auth"], "closed")
      }
      assert.strictEqual(yield* collect(computer, { argv: ["echo", "fine"], cwd: DockerBackend.HOME, env: { PATH } }), "fine\n")
    })), { discard: true }), 180_000)
})
