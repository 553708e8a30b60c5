/**
 * The dashboard's DOM. Everything shown comes from tool results and is untrusted: it is set with
 * `textContent`, attributes and CSS class tokens only — never parsed as HTML.
 */
import {
  type ActivityView,
  type ComputerView,
  cssToken,
  type ExecView,
  type PoolView,
  poolLine,
  processCount,
  type ProcessesView
} from "./model.js"

/** The element with this `data-testid` (the page's fixed skeleton, `index.html`). */
export const byTestId = <E extends HTMLElement = HTMLElement>(id: string): E => {
  const found = document.querySelector<E>(`[data-testid="${id}"]`)
  if (found === null) throw new Error(`the page has no [data-testid="${id}"]`)
  return found
}

const el = <K extends keyof HTMLElementTagNameMap>(tag: K, className?: string, text?: string): HTMLElementTagNameMap[K] => {
  const node = document.createElement(tag)
  if (className !== undefined) node.className = className
  if (text !== undefined) node.textContent = text
  return node
}

const testId = <E extends HTMLElement>(node: E, id: string): E => {
  node.setAttribute("data-testid", id)
  return node
}

const button = (label: string, id: string, className?: string): HTMLButtonElement => {
  const b = testId(el("button", className, label), id)
  b.type = "button"
  return b
}

/** An ISO time as the user's local date and time; anything unparsable as it came. */
export const localTime = (iso: string, style: "time" | "datetime" = "datetime"): string => {
  const date = new Date(iso)
  if (Number.isNaN(date.getTime())) return iso
  return style === "time" ? date.toLocaleTimeString() : date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "short" })
}

/** What a computer's row can ask for. */
export interface RowActions {
  readonly select: (id: string) => void
  readonly restart: (id: string) => void
  readonly reset: (id: string) => void
  readonly remove: (id: string) => void
}

interface Row {
  readonly li: HTMLLIElement
  readonly dot: HTMLSpanElement
  readonly kind: HTMLSpanElement
  readonly meta: HTMLDivElement
  readonly warning: HTMLDivElement
  readonly buttons: ReadonlyArray<HTMLButtonElement>
}

/** The inventory list: one row per computer, kept across refreshes (focus and clicks survive). */
export class Inventory {
  private readonly rows = new Map<string, Row>()

  constructor(private readonly list: HTMLUListElement, private readonly actions: RowActions) {}

  render(computers: ReadonlyArray<ComputerView>, selected: string | undefined): void {
    const seen = new Set<string>()
    computers.forEach((computer, index) => {
      seen.add(computer.id)
      const row = this.rows.get(computer.id) ?? this.make(computer.id)
      this.update(row, computer)
      const at = this.list.children[index] ?? null
      if (at !== row.li) this.list.insertBefore(row.li, at)
    })
    for (const [id, row] of this.rows) {
      if (!seen.has(id)) {
        row.li.remove()
        this.rows.delete(id)
      }
    }
    this.select(selected)
  }

  select(selected: string | undefined): void {
    for (const [id, row] of this.rows) row.li.classList.toggle("selected", id === selected)
  }

  /** Disables a row's buttons while an action on it runs. */
  busy(id: string, busy: boolean): void {
    for (const b of this.rows.get(id)?.buttons ?? []) b.disabled = busy
  }

  private make(id: string): Row {
    const li = testId(el("li", "computer"), "computer-row")
    li.setAttribute("data-computer-id", id)
    const dot = el("span", "dot")
    const name = el("div", "name")
    const idNode = testId(el("span", "id", id), "computer-id")
    idNode.title = id
    const kind = testId(el("span", "pill"), "computer-kind")
    name.append(idNode, kind)
    const meta = testId(el("div", "meta"), "computer-meta")
    const warning = testId(el("div", "warning"), "computer-warning")
    const info = el("div", "info")
    info.append(name, meta, warning)
    const restart = button("Restart", "computer-restart")
    const reset = button("Reset", "computer-reset")
    const remove = button("Delete", "computer-delete", "danger")
    const actions = el("div", "actions")
    actions.append(restart, reset, remove)
    li.append(dot, info, actions)
    li.addEventListener("click", (event) => {
      if (event.target instanceof Element && event.target.closest("button") !== null) return
      this.actions.select(id)
    })
    restart.addEventListener("click", () => this.actions.restart(id))
    reset.addEventListener("click", () => this.actions.reset(id))
    remove.addEventListener("click", () => this.actions.remove(id))
    const row = { li, dot, kind, meta, warning, buttons: [restart, reset, remove] }
    this.rows.set(id, row)
    return row
  }

