/**
 * The `computer_dashboard` MCP App (MCP Apps 2026-01-26), on ext-apps' `App`.
 *
 * It connects to its host over `HostTransport` (`window.parent` only, origin pinned), shows the
 * inventory from the `computer_dashboard` tool result, follows the host's theme and style
 * variables, and calls the server's tools through the host (`callServerTool`): the inventory and
 * the selected computer's processes every few seconds while visible and after every action,
 * create / restart / factory reset / delete, and `sandbox_exec` for the command runner; the live
 * terminal panel shows a terminal process of the selected computer through the `terminal` tool
 * (its `view` polled by cursor, one call at a time, every `livePollMs`; take over, keys, hand
 * back). On
 * `ui/resource-teardown` it stops: no timer, no size reports, in-flight calls cancelled, controls
 * disabled.
 *
 * Bundled with its dependencies and `style.css` into one HTML page by `scripts/build-dashboard.mjs`.
 */
import { App, applyDocumentTheme, type McpUiHostContext } from "@modelcontextprotocol/ext-apps"
import { HostTransport } from "./HostTransport.js"
import { LiveTerminal, type ViewJson } from "./LiveTerminal.js"
import { type ComputerView, execEntry, inventory, type InventoryView, processes, type ProcessesView, promptLine, resultText, safeStyleVariables } from "./model.js"
import { byTestId, Confirm, Inventory, renderActivity, renderPool, renderProcesses, renderTargets, Terminal } from "./view.js"

/** How often the dashboard refreshes while it is visible. */
const refreshMs = 4_000
const listTimeoutMs = 60_000
const actionTimeoutMs = 300_000
const execTimeoutMs = 900_000
/** How often the live terminal asks for what its process wrote since the last view. */
const livePollMs = 250
const liveTimeoutMs = 30_000

const app = new App(
  { name: "kilntainers-dashboard", version: "0.1.0" },
  { availableDisplayModes: ["inline", "fullscreen"] },
  // Size reports are set up after the handshake, so that teardown can stop them.
  { autoResize: false }
)

const ui = {
  count: byTestId("count"),
  pool: byTestId("pool"),
  status: byTestId("status"),
  error: byTestId("error"),
  errorText: byTestId("error-text"),
  createId: byTestId<HTMLInputElement>("create-id"),
  createTemporary: byTestId<HTMLInputElement>("create-temporary"),
  create: byTestId<HTMLButtonElement>("create"),
  inventoryEmpty: byTestId("inventory-empty"),
  target: byTestId<HTMLSelectElement>("terminal-target"),
  command: byTestId<HTMLTextAreaElement>("terminal-command"),
  run: byTestId<HTMLButtonElement>("terminal-run"),
  processesTarget: byTestId("processes-target"),
  processes: {
    table: byTestId("processes"),
    body: byTestId("processes-body"),
    empty: byTestId("processes-empty"),
    more: byTestId("processes-hidden")
  },
  liveTarget: byTestId<HTMLSelectElement>("live-target"),
  liveEmpty: byTestId("live-empty"),
  activity: byTestId("activity"),
  activityList: byTestId<HTMLOListElement>("activity-list")
}

let computers: ReadonlyArray<ComputerView> = []
let selected: string | undefined
let closed = false
let running = false
/** Aborted on teardown: every tool call in flight is cancelled. */
const lifetime = new AbortController()
let timer: ReturnType<typeof setInterval> | undefined
let liveTimer: ReturnType<typeof setInterval> | undefined
let stopSizeReports: (() => void) | undefined

// ---- status and errors ----
const setStatus = (text: string) => {
  ui.status.textContent = text
}
const message = (error: unknown) => (error instanceof Error ? error.message : String(error))
const showError = (error: unknown) => {
  ui.errorText.textContent = message(error)
  ui.error.hidden = false
}
const clearError = () => {
  ui.error.hidden = true
  ui.errorText.textContent = ""
}

// ---- tools ----
const callTool = async (name: string, args: Record<string, unknown>, timeout: number): Promise<unknown> => {
  if (closed) throw new Error("the dashboard was closed")
  const result = await app.callServerTool({ name, arguments: args }, { timeout, signal: lifetime.signal })
  if (result.isError === true) throw new Error(resultText(result))
  return result.structuredContent ?? {}
}

// ---- inventory, targets, processes ----
const controlsIdle = () => {
  ui.target.disabled = closed || computers.length === 0
  ui.run.disabled = closed || running || selected === undefined
}

const showTargets = () => {
  renderTargets(ui.target, computers, selected)
  ui.processesTarget.textContent = selected ?? ""
  list.select(selected)
  controlsIdle()
}

const showInventory = (view: InventoryView) => {
  computers = view.computers
  ui.count.textContent = String(computers.length)
  list.render(computers, selected)
  ui.inventoryEmpty.hidden = computers.length > 0
  if (selected !== undefined && !computers.some((c) => c.id === selected)) selected = undefined
  if (selected === undefined) selected = computers[0]?.id
  renderPool(ui.pool, view.pool)
  renderActivity(ui.activity, ui.activityList, view.activity)
  showTargets()
}

