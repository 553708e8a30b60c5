// Agent workflows, side by side: for each task and MCP server, the tool calls an agent makes (in
// the fewest that server allows), the bytes of their results (the JSON of each result's content,
// summed) and whether the outcome was verified. Prints a markdown table (and --json the details).
//
//   npm run build
//   node bench/agent-tasks.mjs [--servers kilntainers,process-mcp,DesktopCommander]
//        [--process-mcp DIR] [--desktop-commander DIR] [--tasks web,repl] [--ours-args "--inline-bytes 8192"] [--json]
//
// The peers are built outside the repository (never committed), e.g. in /tmp/peers:
//   process-mcp: `git archive` of anonx3247/process-mcp, `npm install && npx tsc` (--process-mcp DIR)
//   DesktopCommander: `npm install @wonderwhy-er/desktop-commander --ignore-scripts` and pass its
//   package directory (--desktop-commander DIR); it is started with telemetry and onboarding off.
// A peer whose directory is missing is left out of the table.
import { existsSync } from "node:fs"
import { join } from "node:path"
import { startDesktopCommander, startOurs, startProcessMcp } from "./agent-tasks/servers.mjs"
import { tasks } from "./agent-tasks/tasks.mjs"

const option = (name, fallback) => {
  const i = process.argv.indexOf(name)
  return i >= 0 ? process.argv[i + 1] : fallback
}
const peers = option("--peers", "/tmp/peers")
const processMcpDir = option("--process-mcp", join(peers, "process-mcp"))
const desktopCommanderDir = option("--desktop-commander", join(peers, "dcnpm/node_modules/@wonderwhy-er/desktop-commander"))
const wanted = option("--servers", "kilntainers,process-mcp,DesktopCommander").split(",")
const taskFilter = option("--tasks", undefined)?.split(",")

const servers = [
  // --ours-args "--inline-bytes 8192": flags for our server (one string, split on spaces).
  { name: "kilntainers", start: () => startOurs({ args: option("--ours-args", "").split(" ").filter(Boolean) }), available: true },
  { name: "process-mcp", start: () => startProcessMcp(processMcpDir), available: existsSync(join(processMcpDir, "dist/index.js")) },
  {
    name: "DesktopCommander",
    start: () => startDesktopCommander(desktopCommanderDir),
    available: existsSync(join(desktopCommanderDir, "dist/index.js"))
  }
].filter((s) => wanted.includes(s.name))
for (const s of servers.filter((s) => !s.available)) console.error(`${s.name}: not built, left out`)
const running = servers.filter((s) => s.available)

const chosen = tasks.filter((t) => taskFilter === undefined || taskFilter.some((f) => t.name.toLowerCase().includes(f.toLowerCase())))

/** Runs every chosen task against one server; one server process for all its tasks. */
export const runServer = async (server, list = chosen) => {
  const agent = await server.start()
  const rows = []
  try {
    for (const task of list) {
      agent.reset()
      const began = performance.now()
      let outcome
      try {
        outcome = await task[server.name](agent)
      } catch (error) {
        outcome = { ok: false, note: `failed: ${error instanceof Error ? error.message : String(error)}` }
      }
      rows.push({
        task: task.name,
        server: server.name,
        calls: agent.calls,
        bytes: agent.bytes,
        ok: outcome.ok,
        note: outcome.note,
        ms: Math.round(performance.now() - began),
        log: [...agent.log]
      })
      console.error(`${server.name} · ${task.name}: ${agent.calls} calls, ${agent.bytes} B, ${outcome.ok ? "ok" : "NOT ok"}${outcome.note ? ` (${outcome.note})` : ""}`)
    }
  } finally {
    await agent.close()
  }
  return rows
}

const cell = (row, best) => {
  if (row === undefined) return "—"
  const calls = row.calls === best.calls ? `**${row.calls}**` : `${row.calls}`
  const bytes = row.bytes === best.bytes ? `**${row.bytes.toLocaleString("en")}**` : row.bytes.toLocaleString("en")
  return `${calls} / ${bytes}${row.ok ? "" : ` ✗ ${row.note ?? ""}`.trimEnd()}`
}

/** A markdown table: a row per task, a column per server, each cell `calls / bytes` (best in bold, ✗ when not verified). */
export const table = (rows, names) => {
  const lines = [`| Task | ${names.join(" | ")} |`, `|---|${names.map(() => "---").join("|")}|`]
  for (const task of [...new Set(rows.map((r) => r.task))]) {
    const of = rows.filter((r) => r.task === task)
    const done = of.filter((r) => r.ok)
    const best = { calls: Math.min(...done.map((r) => r.calls)), bytes: Math.min(...done.map((r) => r.bytes)) }
    lines.push(`| ${task} | ${names.map((n) => cell(of.find((r) => r.server === n), best)).join(" | ")} |`)
  }
  return lines.join("\n")
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const rows = []
  // One server at a time: they share the machine (and ports are per server anyway).
  for (const server of running) rows.push(...await runServer(server))
  console.log(table(rows, running.map((s) => s.name)))
  console.log("\nCells: tool calls / bytes of tool results (the JSON of each result's content, summed); bold: the fewest among")
  console.log("the servers that succeeded; ✗: the outcome was not verified (why follows).")
  if (process.argv.includes("--json")) console.log(JSON.stringify(rows.map(({ log, ...r }) => ({ ...r, calls: log })), null, 2))
}
