/**
 * The standalone terminal page (`/terminal` of the HTTP server): one TTY process, live, for the
 * bearer of a signed link. The link is the URL's fragment (never sent to the server by the
 * browser); the page sends it as the `X-Kilntainers-Link` header of its two requests: the view
 * stream (server-sent events, read with fetch) and, for a control link, take-over, keystrokes and
 * hand-back. Bundled into one page by `scripts/build-dashboard.mjs`; the server's CSP lets it run
 * only its own inline script and talk only to its own origin.
 */
import { LiveTerminal, type TerminalLink, type ViewJson } from "./LiveTerminal.js"

const byTestId = <E extends HTMLElement = HTMLElement>(id: string): E => {
  const found = document.querySelector<E>(`[data-testid="${id}"]`)
  if (found === null) throw new Error(`the page has no ${id}`)
  return found
}

const token = decodeURIComponent(location.hash.slice(1))
// The link leaves the address bar (and the history): a screenshot or a shoulder does not copy it.
history.replaceState(null, "", location.pathname)
const headers = { "x-kilntainers-link": token }
const error = byTestId("error")
const showError = (problem: unknown) => {
  error.textContent = problem instanceof Error ? problem.message : String(problem)
  error.hidden = false
}

const post = async (body: Record<string, unknown>): Promise<Record<string, unknown>> => {
  const response = await fetch("/terminal/input", {
    method: "POST",
    headers: { ...headers, "content-type": "application/json" },
    body: JSON.stringify(body),
    credentials: "omit",
    cache: "no-store"
  })
  const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>
  if (!response.ok) throw new Error(typeof answer.error === "string" ? answer.error : `HTTP ${response.status}`)
  return answer
}

const link: TerminalLink = {
  take: async (cols, rows) => {
    const { hold } = await post({ action: "take", cols, rows })
    if (typeof hold !== "string") throw new Error("the server did not hand over the terminal")
    return hold
  },
  keys: async (hold, keys) => void (await post({ action: "keys", hold, keys })),
  resize: async (hold, cols, rows) => void (await post({ action: "resize", hold, cols, rows })),
  release: async (hold) => void (await post({ action: "release", hold })),
  renew: async (hold) => void (await post({ action: "renew", hold }))
}

interface Grant {
  readonly pid: string
  readonly computer_id: string
  readonly control: boolean
}

const follow = async () => {
  const response = await fetch("/terminal/stream", { headers, credentials: "omit", cache: "no-store" })
  if (!response.ok || response.body === null) {
    const answer = (await response.json().catch(() => ({}))) as { error?: string }
    throw new Error(answer.error ?? `HTTP ${response.status}`)
  }
  let terminal: LiveTerminal | undefined
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader()
  let buffer = ""
  for (;;) {
    const { value, done } = await reader.read()
    if (done) break
    buffer += value
    let end: number
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      const name = /^event: (.*)$/m.exec(block)?.[1]
      const data = JSON.parse(/^data: (.*)$/m.exec(block)?.[1] ?? "null") as unknown
      if (name === "grant") {
        const grant = data as Grant
        byTestId("live-title").textContent = `${grant.computer_id} · ${grant.pid}${grant.control ? "" : " (watch only)"}`
        terminal = new LiveTerminal(
          { screen: byTestId("live-screen"), status: byTestId("live-status"), take: byTestId("live-take"), release: byTestId("live-release") },
          grant.control ? link : undefined,
          showError
        )
      } else if (name === "view") {
        terminal?.show(data as ViewJson)
      } else if (name === "end") {
        showError((data as { error?: string }).error ?? "the terminal ended")
      }
    }
  }
  byTestId("live-status").textContent = "disconnected (the process ended, or the link expired)"
}

follow().catch(showError)
