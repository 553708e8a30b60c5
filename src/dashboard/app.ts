/**
 * The `computer_dashboard` MCP App (MCP Apps 2026-01-26), on ext-apps' `App`.
 *
 * It connects to its host over `HostTransport` (`window.parent` only, origin pinned), shows the
 * inventory from the `computer_dashboard` tool result, follows the host's theme and style
 * variables, and calls the server's tools through the host (`callServerTool`): the inventory and
 * the selected computer's processes every few seconds while visible and after every action,
 * create / restart / factory reset / delete, and `sandbox_exec` for the command runner. On
 * `ui/resource-teardown` it stops: no timer, no size reports, in-flight calls cancelled, controls
 * disabled.
 *
 * Bundled with its dependencies and `style.css` into one HTML page by `scripts/build-dashboard.mjs`.
 */
import { App, applyDocumentTheme, type McpUiHostContext } from "@modelcontextprotocol/ext-apps"
import { HostTransport } from "./HostTransport.js"
import { type ComputerView, execEntry, inventory, type InventoryView, processes, promptLine, resultText, safeStyleVariables } from "./model.js"
import { byTestId, Confirm, Inventory, renderActivity, renderPool, renderProcesses, renderTargets, Terminal } from "./view.js"

/** How often the dashboard refreshes while it is visible. */
const refreshMs = 4_000
const listTimeoutMs = 60_000
const actionTimeoutMs = 300_000
const execTimeoutMs = 900_000

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
  if (target === selected) renderProcesses(ui.processes, processes(result), selected)
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

// ---- host context and teardown ----
const applyHostContext = (context: McpUiHostContext | undefined) => {
  if (context?.theme === "light" || context?.theme === "dark") applyDocumentTheme(context.theme)
  for (const [name, value] of safeStyleVariables(context?.styles?.variables)) document.documentElement.style.setProperty(name, value)
}

const close = () => {
  closed = true
  if (timer !== undefined) clearInterval(timer)
  timer = undefined
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
  },
  (error: unknown) => {
    setStatus("not connected")
    showError(`could not connect to the host: ${message(error)}`)
  }
)
