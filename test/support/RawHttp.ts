/** A raw POST to a server's /mcp on 127.0.0.1, for what the SDK client would never send. */
import { type ClientRequest, type IncomingHttpHeaders, request } from "node:http"

export interface RawAnswer {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly body: string
}

/** POSTs to /mcp with MCP's content headers (plus `headers`); `send` writes and ends the body. */
export const postMcp = (port: number, headers: Record<string, string>, send: (req: ClientRequest) => void) =>
  new Promise<RawAnswer>((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port,
      path: "/mcp",
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers }
    }, (res) => {
      let data = ""
      res.on("data", (chunk) => (data += chunk))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: data }))
    })
    req.on("error", reject)
    send(req)
  })

/** POSTs a JSON body to /mcp. */
export const postJson = (port: number, headers: Record<string, string>, body: unknown) =>
  postMcp(port, headers, (req) => req.end(JSON.stringify(body)))