const refreshProcesses = async () => {
  const target = selected
  if (target === undefined) return renderProcesses(ui.processes, { rows: [], hidden: 0 }, undefined)
  const result = await callTool("ps", { computer_id: target }, listTimeoutMs)
  if (target !== selected) return
  const view = processes(result)
  renderProcesses(ui.processes, view, selected)
  showLiveTargets(view)
}

let refreshing = false
let refreshAgain = false
/** Refreshes the inventory and the selected computer's processes; calls made meanwhile coalesce into one more. */
const refresh = async (): Promise<void> => {
  if (closed) return
  if (refreshing) {
    refreshAgain = true
    return
  }
  refreshing = true
  try {
    showInventory(inventory(await callTool("computer_list", { audit: true }, listTimeoutMs)))
    await refreshProcesses()
    setStatus(`updated ${new Date().toLocaleTimeString()}`)
  } catch (error) {
    if (!closed) showError(error)
  } finally {
    refreshing = false
    if (refreshAgain) {
      refreshAgain = false
      void refresh()
    }
  }
}

const select = (id: string) => {
  if (selected === id) return
  selected = id
  showTargets()
  void refresh()
}

// ---- actions on a computer ----
const confirm = new Confirm(
  byTestId("confirm-dialog"),
  byTestId("confirm-text"),
  byTestId<HTMLButtonElement>("confirm-ok"),
  byTestId<HTMLButtonElement>("confirm-cancel")
)

const act = async (id: string, verb: string, tool: string) => {
  list.busy(id, true)
  clearError()
  setStatus(`${verb} ${id}…`)
  try {
    await callTool(tool, { computer_id: id }, actionTimeoutMs)
  } catch (error) {
    if (!closed) showError(error)
  } finally {
    list.busy(id, closed)
    void refresh()
  }
}

const list = new Inventory(byTestId<HTMLUListElement>("inventory"), {
  select,
  restart: (id) => void act(id, "Restarting", "computer_restart"),
  reset: (id) =>
    void confirm.ask(`Factory-reset '${id}'?\nIts processes end and every file in it is erased.`, "Reset").then((ok) => {
      if (ok) return act(id, "Resetting", "computer_factory_reset")
    }),
  remove: (id) =>
    void confirm.ask(`Delete '${id}' and everything in it?\nThis cannot be undone.`, "Delete").then((ok) => {
      if (ok) return act(id, "Deleting", "computer_delete")
    })
})

// ---- create bar (no form: a sandbox without allow-forms never submits one) ----
const create = async () => {
  const id = ui.createId.value.trim()
  if (ui.create.disabled || closed) return
  ui.create.disabled = true
  clearError()
  setStatus(`creating ${id === "" ? "a computer" : id}…`)
  try {
    const created = await callTool("computer_create", { ...(id === "" ? {} : { computer_id: id }), temporary: ui.createTemporary.checked }, actionTimeoutMs)
    ui.createId.value = ""
    const createdId = (created as { computer_id?: unknown }).computer_id
    if (typeof createdId === "string") selected = createdId
  } catch (error) {
    if (!closed) showError(error)
  } finally {
    ui.create.disabled = closed
    void refresh()
  }
}

// ---- the command runner ----
const terminal = new Terminal(byTestId("terminal-output"))

const run = async () => {
  const command = ui.command.value
  const target = selected
  if (running || closed || command.trim() === "" || target === undefined) return
  const computer = computers.find((c) => c.id === target)
  running = true
  ui.run.textContent = "Running…"
  controlsIdle()
  clearError()
  try {
    const args = { computer_id: target, command, ...(computer === undefined ? {} : { temporary: computer.temporary }) }
    terminal.append(execEntry(target, command, await callTool("sandbox_exec", args, execTimeoutMs)))
    ui.command.value = ""
  } catch (error) {
    terminal.append({ prompt: promptLine(target, command), stderr: `${message(error)}\n` })
    if (!closed) showError(error)
  } finally {
    running = false
    ui.run.textContent = "Run"
    controlsIdle()
    void refresh()
  }
}

// ---- the live terminal ----
/** The terminal process the panel shows (of the selected computer), and its computer. */
let live: { readonly pid: string; readonly computer: string } | undefined
let liveBusy = false

const terminalTool = (args: Record<string, unknown>) => {
  if (live === undefined) return Promise.reject(new Error("no terminal is shown"))
  return callTool("terminal", { id: live.pid, computer_id: live.computer, ...args }, liveTimeoutMs)
}
const liveTerminal = new LiveTerminal(
  { screen: byTestId("live-screen"), status: byTestId("live-status"), take: byTestId<HTMLButtonElement>("live-take"), release: byTestId<HTMLButtonElement>("live-release") },
  {
    take: async (cols, rows) => {
      const { hold } = (await terminalTool({ action: "take", size: `${cols}x${rows}` })) as { hold?: unknown }
      if (typeof hold !== "string") throw new Error("the server did not hand over the terminal")
      return hold
    },
    keys: async (hold, keys) => void (await terminalTool({ action: "keys", hold, keys })),
    resize: async (hold, cols, rows) => void (await terminalTool({ action: "resize", hold, size: `${cols}x${rows}` })),
    release: async (hold) => void (await terminalTool({ action: "release", hold }))
  },
  (error) => {
    if (!closed) showError(error)
  }
)

