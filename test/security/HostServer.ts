/**
 * The built CLI as a host-backend stdio MCP server, run the two ways the security suite attacks it:
 * as root, and as an unprivileged user (a uid with no account, through `setpriv`; on the Docker
 * backend that uid keeps the group of the engine's socket, as a user in the `docker` group). Either way it
 * starts with a session keyring of its own that holds a secret key, `kt-test-server-secret`, so
 * tests can check that computers do not possess the server's keyrings.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { spawnSync } from "node:child_process"
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { binPath, type ToolResult } from "../support/McpHarness.js"
import { bwrapWorks } from "../support/Requirements.js"

export type Mode = "root" | "unprivileged"

/** The unprivileged server's uid and gid (no account needed). */
export const UNPRIVILEGED = 64_123
export const runningAsRoot = process.getuid?.() === 0
const works = (command: string, args: ReadonlyArray<string>) => spawnSync(command, args, { stdio: "ignore" }).status === 0

/** The modes this machine can run: root needs the tests to run as root; unprivileged is setpriv's uid then, else our own. */
export const modes: ReadonlyArray<Mode> = runningAsRoot ? ["root", "unprivileged"] : ["unprivileged"]

/**
 * Under CI=true every way the suite attacks the server must run, never only some: the tests run as
 * root (else the root server is left out), and on Docker the unprivileged server is attacked too
 * (else it fails for want of the engine socket's group, rather than being left out).
 */
export const underCi = process.env.CI === "true"

/** The group that may use the Docker engine's socket (the `docker` group), when there is one. */
export const engineSocketGroup = ((): number | undefined => {
  try {
    const socket = statSync("/var/run/docker.sock")
    return (socket.mode & 0o060) === 0o060 && socket.gid !== 0 ? socket.gid : undefined
  } catch {
    return undefined
  }
})()

/** Whether the Docker backend is attacked with the server as an unprivileged user in the engine socket's group. */
export const dockerUnprivileged = engineSocketGroup !== undefined || underCi

/**
 * `setpriv`'s arguments that make a command run as the unprivileged uid (none unless the tests run as
 * root): no supplementary groups but, on Docker, the engine socket's.
 */
export const dropPrivileges = (mode: Mode, backend: "host" | "docker"): ReadonlyArray<string> =>
  mode === "unprivileged" && runningAsRoot
    ? [
      "setpriv", "--reuid", String(UNPRIVILEGED), "--regid", String(UNPRIVILEGED),
      ...(backend === "docker" && engineSocketGroup !== undefined ? ["--groups", String(engineSocketGroup)] : ["--clear-groups"]),
      "--"
    ]
    : []

/** Whether the unprivileged uid can run the built CLI from this checkout (it must reach the files). */
const unprivilegedCanRun = () =>
  !runningAsRoot ||
  works("setpriv", ["--reuid", String(UNPRIVILEGED), "--regid", String(UNPRIVILEGED), "--clear-groups", "--", process.execPath, "-e", `require("fs").accessSync(${JSON.stringify(binPath)})`])

export const requirementsMet = bwrapWorks && existsSync(binPath) && works("python3", ["-c", "1"]) && unprivilegedCanRun() &&
  (runningAsRoot || !underCi)
export const requirements =
  "bubblewrap, python3, a built CLI (npm run build), and, as root, setpriv and a checkout every user can read (under CI=true, running as root)"

export const probeSource = readFileSync(join(dirname(fileURLToPath(import.meta.url)), "probe.py"), "utf8")

