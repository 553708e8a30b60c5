import { spawn } from "node:child_process"
import { existsSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { binPath } from "../support/McpHarness.js"

export { binPath }
export const built = existsSync(binPath)

export interface CliRun {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** A minimal environment, so the machine's own KILNTAINERS_* variables never leak into a test. */
export const baseEnv = (): Record<string, string> => ({
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  HOME: process.env.HOME ?? "/root"
})

export const tempDir = () => mkdtempSync(join(tmpdir(), "kt-cli-"))

/**
 * Runs the built CLI to its end with stdin closed (a stdio server then exits at once), or, with
 * `initialize`, sends an MCP initialize request, waits for its answer and then closes stdin.
 */
export const runCli = (
  args: ReadonlyArray<string>,
  options: { readonly env?: Record<string, string>; readonly initialize?: boolean; readonly timeoutMs?: number } = {}
): Promise<CliRun> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [binPath, ...args], {
      env: { ...baseEnv(), ...options.env },
      stdio: ["pipe", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    const timer = setTimeout(() => {
      child.kill("SIGKILL")
      reject(new Error(`kilntainers ${args.join(" ")} did not end within ${options.timeoutMs ?? 30_000} ms; stderr: ${stderr}`))
    }, options.timeoutMs ?? 30_000)
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString()
      if (options.initialize === true && stdout.includes(`"id":1`)) child.stdin.end()
    })
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    child.on("error", reject)
    child.on("close", (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
    child.stdin.on("error", () => undefined)
    if (options.initialize === true) {
      child.stdin.write(JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "cli-test", version: "1" } }
      }) + "\n")
    } else {
      child.stdin.end()
    }
  })

export interface PrintedConfig {
  readonly backend: string
  readonly flags: Record<string, { readonly value: unknown; readonly from: string }>
}

/** `--print-config` with `args` (on the host backend unless told otherwise, so no engine is asked). */
export const printConfig = async (args: ReadonlyArray<string>, env: Record<string, string> = {}): Promise<PrintedConfig> => {
  const chosen = args.some((a) => a.startsWith("--backend")) || env.KILNTAINERS_BACKEND !== undefined
  const run = await runCli(["--print-config", ...(chosen ? [] : ["--backend", "host"]), ...args], { env })
  if (run.code !== 0) throw new Error(`--print-config ${args.join(" ")} exited ${run.code}: ${run.stderr}`)
  return JSON.parse(run.stdout)
}

/** The error line of a failed run, checked to be Kilntainers' shape: one line, no stack trace. */
export const errorLine = (run: CliRun): string => {
  const lines = run.stderr.split("\n").filter((line) => line !== "")
  const errors = lines.filter((line) => line.startsWith("kilntainers: error: "))
  if (errors.length !== 1) throw new Error(`expected one error line, got: ${run.stderr}`)
  if (lines.some((line) => /^\s+at /.test(line))) throw new Error(`stack trace on stderr: ${run.stderr}`)
  return errors[0]!
}