const showLive = (pid: string | undefined) => {
  const next = pid === undefined || selected === undefined ? undefined : { pid, computer: selected }
  if (next?.pid === live?.pid && next?.computer === live?.computer) return
  live = next
  liveTerminal.restart()
  void pollLive()
}

/** The running terminal processes of the selected computer, in the panel's picker. */
const showLiveTargets = (view: ProcessesView) => {
  const ttys = view.rows.filter((p) => p.tty && p.state === "running")
  const current = ui.liveTarget.value
  ui.liveTarget.textContent = ""
  for (const p of ttys) {
    const option = document.createElement("option")
    option.value = p.id
    option.textContent = `${p.id} · ${p.command}`
    ui.liveTarget.append(option)
  }
  const keep = ttys.some((p) => p.id === current) ? current : live !== undefined && ttys.some((p) => p.id === live!.pid) ? live.pid : ttys[0]?.id
  if (keep !== undefined) ui.liveTarget.value = keep
  ui.liveEmpty.hidden = ttys.length > 0 || live !== undefined
  ui.liveTarget.disabled = closed || ttys.length === 0
  // A process that ended stays on screen (its last view says so) until another is picked, or another computer is.
  if (keep !== undefined && keep !== live?.pid) showLive(keep)
  else if (keep === undefined && live !== undefined && live.computer !== selected) showLive(undefined)
}

/** One view of the shown terminal: what it wrote since the cursor. Never two at once. */
const pollLive = async () => {
  if (closed || liveBusy || live === undefined || document.hidden) return
  const shown = live
  liveBusy = true
  try {
    const view = (await terminalTool({
      action: "view",
      ...(liveTerminal.cursor === undefined ? {} : { cursor: liveTerminal.cursor }),
      ...(liveTerminal.hold === undefined ? {} : { hold: liveTerminal.hold })
    })) as ViewJson
    if (shown === live) liveTerminal.show(view)
  } catch (error) {
    // A lapsed hold: watch again.
    if (liveTerminal.hold !== undefined && /do not hold it/.test(message(error))) liveTerminal.lost(error)
    else if (!closed && shown === live) showError(error)
  } finally {
    liveBusy = false
  }
}

// ---- host context and teardown ----
const applyHostContext = (context: McpUiHostContext | undefined) => {
  if (context?.theme === "light" || context?.theme === "dark") applyDocumentTheme(context.theme)
  for (const [name, value] of safeStyleVariables(context?.styles?.variables)) document.documentElement.style.setProperty(name, value)
}

const close = () => {
  closed = true
  if (timer !== undefined) clearInterval(timer)
  timer = undefined
  if (liveTimer !== undefined) clearInterval(liveTimer)
  liveTimer = undefined
  stopSizeReports?.()
  lifetime.abort(new Error("the dashboard was closed"))
  confirm.settle(false)
  setStatus("closed")
  for (const control of document.querySelectorAll<HTMLButtonElement | HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>(
    "button, input, select, textarea"
  )) {
    control.disabled = true
  }
}

// ---- wiring ----
byTestId("error-dismiss").addEventListener("click", clearError)
ui.create.addEventListener("click", () => void create())
ui.createId.addEventListener("keydown", (event) => {
  if (event.key === "Enter") {
    event.preventDefault()
    void create()
  }
})
byTestId("refresh").addEventListener("click", () => {
  clearError()
  void refresh()
})
ui.target.addEventListener("change", () => select(ui.target.value))
ui.liveTarget.addEventListener("change", () => showLive(ui.liveTarget.value))
ui.run.addEventListener("click", () => void run())
ui.command.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault()
    void run()
  }
})

app.ontoolresult = (result) => {
  if (closed) return
  if (result.isError === true) showError(resultText(result))
  else if (result.structuredContent !== undefined) showInventory(inventory(result.structuredContent))
}
app.onhostcontextchanged = applyHostContext
app.onteardown = () => {
  close()
  return {}
}

showTargets()
renderProcesses(ui.processes, { rows: [], hidden: 0 }, undefined)
const transport = new HostTransport(window.parent, (dropped) => {
  document.documentElement.setAttribute("data-ignored-messages", String(dropped))
})
app.connect(transport).then(
  () => {
    applyHostContext(app.getHostContext())
    setStatus("connected")
    stopSizeReports = app.setupSizeChangedNotifications()
    void refresh()
    timer = setInterval(() => {
      if (!document.hidden) void refresh()
    }, refreshMs)
    liveTimer = setInterval(() => void pollLive(), livePollMs)
  },
  (error: unknown) => {
    setStatus("not connected")
    showError(`could not connect to the host: ${message(error)}`)
  }
)
