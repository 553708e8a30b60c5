import { type JSONRPCMessage, parseJSONRPCMessage, ProtocolErrorCode, type Transport } from "@modelcontextprotocol/server"
import type { Readable, Writable } from "node:stream"
import { RequestIdScanner } from "./RequestIdScanner.js"

export interface StdioTransportOptions {
  /** Largest message (one line) read; a longer one is answered with an error and skipped. */
  readonly maxMessageBytes: number
  /** Reports what the client should know but cannot be told (stderr). */
  readonly warn: (message: string) => void
}

const mib = (bytes: number) =>
  bytes >= 1024 * 1024 ? `${Math.round((bytes / 1024 / 1024) * 10) / 10} MiB` : `${bytes} bytes`

/**
 * MCP over newline-delimited JSON on stdin/stdout, like the SDK's `StdioServerTransport`, but a
 * message over the limit never ends the server: it is skipped as it streams (memory stays bounded)
 * and answered with a JSON-RPC error for its id, read on the fly. The SDK's transport closes itself
 * when its 10 MiB read buffer overflows, and the server with it.
 */
export class StdioTransport implements Transport {
  onclose?: (() => void) | undefined
  onerror?: ((error: Error) => void) | undefined
  onmessage?: ((message: JSONRPCMessage) => void) | undefined

  private parts: Array<Buffer> = []
  private size = 0
  private skipping: RequestIdScanner | undefined = undefined
  private started = false

  constructor(
    private readonly stdin: Readable,
    private readonly stdout: Writable,
    private readonly options: StdioTransportOptions
  ) {}

  private readonly onData = (chunk: Buffer) => {
    let at = 0
    while (at < chunk.length) {
      const newline = chunk.indexOf(10, at)
      const end = newline === -1 ? chunk.length : newline
      this.take(chunk.subarray(at, end))
      if (newline === -1) return
      this.endOfLine()
      at = newline + 1
    }
  }

  private readonly onError = (error: Error) => this.onerror?.(error)

  /** Why stdout can no longer be written (the client closed its end: EPIPE), once it happened. */
  private broken: Error | undefined = undefined
  private readonly onStdoutError = (error: Error) => {
    this.broken ??= error
    this.onerror?.(error)
  }

  private take(bytes: Buffer) {
    this.size += bytes.length
    if (this.skipping) return this.skipping.feed(bytes)
    this.parts.push(bytes)
    if (this.size > this.options.maxMessageBytes) {
      this.skipping = new RequestIdScanner()
      for (const part of this.parts) this.skipping.feed(part)
      this.parts = []
    }
  }

  private endOfLine() {
    const size = this.size
    const skipped = this.skipping
    const line = skipped ? undefined : Buffer.concat(this.parts, size).toString("utf8")
    this.parts = []
    this.size = 0
    this.skipping = undefined
    if (skipped) return this.refuse(size, skipped.id())
    if (line!.trim() !== "") this.receive(line!)
  }

  private refuse(size: number, id: string | number | undefined) {
    const message = `message of ${mib(size)} is over the ${mib(this.options.maxMessageBytes)} limit of one MCP message; ` +
      "it was not read (file_write takes at most 16 MiB of content: send large files in parts with append=true)"
    if (id === undefined) return this.options.warn(`stdio: skipped a message without a readable id: ${message}`)
    this.options.warn(`stdio: request ${JSON.stringify(id)} refused: ${message}`)
    this.reply(id, ProtocolErrorCode.InvalidRequest, message)
  }

  private receive(line: string) {
    let json: unknown
    try {
      json = JSON.parse(line)
    } catch {
      this.options.warn("stdio: a line that is not JSON was answered with a parse error")
      return this.reply(null, ProtocolErrorCode.ParseError, "parse error: the message is not valid JSON")
    }
    let message: JSONRPCMessage | undefined
    try {
      message = parseJSONRPCMessage(json)
    } catch {
      message = undefined
    }
    if (message !== undefined) return this.onmessage?.(message)
    const id = typeof json === "object" && json !== null && "id" in json ? (json as { id: unknown }).id : undefined
    if (typeof id === "string" || typeof id === "number") {
      return this.reply(id, ProtocolErrorCode.InvalidRequest, "invalid request: not a JSON-RPC 2.0 message")
    }
    this.options.warn("stdio: skipped a message that is not JSON-RPC 2.0")
  }

  private reply(id: string | number | null, code: number, message: string) {
    this.write({ jsonrpc: "2.0", id, error: { code, message } }).catch((error: unknown) =>
      this.onerror?.(error instanceof Error ? error : new Error(String(error)))
    )
  }

  private write(message: unknown) {
    return new Promise<void>((resolve, reject) => {
      if (this.broken !== undefined) return reject(this.broken)
      if (this.stdout.write(`${JSON.stringify(message)}\n`)) return resolve()
      // A write waiting for room ends either way: drained, or stdout broke (it would never drain).
      const settle = (error?: Error) => {
        this.stdout.off("drain", settle)
        this.stdout.off("error", settle)
        if (error === undefined) resolve()
        else reject(error)
      }
      this.stdout.once("drain", settle)
      this.stdout.once("error", settle)
    })
  }

  async start() {
    if (this.started) throw new Error("StdioTransport already started")
    this.started = true
    this.stdin.on("data", this.onData)
    this.stdin.on("error", this.onError)
    // Never taken off: a write still in flight after close must not make an unhandled 'error' event
    // (which would end the process with a stack trace instead of a clean shutdown).
    this.stdout.on("error", this.onStdoutError)
  }

  send(message: JSONRPCMessage) {
    return this.write(message)
  }

  async close() {
    this.stdin.off("data", this.onData)
    this.stdin.off("error", this.onError)
    if (this.stdin.listenerCount("data") === 0) this.stdin.pause()
    this.parts = []
    this.skipping = undefined
    this.onclose?.()
  }
}
