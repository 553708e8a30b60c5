/**
 * The dashboard's view model: pure functions from tool results (untrusted JSON from the host) to
 * what the page shows. No DOM here, so the shapes are unit-tested in Node
 * (`test/dashboard/model.test.ts`).
 *
 * Tool results are read tolerantly, field by field: a missing or mistyped field falls back to a
 * neutral value instead of failing the whole view, and both the 0.1 shapes and this release's
 * (issue 11: `ps` entries keyed by `pid` with `running`/`terminated`) are understood.
 */

/** A warm pool's counters, when the server keeps one. */
export interface PoolView {
  readonly size: number
  readonly ready: number
  readonly starting: number
  readonly handedOut: number
}

/** One recent audit-log entry (issue 13). */
export interface ActivityView {
  readonly time: string
  readonly kind: string
  readonly summary: string
  readonly computerId: string | undefined
}

/** One computer of the inventory. */
export interface ComputerView {
  readonly id: string
  readonly state: string
  readonly backend: string
  readonly image: string
  readonly sandboxId: string
  readonly temporary: boolean
  readonly createdAt: string | undefined
  readonly processes: number
  readonly endsAt: string | undefined
  readonly warning: string | undefined
}

/** The inventory of `computer_list` / `computer_dashboard`. */
export interface InventoryView {
  readonly computers: ReadonlyArray<ComputerView>
  /** Present only when the server reports a pool. */
  readonly pool: PoolView | undefined
  /** Present only when the result carries recent activity (the "recent activity" panel). */
  readonly activity: ReadonlyArray<ActivityView> | undefined
}

/** How a process is shown: one vocabulary whatever the server's. */
export type ProcessState = "running" | "exited" | "killed" | "unknown"

/** One row of the processes pane. */
export interface ProcessView {
  /** The handle the process tools take (`p1`, …). */
  readonly id: string
  readonly command: string
  readonly state: ProcessState
  /** The exit code, or the signal that ended it, or "" while running. */
  readonly exit: string
  readonly startedAt: string
  /** Why it ended, when the server says. */
  readonly reason: string | undefined
  /** It runs in a terminal (the live terminal panel can show it). */
  readonly tty: boolean
}

/** The processes pane: the rows shown, and how many more the server or the cap left out. */
export interface ProcessesView {
  readonly rows: ReadonlyArray<ProcessView>
  readonly hidden: number
}

/** One command's entry in the terminal. */
export interface ExecView {
  readonly prompt: string
  readonly stdout: string
  readonly stderr: string
  readonly footer: string
  readonly failed: boolean
}

/** The most process rows the pane shows. */
export const maxProcessRows = 50

type Json = Readonly<Record<string, unknown>>

const record = (value: unknown): Json | undefined =>
  typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Json) : undefined

const array = (value: unknown): ReadonlyArray<unknown> => (Array.isArray(value) ? value : [])

const text = (value: unknown, fallback: string): string => (typeof value === "string" ? value : fallback)

const optionalText = (value: unknown): string | undefined => (typeof value === "string" && value !== "" ? value : undefined)

const count = (value: unknown): number => (typeof value === "number" && Number.isFinite(value) && value >= 0 ? value : 0)

/** A value reduced to a safe CSS class token (lower-case letters, digits, dashes). */
export const cssToken = (value: string): string => value.toLowerCase().replace(/[^a-z0-9-]/g, "")

const computer = (value: unknown): ComputerView | undefined => {
  const c = record(value)
  if (c === undefined || typeof c.computer_id !== "string") return undefined
  return {
    id: c.computer_id,
    state: text(c.state, "unknown"),
    backend: text(c.backend, "?"),
    image: text(c.image, "?"),
    sandboxId: text(c.sandbox_id, "?"),
    temporary: c.temporary === true,
    createdAt: optionalText(c.created_at),
    processes: count(c.processes),
    endsAt: optionalText(c.ends_at),
    warning: optionalText(c.warning)
  }
}

const pool = (value: unknown): PoolView | undefined => {
  const p = record(value)
  if (p === undefined) return undefined
  return { size: count(p.size), ready: count(p.ready), starting: count(p.starting), handedOut: count(p.handedOut) }
}

const activityEntry = (value: unknown): ActivityView | undefined => {
  const e = record(value)
  if (e === undefined) return undefined
  const summary = optionalText(e.summary)
  if (summary === undefined) return undefined
  return { time: text(e.time, ""), kind: text(e.kind, "event"), summary, computerId: optionalText(e.computer_id) }
}

