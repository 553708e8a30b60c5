/**
 * The app's end of the MCP Apps postMessage channel: JSON-RPC 2.0 with `window.parent` only.
 *
 * ext-apps' own `PostMessageTransport` checks a message's source but not its origin, and always
 * posts with target origin `*`. This one also pins the host's origin: the first message from the
 * parent fixes it; later messages from another origin (the parent frame navigated away) are
 * dropped, and replies go to that origin only. Messages from any other window (a sibling frame,
 * this window itself) and anything that is not JSON-RPC are dropped and counted, never parsed
 * further.
 */
import type { JSONRPCMessage, Transport } from "@modelcontextprotocol/client"
import { JSONRPCMessageSchema } from "@modelcontextprotocol/core"

export class HostTransport implements Transport {
  onclose?: () => void
  onerror?: (error: Error) => void
  onmessage?: (message: JSONRPCMessage) => void

  private hostOrigin: string | undefined
  private dropped = 0
  private readonly listener = (event: MessageEvent) => this.receive(event)

  /** `onDrop` hears the running count of dropped messages. */
  constructor(
    private readonly host: Window,
    private readonly onDrop: (dropped: number) => void = () => undefined
  ) {}

  async start(): Promise<void> {
    window.addEventListener("message", this.listener)
  }

  async send(message: JSONRPCMessage): Promise<void> {
    // An opaque host origin ("null") cannot be named as a target; the source check still holds.
    const target = this.hostOrigin === undefined || this.hostOrigin === "null" ? "*" : this.hostOrigin
    this.host.postMessage(message, target)
  }

  async close(): Promise<void> {
    window.removeEventListener("message", this.listener)
    this.onclose?.()
  }

  private receive(event: MessageEvent): void {
    if (event.source !== this.host) return this.drop()
    if (this.hostOrigin !== undefined && event.origin !== this.hostOrigin) return this.drop()
    const parsed = JSONRPCMessageSchema.safeParse(event.data)
    if (!parsed.success) return this.drop()
    this.hostOrigin ??= event.origin
    this.onmessage?.(parsed.data)
  }

  private drop(): void {
    this.dropped += 1
    this.onDrop(this.dropped)
  }
}
