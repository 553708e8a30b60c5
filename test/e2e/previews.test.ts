/**
 * Preview URLs end to end, through the MCP SDK: a web server inside a computer that has no network
 * (`python3 -m http.server`, and a WebSocket echo server in python's stdlib) is reached from this
 * machine through the URL computer_expose answers — on the preview origin only, and only while the
 * URL is valid: a changed signature, an expired URL and a revoked one are refused, the /mcp origin
 * refuses preview paths, and the preview origin serves nothing else. The server's credentials
 * (Authorization) never reach the computer. Host over Streamable HTTP, Docker over stdio.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { assert, it } from "vitest"
import { createHash } from "node:crypto"
import { existsSync } from "node:fs"
import WebSocket from "ws"
import { binPath, startHttpServer, startServer } from "../support/McpHarness.js"
import { COMPUTER_IMAGE, engineWorks, requirement } from "../support/Docker.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

type Call = (name: string, args: Record<string, unknown>) => Promise<{ isError: boolean; structured: any; text: string }>

/** HTTP on 8001: GET /headers answers the request's headers as JSON; an Upgrade: websocket echoes text frames. */
const ECHO_SERVER = String.raw`
import base64, hashlib, json, socket, threading
def serve(c):
    data = b""
    while b"\r\n\r\n" not in data:
        more = c.recv(4096)
        if not more: return c.close()
        data += more
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
    if headers.get("upgrade", "").lower() != "websocket":
        body = json.dumps({"path": lines[0].split(" ")[1], "headers": headers}).encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        return c.close()
    accept = base64.b64encode(hashlib.sha1((headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    buf = rest
    def need(n):
        nonlocal buf
        while len(buf) < n:
            more = c.recv(4096)
            if not more: raise EOFError
            buf += more
        out, buf = buf[:n], buf[n:]
        return out
    try:
        while True:
            b0, b1 = need(2)
            n = b1 & 127
            if n == 126: n = int.from_bytes(need(2), "big")
            elif n == 127: n = int.from_bytes(need(8), "big")
            mask = need(4)
            payload = bytes(x ^ mask[i % 4] for i, x in enumerate(need(n)))
            if b0 & 15 == 8: return c.close()
            reply = b"echo:" + payload
            c.sendall(bytes([0x81, len(reply)]) + reply if len(reply) < 126 else bytes([0x81, 126]) + len(reply).to_bytes(2, "big") + reply)
    except EOFError:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8001))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
`

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Starts both servers inside the computer and waits (bounded) until both accept connections. */
const startServers = async (call: Call, computer: string) => {
  const setup = await call("sandbox_exec", {
    computer_id: computer,
    command: "mkdir -p site && echo 'hello from inside' > site/hello.txt && head -c 5000000 /dev/urandom > site/big.bin && printf '%s' \"$ECHO\" > echo.py",
    env: { ECHO: ECHO_SERVER }
  })
  assert.strictEqual(setup.structured.exit_code, 0, setup.text)
  for (const command of ["cd site && exec python3 -m http.server 8000 --bind 127.0.0.1", "exec python3 echo.py"]) {
    const started = await call("spawn", { computer_id: computer, command, background: true })
    assert.isFalse(started.isError, started.text)
  }
  const probe = "import socket,time\nfor i in range(100):\n  try:\n    [socket.create_connection(('127.0.0.1',p)).close() for p in (8000,8001)]; break\n  except OSError: time.sleep(0.2)\nelse: raise SystemExit(1)"
  const ready = await call("sandbox_exec", { computer_id: computer, args: ["python3", "-c", probe] })
  assert.strictEqual(ready.structured.exit_code, 0, ready.text)
  // No network of its own: nothing outside is reachable from inside.
  const offline = await call("sandbox_exec", { computer_id: computer, args: ["python3", "-c", "import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)"] })
  assert.notStrictEqual(offline.structured.exit_code, 0)
}

const echoOnce = (url: string) =>
  new Promise<string>((resolve, reject) => {
    const socket = new WebSocket(url)
    const timer = setTimeout(() => reject(new Error("no echo within 30 s")), 30_000)
    socket.on("open", () => socket.send("ping through the relay"))
    socket.on("message", (data) => {
      clearTimeout(timer)
      resolve(String(data))
      socket.close()
    })
    socket.on("error", (error) => {
      clearTimeout(timer)
      reject(error)
    })
  })

