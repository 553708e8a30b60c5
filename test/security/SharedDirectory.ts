/**
 * The attacks on the user's shared directories (issue 19): a project directory mounted into
 * computers, a private directory of the server's user next to it that no computer may ever see, and
 * the servers they run against — the built CLI on the host backend as root and as an unprivileged
 * user (HostServer.ts), and on the Docker backend as root (the server stages each mount from the
 * objects it holds) and as an unprivileged user in the engine socket's group (the engine binds
 * paths, each checked before a container starts: a computer whose mounts were swapped is refused
 * its start, naming the mount). Every path is made fresh per test, under a directory every user can
 * enter.
 */
import { assert } from "vitest"
import { spawnSync } from "node:child_process"
import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { binPath } from "../support/McpHarness.js"
import { dockerWorks, TEST_IMAGE } from "../support/Docker.js"
import { dockerUnprivileged, dropPrivileges, type HostServer, type Mode, modes, runningAsRoot, startHostServer, underCi, UNPRIVILEGED } from "./HostServer.js"

/** Where a server of the attack runs. */
export interface Target {
  readonly backend: "host" | "docker"
  readonly mode: Mode
  readonly name: string
}

/**
 * Host as root and as an unprivileged user; Docker, where its engine answers (always under CI=true,
 * where an engine that does not answer fails these tests), as root and as an unprivileged user with
 * the engine socket's group.
 */
export const targets: ReadonlyArray<Target> = [
  ...modes.map((mode): Target => ({ backend: "host", mode, name: `host, server run as ${mode === "root" ? "root" : "an unprivileged user"}` })),
  ...(runningAsRoot && (dockerWorks || underCi) ? [{ backend: "docker", mode: "root", name: "docker, server run as root" } as const] : []),
  ...(runningAsRoot && (dockerWorks || underCi) && dockerUnprivileged
    ? [{ backend: "docker", mode: "unprivileged", name: "docker, server run as an unprivileged user in the engine's group" } as const]
    : [])
]

/** Whether the engine binds `target`'s mounts by path, checked before each start, rather than from staged copies. */
const checkedPaths = (target: Target) => target.backend === "docker" && target.mode === "unprivileged"

/** A fresh project for one attack: `project` is mounted, `secret` (in `private`) must never be seen. */
export interface Project {
  readonly base: string
  readonly project: string
  readonly private: string
  readonly secretText: string
  /** The host uid that owns the project (the computer works on it as its owner). */
  readonly owner: number
  readonly remove: () => void
}

/** The uid the server of `target` runs as. */
const serverUid = (target: Target) => (target.mode === "unprivileged" && runningAsRoot ? UNPRIVILEGED : (process.getuid?.() ?? 0))

const chownTree = (path: string, uid: number) => {
  chownSync(path, uid, uid)
  for (const name of readdirSync(path, { recursive: true })) chownSync(join(path, String(name)), uid, uid)
}

/**
 * A project directory with `layout` (relative paths; a trailing `/` makes a directory; `{secret}` in
 * a text is the secret), owned by an ordinary uid (the server's own when it is not root), and a 0700
 * private directory of the server's user holding the secret.
 */
export const makeProject = (target: Target, layout: Readonly<Record<string, string>>): Project => {
  const base = mkdtempSync(join(tmpdir(), "kt-shared-"))
  chmodSync(base, 0o755)
  const secretText = `TOP-SECRET-${process.pid}-${Math.random().toString(36).slice(2)}`
  const project = join(base, "project")
  mkdirSync(project)
  for (const [path, text] of Object.entries(layout)) {
    if (path.endsWith("/")) mkdirSync(join(project, path), { recursive: true })
    else {
      mkdirSync(join(project, path, ".."), { recursive: true })
      writeFileSync(join(project, path), text.replaceAll("{secret}", secretText))
    }
  }
  const owner = target.mode === "root" && target.backend === "host" ? 4321 : serverUid(target)
  chownTree(project, owner)
  const privateDir = join(base, "private")
  mkdirSync(privateDir, { mode: 0o700 })
  writeFileSync(join(privateDir, "secret.txt"), `${secretText}\n`, { mode: 0o600 })
  chownTree(privateDir, serverUid(target))
  return { base, project, private: privateDir, secretText, owner, remove: () => rmSync(base, { recursive: true, force: true }) }
}