  private update(row: Row, computer: ComputerView): void {
    row.li.setAttribute("data-state", computer.state)
    row.dot.className = `dot ${cssToken(computer.state)}`
    row.dot.title = computer.state
    const kind = computer.temporary ? "temporary" : "permanent"
    row.kind.textContent = kind
    row.kind.className = `pill ${kind}`
    const parts: Array<readonly [string, string | undefined]> = [
      [computer.backend, undefined],
      [computer.state, "computer-state"],
      [computer.image, undefined],
      [computer.sandboxId, undefined],
      ...(computer.createdAt !== undefined ? [[`created ${localTime(computer.createdAt)}`, "computer-created"] as const] : []),
      ...(computer.endsAt !== undefined ? [[`ends ${localTime(computer.endsAt)}`, "computer-ends"] as const] : []),
      [processCount(computer.processes), undefined]
    ]
    row.meta.textContent = ""
    parts.forEach(([part, id], i) => {
      if (i > 0) row.meta.append(" · ")
      const span = el("span", undefined, part)
      if (id !== undefined) testId(span, id)
      row.meta.append(span)
    })
    row.meta.title = parts.map(([part]) => part).join(" · ")
    row.warning.textContent = computer.warning ?? ""
    row.warning.hidden = computer.warning === undefined
  }
}

/** The terminal target picker. */
export const renderTargets = (select: HTMLSelectElement, computers: ReadonlyArray<ComputerView>, selected: string | undefined): void => {
  select.textContent = ""
  if (computers.length === 0) select.append(el("option", undefined, "no computers"))
  for (const computer of computers) {
    const option = el("option", undefined, computer.id)
    option.value = computer.id
    select.append(option)
  }
  if (selected !== undefined) select.value = selected
}

/** The pool line in the header, hidden without a pool. */
export const renderPool = (node: HTMLElement, pool: PoolView | undefined): void => {
  node.textContent = pool === undefined ? "" : poolLine(pool)
  node.hidden = pool === undefined
}

/** The recent-activity panel, hidden unless the result carried entries. */
export const renderActivity = (panel: HTMLElement, list: HTMLOListElement, entries: ReadonlyArray<ActivityView> | undefined): void => {
  list.textContent = ""
  for (const entry of entries ?? []) {
    const li = testId(el("li"), "activity-entry")
    li.append(
      el("span", "time", entry.time === "" ? "" : localTime(entry.time, "time")),
      el("span", "kind", entry.kind),
      el("span", "summary", entry.computerId === undefined ? entry.summary : `${entry.computerId}: ${entry.summary}`)
    )
    li.title = entry.summary
    list.append(li)
  }
  panel.hidden = entries === undefined
}

/** The processes pane. */
export const renderProcesses = (
  elements: { readonly table: HTMLElement; readonly body: HTMLElement; readonly empty: HTMLElement; readonly more: HTMLElement },
  view: ProcessesView,
  selected: string | undefined
): void => {
  elements.body.textContent = ""
  for (const p of view.rows) {
    const tr = testId(el("tr"), "process-row")
    tr.setAttribute("data-process-id", p.id)
    tr.setAttribute("data-status", p.state)
    const command = el("td", "cmd", p.command)
    command.title = p.reason === undefined ? p.command : `${p.command}\n${p.reason}`
    tr.append(
      el("td", "mono", p.id),
      command,
      testId(el("td", `st ${p.state}`, p.state), "process-status"),
      testId(el("td", "mono", p.exit), "process-exit")
    )
    elements.body.append(tr)
  }
  elements.table.hidden = view.rows.length === 0
  elements.empty.hidden = view.rows.length > 0
  elements.empty.textContent = selected === undefined ? "No computer selected." : "No processes."
  elements.more.hidden = view.hidden === 0
  elements.more.textContent = view.hidden === 0 ? "" : `${processCount(view.hidden)} more not shown`
}

/** A terminal that keeps its last 100 entries. */
export class Terminal {
  private hinted = true

  constructor(private readonly output: HTMLElement) {}

  append(entry: Partial<ExecView> & { readonly prompt: string }): void {
    if (this.hinted) {
      this.output.textContent = ""
      this.hinted = false
    }
    const node = el("div", "entry")
    const parts: Array<readonly [string, string | undefined]> = [
      ["prompt", entry.prompt],
      ["stdout", entry.stdout],
      ["stderr", entry.stderr],
      [entry.failed === true ? "footer failed" : "footer", entry.footer]
    ]
    for (const [className, text] of parts) {
      if (text !== undefined && text !== "") node.append(el("span", className, text))
    }
    this.output.append(node)
    while (this.output.children.length > 100) this.output.firstElementChild?.remove()
    this.output.scrollTop = this.output.scrollHeight
  }
}

/** An in-page confirmation (hosts may block `window.confirm`); a new question cancels the open one. */
export class Confirm {
  private pending: ((ok: boolean) => void) | undefined

  constructor(
    private readonly dialog: HTMLElement,
    private readonly text: HTMLElement,
    private readonly ok: HTMLButtonElement,
    private readonly cancel: HTMLButtonElement
  ) {
    ok.addEventListener("click", () => this.settle(true))
    cancel.addEventListener("click", () => this.settle(false))
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape") this.settle(false)
    })
  }

  ask(question: string, label: string): Promise<boolean> {
    this.settle(false)
    this.text.textContent = question
    this.ok.textContent = label
    this.dialog.hidden = false
    this.cancel.focus()
    return new Promise((resolve) => {
      this.pending = resolve
    })
  }

  settle(ok: boolean): void {
    const pending = this.pending
    if (pending === undefined) return
    this.pending = undefined
    this.dialog.hidden = true
    pending(ok)
  }
}