/** The whole story on one computer; `mcpOrigin` is the /mcp server's origin when it is served over HTTP. */
const story = async (call: Call, mcpOrigin?: string) => {
  const created = await call("computer_create", {})
  assert.isFalse(created.isError, created.text)
  const computer = created.structured.computer_id as string
  await startServers(call, computer)

  const exposed = await call("computer_expose", { computer_id: computer, port: 8000 })
  assert.isFalse(exposed.isError, exposed.text)
  const url = exposed.structured.url as string
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/p\/[A-Za-z0-9_-]{22}\.[0-9a-z]+\.[A-Za-z0-9_-]{43}\/$/)
  const page = await fetch(`${url}hello.txt`)
  assert.strictEqual(page.status, 200)
  assert.strictEqual(await page.text(), "hello from inside\n")
  assert.strictEqual(page.headers.get("referrer-policy"), "no-referrer")
  // Many relay windows' worth, intact.
  const big = Buffer.from(await (await fetch(`${url}big.bin`)).arrayBuffer())
  const inside = await call("sandbox_exec", { computer_id: computer, command: "sha256sum site/big.bin | cut -d' ' -f1" })
  assert.strictEqual(createHash("sha256").update(big).digest("hex"), inside.structured.stdout.trim())
  // Without its trailing slash, the preview redirects to it (relative links resolve under the prefix).
  const bare = await fetch(url.slice(0, -1), { redirect: "manual" })
  assert.strictEqual(bare.status, 308)

  const origin = new URL(url).origin
  const tampered = url.replace(/([A-Za-z0-9_-])\/$/, (_, last: string) => `${last === "A" ? "B" : "A"}/`)
  assert.strictEqual((await fetch(`${tampered}hello.txt`)).status, 403)
  assert.strictEqual((await fetch(`${origin}/mcp`, { method: "POST", body: "{}" })).status, 404)
  if (mcpOrigin !== undefined) {
    const onMcp = await fetch(`${mcpOrigin}${new URL(url).pathname}hello.txt`)
    assert.strictEqual(onMcp.status, 403)
    assert.notInclude(await onMcp.text(), "hello from inside")
  }

  const echo = await call("computer_expose", { computer_id: computer, port: 8001, lifetime_s: 600 })
  const echoUrl = echo.structured.url as string
  const seen = await fetch(`${echoUrl}headers`, { headers: { authorization: "Bearer server-secret", "x-app": "kept" } })
  const { path, headers } = (await seen.json()) as { path: string; headers: Record<string, string> }
  assert.strictEqual(path, "/headers")
  assert.strictEqual(headers["x-app"], "kept")
  assert.isUndefined(headers["authorization"], "the server's credentials stay out")
  assert.strictEqual(headers["host"], "127.0.0.1:8001")
  assert.strictEqual(await echoOnce(`${echoUrl.replace(/^http/, "ws")}socket`), "echo:ping through the relay")

  const revoked = await call("computer_unexpose", { preview: echoUrl })
  assert.isFalse(revoked.isError, revoked.text)
  assert.strictEqual((await fetch(`${echoUrl}headers`)).status, 403)
  await echoOnce(`${echoUrl.replace(/^http/, "ws")}socket`).then(
    () => assert.fail("a revoked preview still echoes"),
    (error: Error) => assert.match(error.message, /403/)
  )
  const again = await call("computer_unexpose", { preview: echo.structured.preview_id })
  assert.isTrue(again.isError)

  const brief = await call("computer_expose", { computer_id: computer, port: 8000, lifetime_s: 2 })
  assert.strictEqual((await fetch(`${brief.structured.url}hello.txt`)).status, 200)
  await sleep(3500)
  assert.strictEqual((await fetch(`${brief.structured.url}hello.txt`)).status, 403)

  // A port nothing listens on: the preview answers, the computer's relay refuses.
  const closed = await call("computer_expose", { computer_id: computer, port: 8009 })
  const refused = await fetch(`${closed.structured.url}`)
  assert.strictEqual(refused.status, 502)
  // The first URL still works after all that.
  assert.strictEqual((await fetch(`${url}hello.txt`)).status, 200)
}

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI")("preview URLs (host, Streamable HTTP)", () => {
  it("a web server in a computer without network is previewed, signed, expiring, revocable, and only on the preview origin", async () => {
    const server = await startHttpServer(["--backend", "host", "--preview-port", "0"])
    const transport = new StreamableHTTPClientTransport(new URL(server.url))
    const client = new Client({ name: "kilntainers-preview-test", version: "1.0.0" })
    try {
      await client.connect(transport)
      const call: Call = async (name, args) => {
        const result = await client.callTool({ name, arguments: args })
        return { isError: result.isError === true, structured: result.structuredContent as any, text: JSON.stringify(result.content) }
      }
      await story(call, `http://127.0.0.1:${server.port}`)
    } finally {
      await client.close().catch(() => {})
      await server.stop()
    }
  }, 180_000)
})

// The computer image: the test image's python is python3-minimal, without http.server.
describeIf(engineWorks("docker", COMPUTER_IMAGE) && existsSync(binPath), `${requirement("docker")}, ${COMPUTER_IMAGE} and a built CLI`)("preview URLs (Docker, stdio)", () => {
  it("a web server in a container without network is previewed, signed, expiring, revocable, and only on the preview origin", async () => {
    const server = await startServer(["--backend", "docker", "--image", COMPUTER_IMAGE, "--preview-port", "0"])
    try {
      await story(server.call)
    } finally {
      await server.client.close()
    }
  }, 240_000)
})
