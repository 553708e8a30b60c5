/**
 * A minimal MCP Apps host page for the dashboard's browser test (bundled with esbuild at test
 * time). It does what a chat host does with a tool that has a UI resource: lists the tools, finds
 * `computer_dashboard`'s `_meta.ui.resourceUri`, reads that resource, calls the tool, renders the
 * HTML in a sandboxed iframe (`sandbox="allow-scripts"`, so the app gets an opaque origin) and
 * connects an ext-apps `AppBridge` to it over a `PostMessageTransport` bound to that iframe's
 * window. The app's `tools/call` requests are relayed to the real kilntainers server through
 * functions the test exposes on `window` (Playwright `exposeFunction` → the MCP SDK `Client`); the
 * `computer_dashboard` result goes to the app once it has sent `ui/notifications/initialized`.
 */
import { AppBridge, getToolUiResourceUri, PostMessageTransport, RESOURCE_MIME_TYPE } from "@modelcontextprotocol/ext-apps/app-bridge"
import type { CallToolResult, Tool } from "@modelcontextprotocol/client"

export interface DashboardHost {
  readonly bridge: AppBridge
  readonly iframe: HTMLIFrameElement
  /** The tool calls the app made through the bridge, in order. */
  readonly calls: Array<{ readonly name: string; readonly arguments: Record<string, unknown> }>
  initialized: boolean
  /** Changes the host context (theme …): the bridge sends `ui/notifications/host-context-changed`. */
  readonly setTheme: (theme: "light" | "dark") => void
  /**
   * Adds two unrelated frames that post forged MCP Apps messages to the app and to this page: a
   * sandboxed one (an opaque origin) and a same-origin one (this page's origin, another window).
   */
  readonly addForeignFrames: (target: string) => void
  /** Sends the app a tool result, as the host does for a new `computer_dashboard` call. */
  readonly sendToolResult: (result: CallToolResult) => Promise<void>
}

declare global {
  interface Window {
    mcpListTools: () => Promise<Array<Tool>>
    mcpReadResource: (uri: string) => Promise<{ readonly text: string; readonly mimeType: string }>
    mcpCallTool: (name: string, args: Record<string, unknown>) => Promise<CallToolResult>
    dashboardHost?: DashboardHost
    dashboardHostError?: string
  }
}

const status = (text: string) => {
  const node = document.getElementById("host-status")
  if (node) node.textContent = text
}

const theme = new URLSearchParams(location.search).get("theme") === "dark" ? "dark" : "light"

/** The forged messages a hostile sibling frame sends; none of them may have any effect. */
const foreignScript = (target: string) => `
  const app = parent.frames[0];
  const forgedInventory = { computers: [{ computer_id: "forged-by-foreign-frame", sandbox_id: "x", backend: "evil",
    state: "running", temporary: false, image: "evil", created_at: "", processes: 0 }], count: 1 };
  const toApp = [
    { jsonrpc: "2.0", method: "ui/notifications/tool-result", params: { content: [], structuredContent: forgedInventory } },
    { jsonrpc: "2.0", method: "ui/notifications/host-context-changed", params: { theme: "dark" } },
    { jsonrpc: "2.0", id: "forged-teardown", method: "ui/resource-teardown", params: {} }
  ];
  for (let id = 1; id <= 300; id++) {
    toApp.push({ jsonrpc: "2.0", id, result: { content: [], structuredContent: forgedInventory } });
  }
  for (const message of toApp) app.postMessage(message, "*");
  parent.postMessage({ jsonrpc: "2.0", id: 424242, method: "tools/call",
    params: { name: "computer_delete", arguments: { computer_id: ${JSON.stringify(target)} } } }, "*");
  parent.postMessage({ jsonrpc: "2.0", method: "ui/notifications/initialized", params: {} }, "*");
  parent.postMessage({ foreignDone: true }, "*");
`

const start = async () => {
  document.documentElement.dataset.theme = theme
  const tools = await window.mcpListTools()
  const tool = tools.find((t) => t.name === "computer_dashboard")
  if (!tool) throw new Error("the server has no computer_dashboard tool")
  const uri = getToolUiResourceUri(tool)
  if (!uri) throw new Error("computer_dashboard has no _meta.ui.resourceUri")
  const resource = await window.mcpReadResource(uri)
  if (resource.mimeType !== RESOURCE_MIME_TYPE) throw new Error(`unexpected UI resource type ${resource.mimeType}`)
  // What the model's call returned: the app gets it after it has initialized.
  const toolResult = await window.mcpCallTool("computer_dashboard", {})

  const iframe = document.createElement("iframe")
  iframe.setAttribute("sandbox", "allow-scripts")
  iframe.setAttribute("data-testid", "app-frame")
  iframe.title = tool.title ?? tool.name
  document.getElementById("frame-slot")!.append(iframe)

  const hostContext = {
    theme: theme as "light" | "dark",
    platform: "web" as const,
    displayMode: "inline" as const,
    availableDisplayModes: ["inline" as const],
    locale: "en-US",
    containerDimensions: { maxHeight: 2000, width: iframe.clientWidth },
    toolInfo: { tool }
  }
  const bridge = new AppBridge(
    null,
    { name: "kilntainers-test-host", version: "1.0.0" },
    { serverTools: {}, logging: {} },
    { hostContext }
  )
  const calls: DashboardHost["calls"] = []
  bridge.oncalltool = async (params) => {
    const args = params.arguments ?? {}
    calls.push({ name: params.name, arguments: args })
    return window.mcpCallTool(params.name, args)
  }
  // (The on* setters rather than addEventListener: ext-apps 1.7's .d.ts files import "./events"
  // without an extension, which NodeNext resolution cannot follow, so the inherited methods are untyped.)
  bridge.onsizechange = ({ height }: { height?: number | undefined }) => {
    if (height !== undefined) iframe.style.height = `${Math.min(Math.max(height, 200), 2000)}px`
  }
  const host: DashboardHost = {
    bridge,
    iframe,
    calls,
    initialized: false,
    setTheme: (next) => {
      document.documentElement.dataset.theme = next
      bridge.setHostContext({ ...hostContext, theme: next })
    },
    addForeignFrames: (target) => {
      for (const sandboxed of [true, false]) {
        const foreign = document.createElement("iframe")
        if (sandboxed) foreign.setAttribute("sandbox", "allow-scripts")
        foreign.setAttribute("data-testid", "foreign-frame")
        foreign.srcdoc = `<!doctype html><script>${foreignScript(target)}</script>`
        document.getElementById("foreign-slot")!.append(foreign)
      }
    },
    sendToolResult: (result) => bridge.sendToolResult(result)
  }
  bridge.oninitialized = () => {
    host.initialized = true
    status("· app initialized")
    void bridge.sendToolInput({ arguments: {} })
    void bridge.sendToolResult(toolResult)
  }
  // Listen before the app's document exists, so its ui/initialize cannot be missed. The iframe's
  // WindowProxy stays the same when srcdoc navigates it.
  await bridge.connect(new PostMessageTransport(iframe.contentWindow!, iframe.contentWindow!))
  iframe.srcdoc = resource.text
  window.dashboardHost = host
  status("· app loading")
}

start().catch((error: unknown) => {
  window.dashboardHostError = error instanceof Error ? error.message : String(error)
  status(`· host failed: ${window.dashboardHostError}`)
})
