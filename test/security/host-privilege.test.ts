/**
 * Attacks on the host backend's sandbox from inside a computer, through the MCP tools of the built
 * CLI, with the server run as root and as an unprivileged user (issue 9: items 1 and 3, the
 * capability bounding set, nested user namespaces, host paths). Every check is made without
 * changing the host: writability with access()/open() without writing, never by writing a setting.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { chownSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { root as packageRoot } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"
import { type Facts, type HostServer, modes, probe, requirements, requirementsMet, startHostServer } from "./HostServer.js"

/** sysctls that belong to the sandbox's own namespaces (pid, ipc, mqueue): writing them changes nothing outside. */
const NAMESPACED_SYSCTLS = [
  /^\/proc\/sys\/kernel\/(ns_last_pid|pid_max)$/,
  /^\/proc\/sys\/kernel\/(msgmax|msgmnb|msgmni|auto_msgmni|sem|shmall|shmmax|shmmni|shm_rmid_forced)$/,
  /^\/proc\/sys\/fs\/mqueue\/[a-z_]+$/
]

/** Files of a host's /etc that must never be in a computer. */
const ETC_SECRETS = ["shadow", "gshadow", "shadow-", "gshadow-", "ssh", "sudoers", "sudoers.d", "machine-id", "subuid", "subgid", "pip.conf", "npmrc", "gitconfig", "netrc", "security", "pam.d"]

const computerDir = (server: HostServer, id: string) => join(server.stateDir, "computers", id)