/** The server of `target`, with the test image on Docker (`state`: as startHostServer's). */
export const startServer = (
  target: Target,
  args: ReadonlyArray<string>,
  state: { readonly dir?: string; readonly keep?: boolean } = {}
): Promise<HostServer> =>
  startHostServer(target.mode, [...args, ...(target.backend === "docker" ? ["--image", TEST_IMAGE] : [])], target.backend, undefined, {}, state)

/** Runs a shell script in a computer; its output, whatever its exit code. */
export const sh = async (server: HostServer, computer: string, script: string) => {
  const result = await server.call("sandbox_exec", { command: script, computer_id: computer, timeout: 60 })
  if (result.isError) throw new Error(`sandbox_exec failed: ${result.text}`)
  const out = result.structured as { stdout: string; stderr: string; exit_code: number }
  return { stdout: out.stdout, stderr: out.stderr, all: `${out.stdout}${out.stderr}`, code: out.exit_code }
}

/**
 * Restarts computer `id` after its guest changed the shared directory. Where the engine binds checked
 * paths the restart may be refused, with a reason naming the swapped mount (the next call makes the
 * computer afresh, with the directories the server holds); everywhere else it must succeed.
 */
export const restartAfterSwap = async (server: HostServer, target: Target, id: string) => {
  const restarted = await server.call("computer_restart", { computer_id: id })
  if (restarted.isError && checkedPaths(target)) assert.match(restarted.text, /mounts no longer match the host \(\S+:\/home\/agent\//, restarted.text)
  else assert.isFalse(restarted.isError, `the restart failed: ${restarted.text}`)
}

/**
 * Whether computer `id` runs after its guest swapped a path of the shared directory: true when it
 * does. Where the engine binds checked paths it may instead be refused, with a reason naming the
 * mount (false). Everywhere else it must run.
 */
export const runsAfterSwap = async (server: HostServer, target: Target, id: string): Promise<boolean> => {
  const first = await server.call("sandbox_exec", { command: "echo up", computer_id: id, timeout: 60 })
  if (!first.isError) return true
  assert.isTrue(checkedPaths(target), `the computer did not start: ${first.text}`)
  assert.match(first.text, /mounts no longer match the host \(\S+:\/home\/agent\/.*factory-reset/, first.text)
  return false
}

/** A computer id unique to this run. */
export const computerId = (what: string) => `${what}-${process.pid}-${Math.random().toString(36).slice(2, 6)}`

/** The files below `dir` whose mode has the setuid or setgid bit. */
export const setidFiles = (dir: string): Array<string> => {
  const found: Array<string> = []
  const walk = (path: string) => {
    for (const entry of readdirSync(path, { withFileTypes: true })) {
      const full = join(path, entry.name)
      const mode = lstatSync(full).mode
      if (entry.isFile() && (mode & 0o6000) !== 0) found.push(`${full} ${(mode & 0o7777).toString(8)}`)
      if (entry.isDirectory()) walk(full)
    }
  }
  walk(dir)
  return found
}

/**
 * Runs the built CLI (as `target`'s user) to its end with stdin closed at once: a server that
 * started ends at that EOF with status 0; one refused at startup ends with status 1 and says why.
 */
export const runCli = (target: Target, args: ReadonlyArray<string>, stateDir: string) => {
  mkdirSync(stateDir, { recursive: true, mode: 0o700 })
  chownSync(stateDir, serverUid(target), serverUid(target))
  const setpriv = dropPrivileges(target.mode, target.backend)
  const command = [...setpriv, process.execPath, binPath, "--backend", target.backend, "--state-dir", stateDir, ...args]
  const result = spawnSync(command[0]!, command.slice(1), {
    input: "",
    encoding: "utf8",
    timeout: 60_000,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: stateDir }
  })
  return { status: result.status, stderr: result.stderr }
}

/** The text of a host file, or what kept it from being read. */
export const readHost = (path: string) => {
  try {
    return readFileSync(path, "utf8")
  } catch (error) {
    return `error:${(error as NodeJS.ErrnoException).code}`
  }
}