const defined = <A>(value: A | undefined): value is A => value !== undefined

/** The inventory from a `computer_list` or `computer_dashboard` result's structured content. */
export const inventory = (structured: unknown): InventoryView => {
  const result = record(structured) ?? {}
  return {
    computers: array(result.computers).map(computer).filter(defined),
    pool: pool(result.pool),
    activity: Array.isArray(result.audit) ? result.audit.map(activityEntry).filter(defined) : undefined
  }
}

/** "3 processes", "1 process". */
export const processCount = (n: number): string => `${n} ${n === 1 ? "process" : "processes"}`

/** The pool line: "pool 2/4 ready · 1 starting · 1 handed out". */
export const poolLine = (p: PoolView): string =>
  `pool ${p.ready}/${p.size} ready · ${p.starting} starting · ${p.handedOut} handed out`

const processState = (status: string, signal: string): ProcessState => {
  switch (status) {
    case "running":
    case "exited":
    case "killed":
      return status
    // this release's vocabulary (process-mcp's): one word for every end
    case "terminated":
      return signal !== "" ? "killed" : "exited"
    default:
      return "unknown"
  }
}

const processRow = (value: unknown): ProcessView | undefined => {
  const p = record(value)
  if (p === undefined) return undefined
  // 0.1: `id` is the handle and `pid` the OS pid (a number); now `pid` is the handle.
  const id = typeof p.id === "string" ? p.id : typeof p.pid === "string" ? p.pid : undefined
  if (id === undefined) return undefined
  const signal = text(p.signal, "")
  const exitCode = typeof p.exitCode === "number" ? String(p.exitCode) : ""
  return {
    id,
    command: text(p.command, ""),
    state: processState(text(p.status, ""), signal),
    exit: exitCode !== "" ? exitCode : signal,
    startedAt: text(p.createdAt, text(p.startedAt, "")),
    reason: optionalText(p.reason),
    tty: p.tty === true
  }
}

/** The processes pane from a `ps` result: running first, then the most recent; at most `limit` rows. */
export const processes = (structured: unknown, limit: number = maxProcessRows): ProcessesView => {
  const result = record(structured) ?? {}
  const all = array(result.processes).map(processRow).filter(defined)
  const sorted = [...all].sort((a, b) => {
    const byState = (a.state === "running" ? 0 : 1) - (b.state === "running" ? 0 : 1)
    return byState !== 0 ? byState : b.startedAt.localeCompare(a.startedAt)
  })
  const rows = sorted.slice(0, limit)
  return { rows, hidden: count(result.hidden) + (all.length - rows.length) }
}

const line = (s: string): string => (s !== "" && !s.endsWith("\n") ? `${s}\n` : s)

/** The prompt line the terminal shows before a command's output. */
export const promptLine = (computerId: string, command: string): string => `${computerId} $ ${line(command)}`

/** A `sandbox_exec` result as a terminal entry: output, then `[exit N · … · ms]`. */
export const execEntry = (computerId: string, command: string, structured: unknown): ExecView => {
  const result = record(structured) ?? {}
  const code = typeof result.exit_code === "number" ? result.exit_code : undefined
  const ms = typeof result.exec_duration_ms === "number" ? String(Math.round(result.exec_duration_ms)) : "?"
  const notes = [result.timed_out === true ? " · timed out" : "", result.truncated === true ? " · truncated" : ""].join("")
  return {
    prompt: promptLine(computerId, command),
    stdout: line(text(result.stdout, "")),
    stderr: line(text(result.stderr, "")),
    footer: `[exit ${code ?? "?"}${notes} · ${ms} ms]\n`,
    failed: code !== 0
  }
}

/** The text of a tool result's text content blocks (what an error result says). */
export const resultText = (result: unknown): string => {
  const content = array(record(result)?.content)
  const joined = content
    .map((block) => record(block))
    .filter((block): block is Json => block !== undefined && block.type === "text")
    .map((block) => text(block.text, ""))
    .join("\n")
  return joined !== "" ? joined : "the tool call failed"
}

/** The host styles the page takes: only custom properties, and never a `url(…)` (nothing is loaded from outside). */
export const safeStyleVariables = (variables: unknown): ReadonlyArray<readonly [string, string]> =>
  Object.entries(record(variables) ?? {}).filter((entry): entry is [string, string] =>
    /^--[a-z0-9-]+$/.test(entry[0]) && typeof entry[1] === "string" && !/url\s*\(/i.test(entry[1])
  )
