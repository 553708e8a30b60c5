/**
 * `pods/exec` of the Kubernetes fake: the WebSocket upgrade and the kubelet's channel protocol.
 *
 * The client offers subprotocols; the fake takes the first it supports of `v5.channel.k8s.io` and
 * `v4.channel.k8s.io` (a test can take v5 away, as an older cluster would). Every binary message
 * starts with its channel: 0 stdin (client → pod), 1 stdout, 2 stderr, 3 the final status (a
 * metav1.Status in JSON: Success, or NonZeroExitCode with the code as a cause), 4 a terminal
 * resize (`{"Width","Height"}`); v5 adds 255, the close of a channel (`[255, 0]`: stdin is done),
 * which v4 has no way to say. At the start each open output channel gets an empty message, as the
 * kubelet's stream does. Output a slow client does not read holds the pod's command back.
 * A client that goes closes only the streams: the command runs on (it sees EOF on stdin, or a broken
 * pipe when it writes), as on a real cluster, where the runtime does not kill an exec's process when
 * its client disconnects (kubernetes/kubernetes#89031, kubernetes/kubectl#1076, runc#3359); a
 * daemon that left its exec's session and stdio (kt-agent --daemonize) is untouched either way.
 *
 * Query: `command` (repeated, the argv), `stdin`, `stdout`, `stderr`, `tty`, `container`.
 */
import type { IncomingMessage } from "node:http"
import type { Duplex } from "node:stream"
import { type WebSocket, WebSocketServer } from "ws"
import type { PodExec } from "./PodRuntime.js"

export const PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"] as const

export interface ExecTarget {
  /** Starts the command in the pod; rejects (a Status's words) when the pod cannot run it. */
  readonly start: (argv: ReadonlyArray<string>, tty: boolean) => Promise<PodExec>
}

const STDIN = 0
const STDOUT = 1
const STDERR = 2
const ERROR = 3
const RESIZE = 4
const CLOSE = 255
/** Output held back while this much is queued to the client. */
const HIGH_WATER = 1 << 20

const frame = (channel: number, data: Buffer | string) => Buffer.concat([Buffer.from([channel]), Buffer.from(data)])

const status = (code: number | undefined, argv: ReadonlyArray<string>) =>
  code === 0
    ? { metadata: {}, status: "Success" }
    : {
      metadata: {},
      status: "Failure",
      message: code === undefined
        ? "error executing command: the pod went away"
        : `command terminated with non-zero exit code: error executing command [${argv.join(" ")}], exit code ${code}`,
      reason: code === undefined ? "InternalError" : "NonZeroExitCode",
      details: { causes: [{ reason: "ExitCode", message: String(code ?? 137) }] }
    }

export class FakeKubeExec {
  /** The subprotocols this "cluster" speaks, most preferred first. */
  protocols: ReadonlyArray<string> = PROTOCOLS
  private readonly server = new WebSocketServer({
    noServer: true,
    perMessageDeflate: false,
    handleProtocols: (offered) => this.protocols.find((p) => offered.has(p)) ?? false
  })
  /** Every exec, with the subprotocol it got (tests look). */
  readonly sessions: Array<{ readonly argv: ReadonlyArray<string>; readonly protocol: string }> = []

  /** Takes an upgrade request for an exec; false when it is not one (the caller answers 400). */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, url: URL, target: ExecTarget): void {
    const offered = String(req.headers["sec-websocket-protocol"] ?? "").split(",").map((p) => p.trim()).filter((p) => p !== "")
    const protocol = this.protocols.find((p) => offered.includes(p))
    if (protocol === undefined) {
      socket.end("HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\n\r\nno supported channel protocol offered\n")
      return
    }
    const argv = url.searchParams.getAll("command")
    const tty = url.searchParams.get("tty") === "true" || url.searchParams.get("tty") === "1"
    const wantsStdin = url.searchParams.get("stdin") === "true" || url.searchParams.get("stdin") === "1"
    this.server.handleUpgrade(req, socket, head, (ws) => {
      this.sessions.push({ argv, protocol })
      void this.run(ws, protocol, argv, tty, wantsStdin, target)
    })
  }

  private async run(ws: WebSocket, protocol: string, argv: ReadonlyArray<string>, tty: boolean, wantsStdin: boolean, target: ExecTarget) {
    // What the client sends while the command starts is kept for it, as the kubelet's stream does.
    const early: Array<Buffer> = []
    const keep = (message: Buffer) => void early.push(Buffer.from(message))
    ws.on("message", keep)
    let exec: PodExec
    try {
      exec = await target.start(argv, tty)
    } catch (error) {
      ws.send(frame(ERROR, JSON.stringify({ metadata: {}, status: "Failure", message: String((error as Error).message ?? error), reason: "InternalError" })))
      ws.close(1000)
      return
    }
    const send = (channel: number) => (data: Buffer) => {
      if (ws.readyState !== ws.OPEN) return
      ws.send(frame(channel, data))
      if (ws.bufferedAmount > HIGH_WATER) {
        exec.pause()
        const wait = setInterval(() => {
          if (ws.readyState !== ws.OPEN || ws.bufferedAmount < HIGH_WATER / 2) {
            clearInterval(wait)
            exec.resume()
          }
        }, 5)
      }
    }
    ws.send(frame(STDOUT, ""))
    if (!tty) ws.send(frame(STDERR, ""))
    exec.onStdout(send(STDOUT))
    exec.onStderr(send(tty ? STDOUT : STDERR))
    const take = (data: Buffer) => {
      if (data.length === 0) return
      const channel = data[0]!
      const payload = data.subarray(1)
      if (channel === STDIN && wantsStdin) exec.write(payload)
      else if (channel === RESIZE) {
        try {
          const size = JSON.parse(payload.toString("utf8"))
          exec.resize(Number(size.Width), Number(size.Height))
        } catch {
          // a bad resize is ignored, as the kubelet does
        }
      } else if (channel === CLOSE && protocol.startsWith("v5.") && payload[0] === STDIN) exec.closeStdin()
    }
    ws.off("message", keep)
    for (const data of early.splice(0)) take(data)
    ws.on("message", (message: Buffer) => take(Buffer.from(message)))
    ws.on("close", () => exec.kill())
    const code = await exec.exited
    if (ws.readyState === ws.OPEN) {
      ws.send(frame(ERROR, JSON.stringify(status(code, argv))))
      ws.close(1000)
    }
  }

  close() {
    for (const client of this.server.clients) client.terminate()
    this.server.close()
  }
}
