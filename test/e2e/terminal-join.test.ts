/**
 * A terminal a person joins, in a real browser: headless Chromium shows the `computer_dashboard`
 * MCP App (in the test MCP Apps host page, test/support/dashboard-host) whose tool calls go to a
 * real kilntainers HTTP server through the MCP SDK `Client` the agent uses too. The agent runs vim
 * in a terminal on a host computer; the person watches it read-only, takes over, types text and
 * `:w`, hands back, and the agent's next `stdout` shows it and the file has it. Then the
 * standalone page of a signed link, on the preview origin (`--preview-port`) like previews:
 * watch-only, refused when changed, refused on /mcp's origin, never an MCP credential.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { type CallToolResult, CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { build } from "esbuild"
import { existsSync, readFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { type Browser, chromium, type Frame, type Page } from "playwright-core"
import { afterAll, assert, beforeAll, it } from "vitest"
import { binPath, type HttpServerProcess, root, startHttpServer, until } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const chromiumPath = "/usr/bin/chromium"
const hostDir = join(root, "test", "support", "dashboard-host")
const token = `terminal-join-token-${process.pid}-0123456789`
const computerId = `tj-${process.pid}`

describeIf(
  bwrapWorks && existsSync(binPath) && existsSync(chromiumPath) && existsSync("/usr/bin/vim"),
  `bubblewrap, a built CLI, Chromium (${chromiumPath}) and vim`
)("a terminal a person can join", () => {
  let server: HttpServerProcess
  /** The preview origin, where the terminal page of a signed link is served. */
  let previewBase: string
  let client: Client
  let http: Server
  let browser: Browser
  let page: Page
  let app: Frame
  let pid: string
  const relayed: Array<{ readonly name: string; readonly args: Record<string, unknown> }> = []
  const pageErrors: Array<string> = []

  const call = async (name: string, args: Record<string, unknown>) => {
    const result = await client.request({ method: "tools/call", params: { name, arguments: args } }, CallToolResultSchema, { timeout: 120_000 })
    return {
      isError: result.isError === true,
      text: result.content.map((c) => (c.type === "text" ? c.text : "")).join(""),
      structured: result.structuredContent as any
    }
  }
  const agentScreen = async () => (await call("stdout", { id: pid, computer_id: computerId })).structured
  const tid = (id: string) => `[data-testid="${id}"]`
  const screenText = (frame: Frame | Page) => frame.locator(`${tid("live-screen")} .xterm-rows`).innerText({ timeout: 5_000 }).catch(() => "")
  const terminalCalls = (action: string) => relayed.filter((c) => c.name === "terminal" && c.args.action === action)

  beforeAll(async () => {
    server = await startHttpServer(["--backend", "host", "--preview-port", "0"], { KILNTAINERS_AUTH_TOKEN: token })
    previewBase = await until("the preview origin in the log", async () => /preview URLs at (http:\/\/[^/\s]+)\/p\//.exec(server.stderr())?.[1], (o) => o !== undefined) as string
    client = new Client({ name: "terminal-join-test", version: "1.0.0" })
    await client.connect(new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers: { authorization: `Bearer ${token}` } } }))
    const created = await call("computer_create", { computer_id: computerId, temporary: true })
    assert.isFalse(created.isError, created.text)
    const spawned = await call("spawn", {
      command: "vim -N -u NONE -i NONE notes.txt",
      tty: true,
      cols: 80,
      rows: 24,
      computer_id: computerId,
      pattern: "notes.txt",
      timeoutMs: 30_000
    })
    assert.isFalse(spawned.isError, spawned.text)
    pid = spawned.structured.pid

    const bundle = await build({ entryPoints: [join(hostDir, "host.ts")], bundle: true, format: "esm", platform: "browser", target: "es2022", write: false, logLevel: "silent" })
    const files: Record<string, { readonly type: string; readonly body: string | Uint8Array }> = {
      "/": { type: "text/html; charset=utf-8", body: readFileSync(join(hostDir, "index.html"), "utf8") },
      "/host.js": { type: "text/javascript; charset=utf-8", body: bundle.outputFiles[0]!.contents }
    }
    http = createServer((request, response) => {
      const file = files[new URL(request.url ?? "/", "http://127.0.0.1").pathname]
      if (!file) return void response.writeHead(404).end()
      response.writeHead(200, { "content-type": file.type, "cache-control": "no-store" }).end(file.body)
    })
    await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))

    browser = await chromium.launch({
      executablePath: chromiumPath,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    })
    page = await browser.newPage({ viewport: { width: 1120, height: 1100 }, deviceScaleFactor: 1 })
    page.on("pageerror", (error) => pageErrors.push(error.message))
    await page.exposeFunction("mcpListTools", async () => (await client.listTools()).tools)
    await page.exposeFunction("mcpReadResource", async (uri: string) => {
      const content = (await client.readResource({ uri })).contents[0]
      if (!content || !("text" in content)) throw new Error(`resource ${uri} has no text`)
      return { text: content.text, mimeType: content.mimeType ?? "" }
    })
    await page.exposeFunction("mcpCallTool", async (name: string, args: Record<string, unknown>) => {
      relayed.push({ name, args })
      return (await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 })) as CallToolResult
    })
    await page.goto(`http://127.0.0.1:${(http.address() as AddressInfo).port}/`)
    const frame = await (await page.waitForSelector("iframe[data-testid=app-frame]")).contentFrame()
    assert.isNotNull(frame)
    app = frame!
  }, 180_000)

  afterAll(async () => {
    await browser?.close().catch(() => undefined)
    await client?.close().catch(() => undefined)
    await server?.stop()
    await new Promise((resolve) => (http ? http.close(resolve) : resolve(undefined)))
  })

  it("shows the agent's vim in the dashboard's live terminal, read-only: keystrokes go nowhere", async () => {
    // the computer's row is picked; its terminal process is the panel's
    await app.locator(`${tid("computer-row")}[data-computer-id="${computerId}"]`).click({ timeout: 30_000 })
    await until("the panel to show vim", () => screenText(app), (t) => t.includes("notes.txt"))
    assert.strictEqual(await app.inputValue(tid("live-target")), pid)
    assert.strictEqual(await app.getAttribute(tid("live-status"), "data-mode"), "watching")
    assert.isTrue(await app.locator(tid("live-take")).isVisible())

    await app.click(tid("live-screen"))
    await page.keyboard.type("iread-only-keys")
    await new Promise((resolve) => setTimeout(resolve, 1_500))
    assert.lengthOf(terminalCalls("keys"), 0)
    assert.notInclude((await agentScreen()).stdout, "read-only-keys")
    // and the server refuses keys from anyone who does not hold the terminal
    const refused = await call("terminal", { action: "keys", id: pid, hold: "guessed", keys: "x" })
    assert.isTrue(refused.isError)
    assert.match(refused.text, /you do not hold it/)
  }, 90_000)

  it("takes over, types into vim and saves; the agent is told and its stdin waits", async () => {
    await app.click(tid("live-take"))
    await until("the person to drive", () => app.getAttribute(tid("live-status"), "data-mode"), (m) => m === "driving")
    const take = terminalCalls("take")[0]!
    assert.match(take.args.size as string, /^\d+x\d+$/)

    const held = await call("stdin", { id: pid, input: "ihijack\\e" })
    assert.isTrue(held.isError)
    assert.match(held.text, /a person holds this terminal/)
    assert.match((await agentScreen()).note, /a person holds this terminal \(took over \d+ s ago, from the dashboard\)/)

    await app.click(tid("live-screen"))
    await page.keyboard.type("ihello from a person")
    await page.keyboard.press("Escape")
    await page.keyboard.type(":w")
    await page.keyboard.press("Enter")
    await until("vim to say it wrote the file", () => screenText(app), (t) => /"notes\.txt".*written/.test(t))

    await app.click(tid("live-release"))
    await until("the hand-back", async () => terminalCalls("release").length, (n) => n === 1)
    await until("the panel to watch again", () => app.getAttribute(tid("live-status"), "data-mode"), (m) => m === "watching")
  }, 90_000)

  it("the agent's next stdout shows what the person did, the file has it, and its stdin works again", async () => {
    const seen = await agentScreen()
    assert.include(seen.stdout, "hello from a person")
    assert.match(seen.stdout, /"notes\.txt".*written/)
    assert.isUndefined(seen.note)
    const file = await call("file_read", { path: "notes.txt", computer_id: computerId })
    assert.isFalse(file.isError, file.text)
    assert.include(file.text, "hello from a person")
    const typed = await call("stdin", { id: pid, input: "oand from the agent\\e:w\\r", yieldMs: 1_000 })
    assert.isFalse(typed.isError, typed.text)
    await until("the person's panel to show the agent's line", () => screenText(app), (t) => t.includes("and from the agent"))
  }, 60_000)

  it("serves a watch link's standalone page under a strict CSP, read-only; a changed link is refused", async () => {
    const linked = await call("terminal", { id: pid, computer_id: computerId, minutes: 5 })
    assert.isFalse(linked.isError, linked.text)
    const url: string = linked.structured.url
    assert.isTrue(url.startsWith(`${previewBase}/terminal#`), url)
    assert.notStrictEqual(previewBase, `http://127.0.0.1:${server.port}`)
    const link = url.slice(url.indexOf("#") + 1)

    const standalone = await browser.newPage({ viewport: { width: 900, height: 600 } })
    const errors: Array<string> = []
    standalone.on("pageerror", (error) => errors.push(error.message))
    const response = await standalone.goto(url)
    const csp = response!.headers()["content-security-policy"]!
    assert.match(csp, /^default-src 'none'; script-src 'sha256-[A-Za-z0-9+/=]+'; style-src 'unsafe-inline'; connect-src 'self';/)
    assert.include(csp, "frame-ancestors 'none'")
    await until("the page to show vim", () => screenText(standalone), (t) => t.includes("and from the agent"))
    assert.strictEqual(await standalone.getAttribute(tid("live-status"), "data-mode"), "watching")
    assert.isTrue(await standalone.locator(tid("live-take")).isHidden())
    // the link left the address bar
    assert.notInclude(standalone.url(), "#")
    assert.deepEqual(errors, [])

    const base = previewBase
    const post = (header: string, body: unknown) =>
      fetch(`${base}/terminal/input`, { method: "POST", headers: { "x-kilntainers-link": header, "content-type": "application/json" }, body: JSON.stringify(body) })
    const watchOnly = await post(link, { action: "take" })
    assert.strictEqual(watchOnly.status, 403)
    assert.match(((await watchOnly.json()) as { error: string }).error, /may watch the terminal, not type/)

    const [payload, mac] = link.split(".") as [string, string]
    const control = Buffer.from(Buffer.from(payload, "base64url").toString("utf8").replace("\"watch\"", "\"control\"")).toString("base64url")
    for (const forged of [`${control}.${mac}`, `${payload}.${mac.slice(0, -2)}${mac.endsWith("AA") ? "BB" : "AA"}`]) {
      const taken = await post(forged, { action: "take" })
      assert.strictEqual(taken.status, 403)
      assert.strictEqual(((await taken.json()) as { error: string }).error, "the link's signature does not match")
      const streamed = await fetch(`${base}/terminal/stream`, { headers: { "x-kilntainers-link": forged } })
      assert.strictEqual(streamed.status, 403)
    }
    const forgedPage = await browser.newPage()
    await forgedPage.goto(`${base}/terminal#${control}.${mac}`)
    await until("the forged link's page to say so", () => forgedPage.locator(tid("error")).textContent(), (t) => t === "the link's signature does not match")
    await forgedPage.close()

    // The link is no MCP credential, and the bearer token is no terminal link.
    const asBearer = await fetch(server.url, {
      method: "POST",
      headers: { authorization: `Bearer ${link}`, "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: {} })
    })
    assert.strictEqual(asBearer.status, 401)
    assert.strictEqual((await fetch(`${base}/terminal/stream`, { headers: { "x-kilntainers-link": token } })).status, 403)
    assert.strictEqual((await fetch(`${base}/terminal/stream`)).status, 401)
    await standalone.close()
  }, 90_000)

  it("the /mcp origin refuses the terminal page and its stream, even with a valid link", async () => {
    const linked = await call("terminal", { id: pid, computer_id: computerId, control: true, minutes: 5 })
    assert.isFalse(linked.isError, linked.text)
    const url: string = linked.structured.url
    const link = url.slice(url.indexOf("#") + 1)
    const mcpBase = `http://127.0.0.1:${server.port}`
    const onMcp = [
      await fetch(`${mcpBase}/terminal`),
      await fetch(`${mcpBase}/terminal/stream`, { headers: { "x-kilntainers-link": link } }),
      await fetch(`${mcpBase}/terminal/input`, {
        method: "POST",
        headers: { "x-kilntainers-link": link, "content-type": "application/json" },
        body: JSON.stringify({ action: "take" })
      })
    ]
    for (const refused of onMcp) {
      assert.strictEqual(refused.status, 403)
      assert.strictEqual(((await refused.json()) as { error: string }).error, `the terminal page is served on the preview origin only (${previewBase}/terminal)`)
    }
    // the same link works on the preview origin: it streams the terminal's views
    const controller = new AbortController()
    const streamed = await fetch(`${previewBase}/terminal/stream`, { headers: { "x-kilntainers-link": link }, signal: controller.signal })
    assert.strictEqual(streamed.status, 200)
    assert.strictEqual(streamed.headers.get("content-type"), "text/event-stream")
    const first = new TextDecoder().decode((await streamed.body!.getReader().read()).value)
    assert.match(first, /^event: grant\ndata: \{"pid":"[^"]+","computer_id":"[^"]+","control":true/)
    controller.abort()
    // and the preview origin serves no /mcp
    assert.strictEqual((await fetch(`${previewBase}/mcp`, { method: "POST", headers: { authorization: `Bearer ${token}` } })).status, 404)
  }, 60_000)

  it("a control link's page takes over and types; the agent reads it", async () => {
    const linked = await call("terminal", { id: pid, computer_id: computerId, control: true })
    const standalone = await browser.newPage({ viewport: { width: 900, height: 600 } })
    await standalone.goto(linked.structured.url)
    await until("the page to show vim", () => screenText(standalone), (t) => t.includes("and from the agent"))
    await standalone.click(tid("live-take"))
    await until("the page to drive", () => standalone.getAttribute(tid("live-status"), "data-mode"), (m) => m === "driving")
    // the dashboard sees that a person drives it elsewhere
    await until("the dashboard to see the page's hold", () => app.textContent(tid("live-status")), (t) => t === "a person drives it (from the page)")
    await standalone.click(tid("live-screen"))
    await standalone.keyboard.type("otyped on the page")
    await standalone.keyboard.press("Escape")
    await until("the agent to read the page's line", async () => (await agentScreen()).stdout as string, (t) => t.includes("typed on the page"))
    await standalone.click(tid("live-release"))
    await until("the hand-back", async () => (await agentScreen()).note, (note) => note === undefined)
    const quit = await call("stdin", { id: pid, input: ":wq\\r", yieldMs: 1_000 })
    assert.isFalse(quit.isError, quit.text)
    await until("vim to exit", async () => (await agentScreen()).status, (s) => s === "terminated")
    assert.include((await call("file_read", { path: "notes.txt", computer_id: computerId })).text, "typed on the page")
    await standalone.close()
    assert.deepEqual(pageErrors, [])
  }, 90_000)
})
