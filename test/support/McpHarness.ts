import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import type { ChildProcess } from "node:child_process"
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js"
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { chownSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

export const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..")
/** The CLI under test: this checkout's build, or an installed copy (`npm run test:package` sets KILNTAINERS_TEST_BIN). */
export const binPath = process.env.KILNTAINERS_TEST_BIN ?? join(root, "dist", "bin", "kilntainers.mjs")

export interface Harness {
  readonly client: Client
  readonly transport: StdioClientTransport
  readonly stderr: () => string
  readonly pid: number | null
  readonly stateDir: string
  readonly call: (name: string, args: Record<string, unknown>, options?: { signal?: AbortSignal; onprogress?: (p: unknown) => void }) => Promise<ToolResult>
}

export interface ToolResult {
  readonly isError: boolean
  readonly text: string
  readonly structured: any
}

/** Starts the built CLI (`bin`: another copy of it) as a stdio MCP server and connects the SDK's Client to it. */
export const startServer = async (args: ReadonlyArray<string> = [], env: Record<string, string> = {}, bin: string = binPath): Promise<Harness> => {
  const given = args.indexOf("--state-dir")
  const stateDir = given >= 0 ? args[given + 1]! : mkdtempSync(join(tmpdir(), "kt-e2e-"))
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [bin, ...(given >= 0 ? [] : ["--state-dir", stateDir]), ...args],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root", ...env },
    stderr: "pipe"
  })
  let stderr = ""
  transport.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString()
  })
  const client = new Client({ name: "kilntainers-test", version: "1.0.0" })
  await client.connect(transport)
  const call: Harness["call"] = async (name, args, options) => {
    const result = await client.request(
      { method: "tools/call", params: { name, arguments: args } },
      CallToolResultSchema,
      { timeout: 120_000, ...(options?.signal ? { signal: options.signal } : {}), ...(options?.onprogress ? { onprogress: options.onprogress } : {}) }
    )
    const text = result.content.map((c) => (c.type === "text" ? c.text : "")).join("")
    return { isError: result.isError === true, text, structured: result.structuredContent }
  }
  return { client, transport, stderr: () => stderr, pid: transport.pid, stateDir, call }
}

/** Host processes whose command line contains the marker (ours and their children). */
export const processesWith = async (marker: string): Promise<Array<number>> => {
  const { readdirSync, readFileSync } = await import("node:fs")
  const found: Array<number> = []
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").replace(/\0/g, " ")
      if (cmdline.includes(marker)) found.push(Number(entry))
    } catch {
      // the process ended while we looked
    }
  }
  return found
}

export const waitFor = async (check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<boolean> => {
  const end = Date.now() + timeoutMs
  while (Date.now() < end) {
    if (await check()) return true
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return check()
}

export interface HttpServerProcess {
  readonly url: string
  readonly port: number
  readonly stateDir: string
  readonly child: ChildProcess
  readonly stderr: () => string
  readonly stop: (signal?: NodeJS.Signals) => Promise<number | null>
}

/** How to run the server as another user: the command before node (`setpriv …`) and the uid that owns its state directory. */
export interface RunAs {
  readonly prefix: ReadonlyArray<string>
  readonly uid: number
}

/** Starts the built CLI as an HTTP MCP server on a free port (as `runAs`'s user, if given) and waits until it listens. */
export const startHttpServer = async (args: ReadonlyArray<string> = [], env: Record<string, string> = {}, runAs?: RunAs): Promise<HttpServerProcess> => {
  const { spawn } = await import("node:child_process")
  const stateDir = mkdtempSync(join(tmpdir(), "kt-http-"))
  if (runAs !== undefined) chownSync(stateDir, runAs.uid, runAs.uid)
  const command = [...(runAs?.prefix ?? []), process.execPath, binPath, "--transport", "http", "--port", "0", "--state-dir", stateDir, ...args]
  const child = spawn(command[0]!, command.slice(1), {
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/root", ...env },
    stdio: ["ignore", "pipe", "pipe"]
  })
  let stderr = ""
  let stdout = ""
  child.stdout!.on("data", (chunk: Buffer) => {
    stdout += chunk.toString()
  })
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
  const port = await new Promise<number>((resolve, reject) => {
    child.stderr!.on("data", (chunk: Buffer) => {
      stderr += chunk.toString()
      const match = /MCP over HTTP at http:\/\/[^:]+:(\d+)\/mcp/.exec(stderr)
      if (match) resolve(Number(match[1]))
    })
    exited.then((code) => reject(new Error(`server exited with ${code}: ${stderr}`)))
    setTimeout(() => reject(new Error(`server did not start: ${stderr}`)), 90_000)
  })
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    port,
    stateDir,
    child,
    stderr: () => stderr + (stdout ? `\n[stdout!] ${stdout}` : ""),
    stop: async (signal = "SIGTERM") => {
      if (child.exitCode === null) child.kill(signal)
      return exited
    }
  }
}

/** Polls `read` every 100 ms until `check` holds; fails with what was awaited and the last value seen. */
export const until = async <T>(what: string, read: () => Promise<T>, check: (value: T) => boolean, timeoutMs = 30_000): Promise<T> => {
  const end = Date.now() + timeoutMs
  let last: T = await read()
  while (!check(last)) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}; last seen: ${JSON.stringify(last)}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
    last = await read()
  }
  return last
}
