/**
 * A live TTY process in xterm.js, for the dashboard's terminal panel and the standalone terminal
 * page: it draws the views it is given (the PTY's bytes since its cursor, or a redraw), follows
 * the process's size, and says who drives. Read-only until the person takes over (xterm's input
 * is disabled and nothing is sent); then keystrokes go out in order, one request at a time (the
 * ones typed meanwhile together), and "hand back" returns the terminal to the agent. How views
 * arrive and where input goes is the `TerminalLink` of each page.
 */
import { Terminal } from "@xterm/xterm"

/** A view as the server sends it (services/Terminals `TerminalView`). */
export interface ViewJson {
  readonly status?: string
  readonly exitCode?: number
  readonly cols?: number
  readonly rows?: number
  readonly data?: string
  readonly next?: number
  readonly reset?: true
  readonly held?: { readonly by: string; readonly since: string; readonly yours?: true }
}

/** Where a page sends what the person does. */
export interface TerminalLink {
  /** Takes the terminal over, resized to `cols`×`rows`; the hold token. */
  readonly take: (cols: number, rows: number) => Promise<string>
  readonly keys: (hold: string, keys: string) => Promise<void>
  readonly resize: (hold: string, cols: number, rows: number) => Promise<void>
  readonly release: (hold: string) => Promise<void>
  /** Keeps the hold alive while the person reads without typing (a page whose views do not renew it). */
  readonly renew?: ((hold: string) => Promise<void>) | undefined
}

/** How often a held terminal is renewed (the server's lease is 30 s). */
const renewMs = 10_000

export interface LiveTerminalElements {
  readonly screen: HTMLElement
  readonly status: HTMLElement
  readonly take: HTMLButtonElement
  readonly release: HTMLButtonElement
}

const fontSize = 13
const fontFamily = "ui-monospace, Menlo, Consolas, monospace"

/** The columns and rows that fit `element` in the terminal's font. */
const fit = (element: HTMLElement): { cols: number; rows: number } => {
  const probe = document.createElement("span")
  probe.style.cssText = `position:absolute;visibility:hidden;white-space:pre;font-size:${fontSize}px;font-family:${fontFamily}`
  probe.textContent = "W".repeat(20)
  document.body.append(probe)
  const width = probe.getBoundingClientRect().width / 20
  const height = probe.getBoundingClientRect().height
  probe.remove()
  const box = element.getBoundingClientRect()
  const clamp = (n: number, max: number) => Math.max(10, Math.min(max, Math.floor(n)))
  return { cols: clamp(box.width / (width || 8), 300), rows: clamp(box.height / ((height || 16) * 1.0), 100) }
}

export class LiveTerminal {
  readonly term: Terminal
  /** The cursor of the next view (undefined: the next view redraws). */
  cursor: number | undefined
  /** The token while this person holds the terminal. */
  hold: string | undefined
  private pending = ""
  private sending = false
  private ended = false
  private busy = false
  private renewal: ReturnType<typeof setInterval> | undefined

  constructor(
    private readonly elements: LiveTerminalElements,
    private readonly link: TerminalLink | undefined,
    private readonly onError: (error: unknown) => void
  ) {
    this.term = new Terminal({ fontSize, fontFamily, disableStdin: true, scrollback: 1000, convertEol: false, cursorBlink: false })
    this.term.open(elements.screen)
    this.term.onData((data) => this.typed(data))
    elements.take.addEventListener("click", () => void this.takeOver())
    elements.release.addEventListener("click", () => void this.handBack())
    this.controls(undefined)
  }

  /** Starts over with another process (or none): the next view redraws. */
  restart(): void {
    this.stopRenewal()
    this.cursor = undefined
    this.hold = undefined
    this.ended = false
    this.pending = ""
    this.term.reset()
    this.controls(undefined)
  }

  /** Draws a view. */
  show(view: ViewJson): void {
    if (view.cols !== undefined && view.rows !== undefined && (view.cols !== this.term.cols || view.rows !== this.term.rows)) {
      this.term.resize(view.cols, view.rows)
    }
    if (view.reset === true) this.term.reset()
    if (view.data !== undefined && view.data !== "") this.term.write(view.data)
    if (view.next !== undefined) this.cursor = view.next
    this.ended = view.status !== undefined && view.status !== "running"
    // A hold that lapsed or was lost shows as a refused request (`lost`), not here: a view may
    // have been asked for before this person took over.
    this.controls(view)
  }

  private controls(view: ViewJson | undefined): void {
    const driving = this.hold !== undefined
    this.term.options.disableStdin = !driving
    const { status, take, release } = this.elements
    take.hidden = this.link === undefined || driving
    release.hidden = !driving
    take.disabled = this.busy || this.ended || (view?.held !== undefined && view.held.yours !== true)
    release.disabled = this.busy
    status.dataset.mode = this.ended ? "ended" : driving ? "driving" : view?.held !== undefined ? "held" : "watching"
    status.textContent = this.ended
      ? `ended${view?.exitCode === undefined ? "" : ` (exit ${view.exitCode})`}`
      : driving
      ? "you are driving — the agent's stdin waits until you hand back"
      : view?.held !== undefined
      ? `a person drives it (from the ${view.held.by})`
      : "watching · read-only"
    if (driving) this.term.focus()
  }

  private async takeOver(): Promise<void> {
    if (this.link === undefined || this.hold !== undefined || this.busy) return
    this.busy = true
    try {
      const { cols, rows } = fit(this.elements.screen)
      this.hold = await this.link.take(cols, rows)
      const renew = this.link.renew
      if (renew !== undefined) {
        this.renewal = setInterval(() => {
          if (this.hold !== undefined) renew(this.hold).catch((error: unknown) => this.lost(error))
        }, renewMs)
      }
    } catch (error) {
      this.onError(error)
    } finally {
      this.busy = false
      this.controls({ ...(this.hold === undefined ? {} : { held: { by: "you", since: "", yours: true } }) })
    }
  }

  private async handBack(): Promise<void> {
    const hold = this.hold
    if (this.link === undefined || hold === undefined) return
    // What was typed goes out before the hand-back (bounded: a stuck request does not keep the terminal).
    void this.flush()
    for (let waited = 0; (this.sending || this.pending !== "") && waited < 5_000; waited += 20) {
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    this.stopRenewal()
    this.hold = undefined
    this.controls(undefined)
    await this.link.release(hold).catch(this.onError)
  }

  /** The server no longer counts this person as the holder (the hold lapsed): watch again, and say why. */
  lost(error: unknown): void {
    this.stopRenewal()
    this.hold = undefined
    this.pending = ""
    this.controls(undefined)
    this.onError(error)
  }

  private stopRenewal(): void {
    if (this.renewal !== undefined) clearInterval(this.renewal)
    this.renewal = undefined
  }

  private typed(data: string): void {
    if (this.hold === undefined) return
    this.pending += data
    void this.flush()
  }

  /** Sends what was typed, in order: one request at a time, the keys typed meanwhile together. */
  private async flush(): Promise<void> {
    if (this.sending || this.link === undefined) return
    this.sending = true
    try {
      while (this.pending !== "" && this.hold !== undefined) {
        const keys = this.pending
        this.pending = ""
        await this.link.keys(this.hold, keys)
      }
    } catch (error) {
      if (/do not hold it/.test(error instanceof Error ? error.message : String(error))) this.lost(error)
      else this.onError(error)
    } finally {
      this.sending = false
    }
  }

  dispose(): void {
    this.stopRenewal()
    this.term.dispose()
  }
}