describeIf(requirementsMet, requirements)("host sandbox: no host privilege", () => {
  for (const mode of modes) {
    describe(`server run as ${mode === "root" ? "root" : "an unprivileged user"}`, () => {
      let server: HostServer
      let facts: Facts
      const id = "attacker"

      beforeAll(async () => {
        server = await startHostServer(mode)
        const created = await server.call("computer_create", { computer_id: id, temporary: false })
        assert.isFalse(created.isError, created.text)
        // A root-only file the server itself puts in the computer's workspace.
        const planted = join(computerDir(server, id), "home", "root-only.txt")
        writeFileSync(planted, "top secret\n", { mode: 0o600 })
        chownSync(planted, 0, 0)
        facts = await probe(server, id, "/home/agent/root-only.txt")
      }, 180_000)
      afterAll(async () => {
        await server?.close()
      })

      it("guest code is `agent` in its own user namespace, mapped to an unprivileged host uid", async () => {
        assert.strictEqual(facts.uid, 1000)
        assert.strictEqual(facts.gid, 1000)
        assert.deepStrictEqual(facts.uid_map.filter((line) => line.trim() !== "").map((line) => line.trim().split(/\s+/)[0]), ["1000"])
        const made = await server.call("sandbox_exec", { command: "echo mine > made-inside.txt", computer_id: id })
        assert.strictEqual(made.structured.exit_code, 0)
        const owner = statSync(join(computerDir(server, id), "home", "made-inside.txt")).uid
        assert.notStrictEqual(owner, 0, "a file made inside belongs to host root")
        if (mode === "root") {
          const record = JSON.parse(readFileSync(join(computerDir(server, id), "computer.json"), "utf8")) as { uid?: number }
          assert.strictEqual(owner, record.uid, "the computer's own uid, recorded in computer.json")
          assert.isAtLeast(owner, 65536)
        } else {
          assert.strictEqual(owner, server.serverUid)
        }
      })

      it("has no capabilities at all, and cannot create nested user namespaces", () => {
        for (const set of ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]) assert.match(facts.caps[set] ?? "", /^0+$/, set)
        assert.notStrictEqual(facts.nested_userns, "ok")
      })

      it("cannot write core_pattern, sysrq-trigger or any host-wide /proc/sys setting", () => {
        assert.isFalse(facts.core_pattern.access_w)
        assert.notStrictEqual(facts.core_pattern.open_w, "ok")
        assert.isFalse(facts.sysrq_trigger.access_w)
        assert.notStrictEqual(facts.sysrq_trigger.open_w, "ok")
        const hostWide = facts.writable_sysctls.filter((path) => !NAMESPACED_SYSCTLS.some((re) => re.test(path)))
        assert.deepStrictEqual(hostWide, [])
      })

      it("cannot read root-only files: the server's planted one, or any the host maps in", () => {
        assert.match(facts.planted ?? "", /^error:EACCES$/)
        assert.deepStrictEqual(facts.root_only_files_readable, [])
        for (const secret of ETC_SECRETS) assert.notInclude(facts.etc, secret)
        assert.include(facts.etc, "passwd")
        assert.include(facts.etc, "ssl")
      })

      it("does not possess the server's keyrings", () => {
        const { keyring } = facts
        const denied = (value: number | string) => typeof value === "string" && /^error:(EPERM|ENOSYS|EACCES)$/.test(value)
        if (denied(keyring.session)) return // keyrings are out of the guest's reach altogether (seccomp)
        assert.notStrictEqual(keyring.session, server.sessionKeyring, "the guest holds the server's session keyring")
        assert.strictEqual(keyring.session_keys, 0)
        assert.notStrictEqual(typeof keyring.request_server_secret, "number", "the server's secret key was found")
      })

      it("shows no host path: pid 1, its environment, the mount table, computer_list", async () => {
        const hostPath = (text: string) => text.includes(server.stateDir) || text.includes(packageRoot) || text.includes("/tmp/")
        assert.deepStrictEqual(facts.pid1_cmdline.filter(hostPath), [])
        assert.deepStrictEqual(facts.pid1_cmdline.slice(0, 2), ["bwrap", "--args"])
        assert.deepStrictEqual(facts.pid1_environ.filter((entry) => entry !== "" && !entry.startsWith("PATH=")), [])
        assert.deepStrictEqual(facts.pid2_cmdline.filter(hostPath), [])
        // Only bind mounts of the workspace show where it is (mountinfo gives a path within its
        // filesystem); nothing shows where kilntainers is installed.
        const revealing = facts.mounts.filter((m) => m.root.includes(packageRoot) || m.root.startsWith(server.stateDir))
        assert.deepStrictEqual(revealing.map((m) => m.point).filter((point) => point !== "/home/agent"), [])
        const list = await server.call("computer_list", {})
        const mine = (list.structured.computers as Array<{ computer_id?: string; id?: string; sandbox_id: string }>)
        assert.isAbove(mine.length, 0)
        for (const computer of mine) {
          assert.match(computer.sandbox_id, /^host-[0-9a-z]+$/)
          assert.isFalse(hostPath(computer.sandbox_id))
        }
      })

      it("the sandbox's pid 1 (bubblewrap's init, open to the guest) holds no file of the host: not the agent's channel", () => {
        assert.isObject(facts.pid1_fds)
        const fds = Object.entries(facts.pid1_fds as Record<string, string>)
        assert.deepStrictEqual(fds.filter(([, target]) => target.startsWith("/") && target !== "/dev/null"), [])
        // Its stderr is bubblewrap's own pipe, which nothing reads once the sandbox is set up (host-pid1.test.ts).
        assert.deepStrictEqual(fds.filter(([fd, target]) => (target.startsWith("pipe:") && fd !== "2") || target.startsWith("socket:")), [])
      })

      it("can write nothing of the host but the workspace", () => {
        for (const [path, result] of Object.entries(facts.writes)) assert.notStrictEqual(result, "ok", path)
        const virtual = new Set(["tmpfs", "proc", "devpts", "devtmpfs", "mqueue", "sysfs"])
        const writableHostMounts = facts.mounts.filter((m) => m.options.split(",").includes("rw") && !virtual.has(m.type))
        assert.includeMembers(["/home/agent"], writableHostMounts.map((m) => m.point))
      })
    })
  }
})