// Joins a new session keyring holding a secret, says its id on stderr, then becomes the server.
const KEYRING_WRAPPER = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": (248, 250), "aarch64": (217, 219)}[os.uname().machine]
ring = libc.syscall(nr[1], ctypes.c_long(1), b"kt-test-server-session")
key = libc.syscall(nr[0], b"user", b"kt-test-server-secret", b"hunter2", ctypes.c_long(7), ctypes.c_long(-3))
sys.stderr.write("kt-test-session=%d key=%d\\n" % (ring, key))
sys.stderr.flush()
os.execvp(sys.argv[1], sys.argv[1:])
`

export interface HostServer {
  readonly mode: Mode
  readonly stateDir: string
  /** The host uid the server runs as. */
  readonly serverUid: number
  /** The server's session keyring (negative when keyrings are unavailable here). */
  readonly sessionKeyring: number
  readonly stderr: () => string
  readonly pid: number | null
  readonly call: (name: string, args: Record<string, unknown>) => Promise<ToolResult>
  readonly close: () => Promise<void>
}

/**
 * The built CLI as a stdio server of `backend` (host unless said; the Docker backend as an
 * unprivileged user only where the engine's socket has a group: `engineSocketGroup`).
 * `bin`: the built CLI to run, by default this checkout's (another copy must be readable by the unprivileged uid);
 * `env`: more of the server's environment (a credential an `--egress-header` rule names);
 * `state`: the state directory of an earlier server to start on (`dir`), and whether `close` keeps it (`keep`).
 */
export const startHostServer = async (
  mode: Mode,
  args: ReadonlyArray<string> = [],
  backend: "host" | "docker" = "host",
  bin: string = binPath,
  env: Readonly<Record<string, string>> = {},
  state: { readonly dir?: string; readonly keep?: boolean } = {}
): Promise<HostServer> => {
  const stateDir = state.dir ?? mkdtempSync(join(tmpdir(), `kt-sec-${mode}-`))
  const drop = mode === "unprivileged" && runningAsRoot
  if (drop) chownSync(stateDir, UNPRIVILEGED, UNPRIVILEGED)
  const setpriv = dropPrivileges(mode, backend)
  const transport = new StdioClientTransport({
    command: "python3",
    args: ["-c", KEYRING_WRAPPER, ...setpriv, process.execPath, bin, "--backend", backend, "--state-dir", stateDir, ...args],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: stateDir, ...env },
    stderr: "pipe"
  })
  let stderr = ""
  transport.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString()
  })
  const client = new Client({ name: "kilntainers-security-test", version: "1.0.0" })
  await client.connect(transport)
  const call = async (name: string, callArgs: Record<string, unknown>): Promise<ToolResult> => {
    const result = await client.request(
      { method: "tools/call", params: { name, arguments: callArgs } },
      CallToolResultSchema,
      { timeout: 180_000 }
    )
    const text = result.content.map((c) => (c.type === "text" ? c.text : "")).join("")
    return { isError: result.isError === true, text, structured: result.structuredContent }
  }
  for (let i = 0; i < 100 && !/kt-test-session=/.test(stderr); i++) await new Promise((resolve) => setTimeout(resolve, 20))
  const session = /kt-test-session=(-?\d+)/.exec(stderr)
  return {
    mode,
    stateDir,
    serverUid: drop ? UNPRIVILEGED : (process.getuid?.() ?? -1),
    sessionKeyring: session ? Number(session[1]) : -1,
    stderr: () => stderr,
    pid: transport.pid,
    call,
    close: async () => {
      await client.close().catch(() => undefined)
      if (state.keep !== true) rmSync(stateDir, { recursive: true, force: true })
    }
  }
}

/** Runs the attacker's survey in a computer; `planted` is a path the probe tries to read. */
export const probe = async (server: HostServer, computerId: string, planted?: string) => {
  const result = await server.call("sandbox_exec", {
    args: ["python3", "-c", probeSource, ...(planted ? [planted] : [])],
    computer_id: computerId,
    timeout: 120
  })
  if (result.structured?.exit_code !== 0) throw new Error(`the probe failed: ${result.text}`)
  return JSON.parse(result.structured.stdout as string) as Facts
}

export interface Mount {
  readonly root: string
  readonly point: string
  readonly options: string
  readonly type: string
  readonly super: string
}

export interface Facts {
  readonly uid: number
  readonly gid: number
  readonly groups: ReadonlyArray<number>
  readonly uid_map: ReadonlyArray<string>
  readonly caps: Readonly<Record<string, string>>
  readonly core_pattern: { readonly access_w: boolean; readonly open_w: string }
  readonly sysrq_trigger: { readonly access_w: boolean; readonly open_w: string }
  readonly writable_sysctls: ReadonlyArray<string>
  readonly root_only_files_checked: number
  readonly root_only_files_readable: ReadonlyArray<string>
  readonly etc: ReadonlyArray<string>
  readonly planted: string | null
  readonly writes: Readonly<Record<string, string>>
  readonly nested_userns: string
  readonly keyring: {
    readonly session: number | string
    readonly user: number | string
    readonly session_keys: number | string
    readonly request_server_secret: number | string
  }
  readonly pid1_fds: Readonly<Record<string, string>> | string
  readonly pid1_cmdline: ReadonlyArray<string>
  readonly pid1_environ: ReadonlyArray<string>
  readonly pid2_cmdline: ReadonlyArray<string>
  readonly mounts: ReadonlyArray<Mount>
}
