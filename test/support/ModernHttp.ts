/**
 * Raw MCP 2026-07-28 requests over HTTP, for what the SDK's Client does not expose (the Tasks
 * extension's methods): each request carries its protocol version, capabilities and client in
 * `_meta`, and the standard headers (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`).
 */
const nameFields: Record<string, string> = { "tools/call": "name", "tasks/get": "taskId", "tasks/cancel": "taskId", "tasks/update": "taskId" }

export interface ModernAnswer {
  readonly status: number
  readonly result?: any
  readonly error?: { readonly code: number; readonly message: string }
}

export interface ModernOptions {
  readonly token?: string
  /** Declare the Tasks extension in the request's capabilities. */
  readonly tasks?: boolean
  /** Extra `_meta` (the session key). */
  readonly meta?: Record<string, unknown>
}

let nextId = 0

/** One request; its answer is read from a JSON body, or from the last message of an SSE stream. */
export const modernRequest = async (url: string, method: string, params: Record<string, unknown>, options: ModernOptions = {}): Promise<ModernAnswer> => {
  const body = {
    jsonrpc: "2.0",
    id: ++nextId,
    method,
    params: {
      ...params,
      _meta: {
        ...options.meta,
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": options.tasks ? { extensions: { "io.modelcontextprotocol/tasks": {} } } : {},
        "io.modelcontextprotocol/clientInfo": { name: "modern-raw", version: "1" }
      }
    }
  }
  const field = nameFields[method]
  const response = await fetch(url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2026-07-28",
      "mcp-method": method,
      ...(field !== undefined && typeof params[field] === "string" ? { "mcp-name": params[field] as string } : {}),
      ...(options.token === undefined ? {} : { authorization: `Bearer ${options.token}` })
    },
    body: JSON.stringify(body)
  })
  const text = await response.text()
  const json = (response.headers.get("content-type") ?? "").startsWith("text/event-stream")
    ? JSON.parse(text.split("\n").filter((line) => line.startsWith("data: ")).map((line) => line.slice(6)).pop() ?? "{}")
    : text === "" ? {} : JSON.parse(text)
  return { status: response.status, result: json.result, error: json.error }
}
