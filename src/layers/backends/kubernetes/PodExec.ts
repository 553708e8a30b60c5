/**
 * A command in a pod through `pods/exec`, over a WebSocket with the kubelet's channel protocol:
 * `v5.channel.k8s.io` when the cluster speaks it, else `v4.channel.k8s.io`. Every binary message
 * starts with its channel: 0 stdin, 1 stdout, 2 stderr, 3 the final Status (Success, or
 * NonZeroExitCode with the code), 4 a terminal resize; v5 adds 255, closing a channel (stdin's
 * end), which v4 cannot say — so nothing here needs it: the agent's stdin closes with the
 * connection, and the install reads an exact byte count (`head -c`).
 *
 * `ExecProcess` is the command as a child process reads (the agent's start, its connector):
 * stdout a stream whose consumer, when full, pauses the socket (back-pressure reaches the pod),
 * `close` with the exit code once the Status came and the socket closed.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { EventEmitter } from "node:events"
import { PassThrough, Writable } from "node:stream"
import type { SecureContext } from "node:tls"
import WebSocket from "ws"
import type { ProviderError } from "../../../domain/Errors.js"
import type { KubeApi } from "./KubeApi.js"
import { kubeError } from "./KubeError.js"
import { execPath } from "./SandboxObjects.js"

export const PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
const STDIN = 0
const STDOUT = 1
const STDERR = 2
const ERROR = 3
const CLOSE = 255

/**
 * Frames to the cluster go unmasked (a zero mask, which ws then skips): masking protects caches
 * between a browser and a server from a hostile page's bytes, which a server's own client over
 * TLS has none of; it cost a pass over every byte sent (the agent's copy: its whole size per pod).
 */
const noMask = (mask: Buffer) => void mask.fill(0)

/** The exit code a final Status says (0 for Success; undefined when it says something else). */
export const exitCodeOf = (status: string): number | undefined => {
  try {
    const parsed = JSON.parse(status) as { status?: string; reason?: string; details?: { causes?: Array<{ reason?: string; message?: string }> } }
    if (parsed.status === "Success") return 0
    const cause = parsed.details?.causes?.find((c) => c.reason === "ExitCode")
    return parsed.reason === "NonZeroExitCode" && cause?.message !== undefined ? Number(cause.message) : undefined
  } catch {
    return undefined
  }
}

export class ExecProcess extends EventEmitter {
  readonly stdout = new PassThrough({ highWaterMark: 1 << 20 })
  readonly stderr = new PassThrough()
  readonly stdin: Writable
  /** The final Status's text, once it came. */
  status: string | undefined
  /** The subprotocol the cluster chose (set once the socket is open). */
  protocol = ""
  /** The exit code (null: none said), once the socket closed. */
  readonly closed: Promise<number | null>

  constructor(private readonly ws: WebSocket) {
    super()
    this.closed = new Promise((resolve) => this.once("close", (code: number | null) => resolve(code)))
    this.stdin = new Writable({
      write: (chunk: Buffer, _encoding, done) => {
        if (ws.readyState !== WebSocket.OPEN) return done(new Error("the exec's connection is closed"))
        ws.send(Buffer.concat([Buffer.from([STDIN]), chunk]), { binary: true }, (error) => done(error ?? undefined))
      },
      final: (done) => {
        if (this.protocol.startsWith("v5.") && ws.readyState === WebSocket.OPEN) ws.send(Buffer.from([CLOSE, STDIN]), { binary: true })
        done()
      }
    })
    this.stdin.on("error", () => {})
    ws.on("message", (data: Buffer) => {
      if (data.length === 0) return
      const payload = data.subarray(1)
      switch (data[0]) {
        case STDOUT:
          if (payload.length > 0 && !this.stdout.write(payload)) ws.pause()
          break
        case STDERR:
          if (payload.length > 0) this.stderr.write(payload)
          break
        case ERROR:
          this.status = (this.status ?? "") + payload.toString("utf8")
          break
      }
    })
    this.stdout.on("drain", () => ws.resume())
    ws.on("error", (error) => this.emit("error", error))
    ws.on("close", () => {
      this.stdout.end()
      this.stderr.end()
      const code = this.status === undefined ? undefined : exitCodeOf(this.status)
      this.emit("close", code ?? null, code === undefined ? "SIGKILL" : null)
    })
  }

