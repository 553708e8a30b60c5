// The MCP servers the agent tasks run against, each started over stdio with the MCP SDK client.
// Every server is wrapped in an `Agent`: `call` is a tool call the agent makes (counted: calls and
// the bytes of the result's content as JSON), `quiet` is one the harness makes to set up or verify
// (not counted), `sh` runs a shell command where the server's commands run (not counted).
import { execFileSync } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../..")
const basePath = "/usr/local/bin:/usr/bin:/bin"

/** The bytes an agent reads of a result: its content, as JSON (what a client puts in the context). */
export const resultBytes = (result) => Buffer.byteLength(JSON.stringify(result.content ?? []))

/** The text of a result's content. */
export const textOf = (result) => (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n")

const connect = async (name, transport) => {
  const client = new Client({ name: `agent-tasks-${name}`, version: "1.0.0" })
  await client.connect(transport)
  return client
}

const agent = (name, client, extra) => {
  const log = []
  let calls = 0
  let bytes = 0
  const request = (tool, args, options) =>
    client.callTool({ name: tool, arguments: args }, undefined, { timeout: 120_000, ...options })
  return {
    name,
    client,
    log,
    get calls() { return calls },
    get bytes() { return bytes },
    reset() {
      calls = 0
      bytes = 0
      log.length = 0
    },
    async call(tool, args) {
      const result = await request(tool, args)
      calls += 1
      const size = resultBytes(result)
      bytes += size
      log.push({ tool, args, bytes: size, isError: result.isError === true })
      return result
    },
    quiet: request,
    ...extra
  }
}

/** kilntainers, built (`npm run build`), on the host backend with its own state directory. */
export const startOurs = async (options = {}) => {
  const state = mkdtempSync(join(tmpdir(), "kt-agent-tasks-"))
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [options.bin ?? join(repo, "dist/bin/kilntainers.mjs"), "--backend", "host", "--state-dir", state, ...(options.args ?? [])],
    env: { PATH: process.env.PATH ?? basePath, HOME: state },
    stderr: "ignore"
  })
  const client = await connect("ours", transport)
  const self = agent("kilntainers", client, {
    home: "/home/agent",
    /** Runs a shell command in the computer (not counted). */
    async sh(command) {
      const result = await self.quiet("sandbox_exec", { command })
      return { stdout: result.structuredContent.stdout, code: result.structuredContent.exit_code }
    },
    async close() {
      await client.close().catch(() => undefined)
      rmSync(state, { recursive: true, force: true })
    }
  })
  return self
}

/** A peer on the host: its commands run in `work`, where `sh` runs the harness's own. */
const hostPeer = (name, client, work, cleanup) => {
  const self = agent(name, client, {
    home: work,
    async sh(command) {
      try {
        const stdout = execFileSync("/bin/sh", ["-c", command], { cwd: work, encoding: "utf8", env: { PATH: basePath, HOME: work } })
        return { stdout, code: 0 }
      } catch (error) {
        return { stdout: String(error.stdout ?? ""), code: error.status ?? 1 }
      }
    },
    async close() {
      await client.close().catch(() => undefined)
      cleanup()
    }
  })
  return self
}

/** process-mcp (anonx3247/process-mcp) in host mode, built in `dir` (npm install && npx tsc). */
export const startProcessMcp = async (dir) => {
  const root = mkdtempSync(join(tmpdir(), "pm-agent-tasks-"))
  // srt (its host sandbox) guards files under the server's cwd: run the server elsewhere. It
  // blocks the guarded directories that do not exist with a /dev/null mount, which bwrap leaves
  // behind as an empty file, so that every later command fails ("Can't mkdir parents"): create them.
  const work = join(root, "work")
  for (const guarded of [".claude/commands", ".claude/agents", ".vscode", ".idea", ".git/hooks"]) {
    mkdirSync(join(root, "server", guarded), { recursive: true })
  }
  mkdirSync(work)
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [join(dir, "dist/index.js")],
    cwd: join(root, "server"),
    env: { PATH: basePath, HOME: work, PROCESS_MODE: "host", DEFAULT_WORKDIR: work },
    stderr: "ignore"
  })
  const client = await connect("process-mcp", transport)
  return hostPeer("process-mcp", client, work, () => rmSync(root, { recursive: true, force: true }))
}

/**
 * DesktopCommander (@wonderwhy-er/desktop-commander), from `dir` (its package directory, with
 * dist/index.js). It never phones home here: telemetry off by variable and by config, onboarding
 * off, its feature-flag URL pointed at a closed local port, and a HOME of its own.
 */
export const startDesktopCommander = async (dir) => {
  const work = mkdtempSync(join(tmpdir(), "dc-agent-tasks-"))
  const configDir = join(work, ".claude-server-commander")
  mkdirSync(configDir, { recursive: true })
  writeFileSync(join(configDir, "config.json"), JSON.stringify({
    telemetryEnabled: false,
    defaultShell: "/bin/bash",
    pendingWelcomeOnboarding: false,
    welcomeOnboardingEligible: false,
    blockedCommands: [],
    allowedDirectories: []
  }))
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [join(dir, "dist/index.js"), "--no-onboarding"],
    cwd: work,
    env: {
      PATH: basePath,
      HOME: work,
      SHELL: "/bin/bash",
      DESKTOP_COMMANDER_DISABLE_TELEMETRY: "1",
      DC_FLAG_URL: "http://127.0.0.1:9/flags.json"
    },
    stderr: "ignore"
  })
  const client = await connect("desktop-commander", transport)
  return hostPeer("DesktopCommander", client, work, () => rmSync(work, { recursive: true, force: true }))
}
