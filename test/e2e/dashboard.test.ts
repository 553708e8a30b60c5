/**
 * The `computer_dashboard` MCP App in a real browser: headless Chromium loads a small MCP Apps host
 * page (test/support/dashboard-host) that embeds the app in a sandboxed iframe with the ext-apps
 * `AppBridge`, and relays the app's tool calls to a real kilntainers server (the built CLI over
 * stdio, driven by the MCP SDK `Client` in this process). The app is the page `npm run build`
 * bundles from src/dashboard; its view model has unit tests in test/dashboard/model.test.ts.
 */
import { afterAll, assert, beforeAll, it } from "vitest"
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import { build } from "esbuild"
import { existsSync, mkdirSync, readFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { type Browser, chromium, type Frame, type Page } from "playwright-core"
import { binPath, type Harness, root, startServer, until } from "../support/McpHarness.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const chromiumPath = "/usr/bin/chromium"
const hostDir = join(root, "test", "support", "dashboard-host")
const artifacts = join(root, "test-artifacts")
const computerId = `dash-${process.pid}`

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describeIf(bwrapWorks && existsSync(binPath) && existsSync(chromiumPath), `bubblewrap, a built CLI and Chromium (${chromiumPath}; apt-get install chromium)`)(
  "computer dashboard MCP App in a browser host",
  () => {
    let server: Harness
    let http: Server
    let browser: Browser
    let page: Page
    let app: Frame
    let origin: string
    const relayed: Array<{ readonly name: string; readonly args: Record<string, unknown> }> = []
    const pageErrors: Array<string> = []
    const requests: Array<string> = []

    const tid = (id: string) => `[data-testid="${id}"]`
    const row = (id: string) => `${tid("computer-row")}[data-computer-id="${id}"]`
    const text = (selector: string) => app.locator(selector).first().textContent({ timeout: 5_000 }).catch(() => null)
    const count = (selector: string) => app.locator(selector).count()
    const screenshot = async (name: string) => {
      mkdirSync(artifacts, { recursive: true })
      await page.screenshot({ path: join(artifacts, name), fullPage: true })
    }

    beforeAll(async () => {
      const bundle = await build({
        entryPoints: [join(hostDir, "host.ts")],
        bundle: true,
        format: "esm",
        platform: "browser",
        target: "es2022",
        write: false,
        logLevel: "silent"
      })
      const files: Record<string, { readonly type: string; readonly body: string | Uint8Array }> = {
        "/": { type: "text/html; charset=utf-8", body: readFileSync(join(hostDir, "index.html"), "utf8") },
        "/host.js": { type: "text/javascript; charset=utf-8", body: bundle.outputFiles[0]!.contents }
      }
      http = createServer((request, response) => {
        const file = files[new URL(request.url ?? "/", "http://127.0.0.1").pathname]
        if (!file) {
          response.writeHead(404).end()
          return
        }
        response.writeHead(200, { "content-type": file.type, "cache-control": "no-store" }).end(file.body)
      })
      await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))

      server = await startServer(["--backend", "host"])
      // A temporary computer made by the model before it opened the dashboard: the tool result
      // the host hands the app lists it.
      const warm = await server.call("sandbox_exec", { command: "true" })
      assert.isFalse(warm.isError, warm.text)

      browser = await chromium.launch({
        executablePath: chromiumPath,
        args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
      })
      page = await browser.newPage({ viewport: { width: 1120, height: 800 }, deviceScaleFactor: 1 })
      page.on("pageerror", (error) => pageErrors.push(error.message))
      page.on("request", (request) => requests.push(request.url()))
      await page.exposeFunction("mcpListTools", async () => (await server.client.listTools()).tools)
      await page.exposeFunction("mcpReadResource", async (uri: string) => {
        const { contents } = await server.client.readResource({ uri })
        const content = contents[0]
        if (!content || !("text" in content)) throw new Error(`resource ${uri} has no text`)
        return { text: content.text, mimeType: content.mimeType ?? "" }
      })
      await page.exposeFunction("mcpCallTool", async (name: string, args: Record<string, unknown>) => {
        relayed.push({ name, args })
        return (await server.client.callTool({ name, arguments: args }, undefined, { timeout: 300_000 })) as CallToolResult
      })
      const { port } = http.address() as AddressInfo
      origin = `http://127.0.0.1:${port}`
      await page.goto(`${origin}/`)
      const handle = await page.waitForSelector("iframe[data-testid=app-frame]")
      const frame = await handle.contentFrame()
      assert.isNotNull(frame)
      app = frame!
    }, 120_000)

    afterAll(async () => {
      await browser?.close().catch(() => undefined)
      await server?.client.close().catch(() => undefined)
      await new Promise((resolve) => (http ? http.close(resolve) : resolve(undefined)))
    })

    it("serves one self-contained page", async () => {
      const { contents } = await server.client.readResource({ uri: "ui://kilntainers/computers" })
      const content = contents[0] as { text: string; mimeType: string; _meta: any }
      assert.strictEqual(content.mimeType, "text/html;profile=mcp-app")
      assert.deepEqual(content._meta.ui.csp, {})
      const html = content.text
      assert.include(html, `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline';`)
      // one inline script and one inline style; nothing else refers to anything outside the page
      assert.lengthOf(html.match(/<script\b/g) ?? [], 1)
      assert.include(html, "<script>")
      assert.lengthOf(html.match(/<style\b/g) ?? [], 1)
      const markup = html.replace(/<script>[\s\S]*?<\/script>|<style>[\s\S]*?<\/style>/g, "")
      assert.notMatch(markup, /<link\b|<img\b|\bsrc\s*=|\bhref\s*=/i)
      console.error(`dashboard page: ${Buffer.byteLength(html)} bytes`)
    })

    it("initializes over the MCP Apps protocol and shows the inventory from the tool result", async () => {
      await until("the app to initialize", () => page.evaluate(() => window.dashboardHost?.initialized === true || window.dashboardHostError !== undefined), (v) => v)
      assert.isUndefined(await page.evaluate(() => window.dashboardHostError))
      const version = await page.evaluate(() => window.dashboardHost!.bridge.getAppVersion())
      assert.deepEqual(version, { name: "kilntainers-dashboard", version: "0.1.0" })
      await until("the inventory", () => count(tid("computer-row")), (n) => n >= 1)
      assert.strictEqual(await text(tid("computer-kind")), "temporary")
      assert.strictEqual(await text(tid("computer-state")), "running")
      // the iframe really is sandboxed without same-origin access
      assert.strictEqual(await page.getAttribute("iframe[data-testid=app-frame]", "sandbox"), "allow-scripts")
      assert.strictEqual(await app.evaluate(() => window.origin), "null")
    })

    it("creates a permanent computer from the create bar", async () => {
      await app.fill(tid("create-id"), computerId)
      await app.uncheck(tid("create-temporary"))
      await app.click(tid("create"))
      await app.locator(row(computerId)).waitFor({ timeout: 60_000 })
      await until("the new computer to be running", () => text(`${row(computerId)} ${tid("computer-state")}`), (s) => s === "running")
      assert.strictEqual(await text(`${row(computerId)} ${tid("computer-kind")}`), "permanent")
      assert.deepInclude(relayed, { name: "computer_create", args: { computer_id: computerId, temporary: false } })
      // the new computer is the terminal's target and the processes pane's
      assert.strictEqual(await app.inputValue(tid("terminal-target")), computerId)
      const listed = await server.call("computer_list", {})
      assert.isTrue(listed.structured.computers.some((c: any) => c.computer_id === computerId && !c.temporary))
    }, 90_000)

    it("runs a command in the terminal and shows its output and exit footer", async () => {
      await app.fill(tid("terminal-command"), "echo hello-dashboard; uname -s; echo oops >&2")
      await app.press(tid("terminal-command"), "Control+Enter")
      const output = await until("the command's output", () => text(tid("terminal-output")), (t) => t?.includes("[exit 0") === true)
      assert.include(output, `${computerId} $ echo hello-dashboard`)
      assert.include(output, "hello-dashboard\nLinux\n")
      assert.include(output, "oops\n")
      assert.match(output!, /\[exit 0 · \d+ ms\]/)
      assert.deepInclude(relayed, {
        name: "sandbox_exec",
        args: { computer_id: computerId, command: "echo hello-dashboard; uname -s; echo oops >&2", temporary: false }
      })
      // a failing command: its exit code in the footer; the Run button works too
      await app.fill(tid("terminal-command"), "exit 3")
      await app.click(tid("terminal-run"))
      await until("the failing command's footer", () => text(tid("terminal-output")), (t) => /\[exit 3 · \d+ ms\]/.test(t ?? ""))
    }, 60_000)

    it("shows a background process as running in the processes pane", async () => {
      const spawned = await server.call("spawn", { command: "sleep 300", background: true, computer_id: computerId, temporary: false })
      assert.isFalse(spawned.isError, spawned.text)
      // the process handle: `pid` (this release; 0.1 also had it as `id`)
      const pid = spawned.structured.pid as string
      assert.match(pid, /^p\d+$/)
      const processRow = `${tid("process-row")}[data-process-id="${pid}"]`
      // the periodic refresh picks it up without any click
      await until("the process in the processes pane", () => text(`${processRow} ${tid("process-status")}`), (s) => s === "running")
      assert.include(await text(processRow), "sleep 300")
      // the row shows computer_list's live process count
      const listed = await server.call("computer_list", {})
      const live: number = listed.structured.computers.find((c: any) => c.computer_id === computerId).processes
      await until("the process count on the row", () => text(`${row(computerId)} ${tid("computer-meta")}`), (m) =>
        m?.endsWith(` · ${live} ${live === 1 ? "process" : "processes"}`) === true)
      await screenshot("dashboard.png")

      // Restart: the computer stays, its processes end
      await app.click(`${row(computerId)} ${tid("computer-restart")}`)
      await until("the process to end after the restart", () => text(`${processRow} ${tid("process-status")}`), (s) => s !== null && s !== "running", 60_000)
      await until("the computer to be running again", () => text(`${row(computerId)} ${tid("computer-state")}`), (s) => s === "running")
      assert.strictEqual(await count(row(computerId)), 1)
      assert.deepInclude(relayed, { name: "computer_restart", args: { computer_id: computerId } })
      assert.isTrue(await app.locator(tid("error")).isHidden(), `no error shown: ${await text(tid("error-text"))}`)
    }, 90_000)

    it("shows the pool, a computer's warning and recent activity only while a result carries them", async () => {
      const listed = await server.call("computer_list", {})
      const warning = `<img src=x onerror="document.title='owned'"> lease ends in 5 minutes`
      const result = {
        content: [{ type: "text" as const, text: "{}" }],
        structuredContent: {
          ...listed.structured,
          computers: listed.structured.computers.map((c: any) => (c.computer_id === computerId ? { ...c, warning } : c)),
          pool: { size: 4, ready: 2, starting: 1, handedOut: 1 },
          audit: [{ time: "2026-11-30T10:00:00.000Z", kind: "process.start", summary: "<b>sleep 300</b>", computer_id: computerId }]
        }
      }
      // The periodic refresh (computer_list has none of these yet) replaces them within seconds:
      // the host sends the result again until all three are seen together.
      await until("the pool, the warning and the activity", async () => {
        await page.evaluate((r) => window.dashboardHost!.sendToolResult(r), result)
        await sleep(200)
        return [await text(tid("pool")), await text(`${row(computerId)} ${tid("computer-warning")}`), await text(tid("activity-entry"))]
      }, ([pool, shown, activity]) =>
        pool === "pool 2/4 ready · 1 starting · 1 handed out" && shown === warning && activity?.endsWith(`process.start${computerId}: <b>sleep 300</b>`) === true)
      await screenshot("dashboard-pool-activity.png")
      // untrusted text stays text
      assert.strictEqual(await count("img, b"), 0)
      assert.notStrictEqual(await app.evaluate(() => document.title), "owned")
      // the next refresh's result has neither pool nor warning: they are hidden again; its activity is
      // the server's own (the audit log's recent entries of this session's computers)
      await until("the refresh to hide them and show the server's activity", async () => [
        await app.locator(tid("pool")).isHidden(),
        await app.locator(`${row(computerId)} ${tid("computer-warning")}`).isHidden(),
        ((await app.locator(tid("activity-entry")).allTextContents()).join("\n"))
      ], ([pool, warning, activity]) =>
        pool === true && warning === true && typeof activity === "string" && !activity.includes("<b>") && / started: /.test(activity))
    }, 60_000)

    it("follows the host's theme", async () => {
      assert.strictEqual(await app.evaluate(() => document.documentElement.dataset.theme), "light")
      await page.evaluate(() => window.dashboardHost!.setTheme("dark"))
      await until("the dark theme", () => app.evaluate(() => document.documentElement.dataset.theme), (t) => t === "dark")
      await screenshot("dashboard-dark.png")
      await page.evaluate(() => window.dashboardHost!.setTheme("light"))
      await until("the light theme", () => app.evaluate(() => document.documentElement.dataset.theme), (t) => t === "light")
    })

    it("shows tool errors in the error line", async () => {
      await app.fill(tid("create-id"), "Not A Valid Id!")
      await app.click(tid("create"))
      const error = await until("the error line", () => app.locator(tid("error")).isVisible(), (v) => v)
      assert.isTrue(error)
      assert.match((await text(tid("error-text")))!, /InvalidInput|invalid/i)
      await app.click(tid("error-dismiss"))
      assert.isTrue(await app.locator(tid("error")).isHidden())
    })

    it("ignores messages that do not come from its host", async () => {
      const before = relayed.length
      const ignoredBefore = Number(await app.evaluate(() => document.documentElement.getAttribute("data-ignored-messages") ?? "0"))
      // two sibling frames, one of an opaque origin and one of the host's own origin, forge host
      // messages to the app (303 each) and app messages to the host
      await page.evaluate((target) => window.dashboardHost!.addForeignFrames(target), computerId)
      // the app's own window posting to itself is not its host either
      await app.evaluate(() =>
        window.postMessage({
          jsonrpc: "2.0",
          method: "ui/notifications/tool-result",
          params: { content: [], structuredContent: { computers: [{ computer_id: "forged-by-self", state: "running" }], count: 1 } }
        }, "*")
      )
      const ignored = await until(
        "the forged messages to be dropped",
        () => app.evaluate(() => Number(document.documentElement.getAttribute("data-ignored-messages") ?? "0")),
        (n) => n >= ignoredBefore + 607
      )
      assert.isAtLeast(ignored, ignoredBefore + 607)
      await sleep(5_000) // more than one refresh period
      assert.strictEqual(await count(`${tid("computer-row")}[data-computer-id^="forged"]`), 0)
      assert.strictEqual(await count(row(computerId)), 1)
      assert.strictEqual(await app.evaluate(() => document.documentElement.dataset.theme), "light")
      assert.notStrictEqual(await text(tid("status")), "closed")
      assert.isFalse(await app.locator(tid("terminal-run")).isDisabled())
      const since = relayed.slice(before)
      assert.isTrue(since.every((c) => c.name === "computer_list" || c.name === "ps"), JSON.stringify(since))
      assert.isFalse(since.some((c) => JSON.stringify(c.args).includes("forged")))
      assert.isAbove(since.length, 0, "the app kept refreshing")
      assert.isFalse(await page.evaluate(() => window.dashboardHost!.calls.some((c) => c.name === "computer_delete")))
    }, 30_000)

    it("factory-resets a computer after an in-page confirmation", async () => {
      const written = await server.call("file_write", { path: "marker.txt", content: "before reset", computer_id: computerId, temporary: false })
      assert.isFalse(written.isError, written.text)
      await app.click(`${row(computerId)} ${tid("computer-reset")}`)
      await app.locator(tid("confirm-dialog")).waitFor({ state: "visible" })
      assert.include(await text(tid("confirm-text")), `Factory-reset '${computerId}'?`)
      await app.click(tid("confirm-ok"))
      await until("the reset call", async () => relayed.some((c) => c.name === "computer_factory_reset"), (v) => v)
      assert.deepInclude(relayed, { name: "computer_factory_reset", args: { computer_id: computerId } })
      // the row's buttons, disabled before the call went out, come back when it has finished
      await until("the reset to finish", () => app.locator(`${row(computerId)} ${tid("computer-reset")}`).isEnabled(), (v) => v, 60_000)
      await until("the computer to be running again", () => text(`${row(computerId)} ${tid("computer-state")}`), (s) => s === "running")
      assert.isTrue(await app.locator(tid("error")).isHidden(), `no error shown: ${await text(tid("error-text"))}`)
      const read = await server.call("file_read", { path: "marker.txt", computer_id: computerId, temporary: false })
      assert.isTrue(read.isError, `the file survived the reset: ${read.text}`)
      assert.match(read.text, /no such file|not found|does not exist/i)
    }, 90_000)

    it("deletes a computer after an in-page confirmation", async () => {
      await app.click(`${row(computerId)} ${tid("computer-delete")}`)
      await app.locator(tid("confirm-dialog")).waitFor({ state: "visible" })
      assert.include(await text(tid("confirm-text")), computerId)
      await screenshot("dashboard-confirm.png")
      // cancelling keeps it
      await app.click(tid("confirm-cancel"))
      await app.locator(tid("confirm-dialog")).waitFor({ state: "hidden" })
      assert.strictEqual(await count(row(computerId)), 1)
      assert.isFalse(relayed.some((c) => c.name === "computer_delete"))

      await app.click(`${row(computerId)} ${tid("computer-delete")}`)
      await app.click(tid("confirm-ok"))
      await app.locator(row(computerId)).waitFor({ state: "detached", timeout: 60_000 })
      assert.deepInclude(relayed, { name: "computer_delete", args: { computer_id: computerId } })
      const listed = await server.call("computer_list", {})
      assert.isFalse(listed.structured.computers.some((c: any) => c.computer_id === computerId))
    }, 90_000)

    it("answers ui/resource-teardown and stops calling tools", async () => {
      const answer = await page.evaluate(() => window.dashboardHost!.bridge.teardownResource({}))
      assert.deepEqual(answer, {})
      await until("the app to close", () => text(tid("status")), (s) => s === "closed")
      const after = relayed.length
      await sleep(5_000)
      assert.strictEqual(relayed.length, after, "no tool calls after teardown")
      assert.deepEqual(pageErrors, [])
      // the browser fetched the host page and its script, nothing for the app
      assert.deepEqual(requests.filter((url) => !url.startsWith(`${origin}/`)), [])
    }, 30_000)
  }
)