  kill(): boolean {
    this.ws.terminate()
    return true
  }

  /** Sends a terminal size (channel 4). */
  resize(cols: number, rows: number) {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(Buffer.concat([Buffer.from([4]), Buffer.from(JSON.stringify({ Width: cols, Height: rows }))]))
  }
}

/** Opens a command in a pod; the socket closes with the Scope. */
export const open = (
  api: KubeApi,
  namespace: string,
  pod: string,
  argv: ReadonlyArray<string>,
  options: { readonly stdin: boolean; readonly tty: boolean }
): Effect.Effect<ExecProcess, ProviderError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.flatMap(api.credentials, (auth) =>
      Effect.async<ExecProcess, ProviderError>((resume) => {
        const url = api.wsUrl(execPath(namespace, pod))
        for (const arg of argv) url.searchParams.append("command", arg)
        url.searchParams.set("stdin", String(options.stdin))
        url.searchParams.set("stdout", "true")
        url.searchParams.set("stderr", String(!options.tty))
        url.searchParams.set("tty", String(options.tty))
        // ws hands its options to tls.connect, which takes a made context (its types do not say so).
        const tls: WebSocket.ClientOptions & { readonly secureContext: SecureContext } = {
          headers: auth.headers,
          perMessageDeflate: false,
          secureContext: auth.secureContext,
          generateMask: noMask,
          ...(auth.servername === undefined ? {} : { servername: auth.servername }),
          ...(auth.rejectUnauthorized === undefined ? {} : { rejectUnauthorized: auth.rejectUnauthorized })
        }
        const ws = new WebSocket(url, PROTOCOLS, tls)
        const operation = `exec in pod ${pod}`
        const process = new ExecProcess(ws)
        let opened = false
        ws.once("open", () => {
          opened = true
          if (!PROTOCOLS.includes(ws.protocol)) {
            ws.terminate()
            return resume(Effect.fail(kubeError(operation, "Protocol", `the cluster chose no channel protocol of ours (${ws.protocol || "none"})`)))
          }
          process.protocol = ws.protocol
          resume(Effect.succeed(process))
        })
        ws.once("unexpected-response", (_request, response) => {
          const chunks: Array<Buffer> = []
          response.on("data", (chunk: Buffer) => chunks.push(chunk))
          response.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8")
            let message = text.trim().slice(0, 500)
            try {
              message = JSON.parse(text).message ?? message
            } catch {
              // not a Status
            }
            const status = response.statusCode ?? 0
            resume(Effect.fail(kubeError(operation, status === 404 ? "NotFound" : status === 401 || status === 403 ? "Denied" : status >= 500 ? "Unavailable" : "Invalid", message || `HTTP ${status}`)))
          })
        })
        ws.once("error", (error) => {
          if (!opened) resume(Effect.fail(kubeError(operation, "Unavailable", error.message, error)))
        })
        return Effect.sync(() => ws.terminate())
      })
    ),
    (process) => Effect.sync(() => process.kill())
  )

/** How long a command that `run` waits for may take (copying the agent in, the restart's kill). */
const RUN_TIMEOUT = "120 seconds"

/** Runs a command to its end: its output and exit code (`input` is written to its stdin first). */
export const run = (api: KubeApi, namespace: string, pod: string, argv: ReadonlyArray<string>, input?: Uint8Array) =>
  Effect.scoped(Effect.gen(function*() {
    const process = yield* open(api, namespace, pod, argv, { stdin: input !== undefined, tty: false })
    const out: Array<Buffer> = []
    const err: Array<Buffer> = []
    process.stdout.on("data", (chunk: Buffer) => out.push(chunk))
    process.stderr.on("data", (chunk: Buffer) => err.push(chunk))
    if (input !== undefined) process.stdin.write(input)
    const code = yield* Effect.promise(() => process.closed)
    return { code, stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8"), status: process.status }
  })).pipe(
    Effect.timeoutFail({ duration: RUN_TIMEOUT, onTimeout: () => kubeError(`exec in pod ${pod}`, "Timeout", `${argv[0]} did not end within ${RUN_TIMEOUT}`) })
  )
