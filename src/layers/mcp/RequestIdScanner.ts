/**
 * Finds the top-level `"id"` of a JSON-RPC message while its bytes stream past, keeping only the
 * id itself: a message too large to keep can still be answered with an error for its request.
 */
export class RequestIdScanner {
  private depth = 0
  private inString = false
  private escaped = false
  private expectKey = false
  private key: string | undefined = undefined
  private lastKey: string | undefined = undefined
  private capture: Array<number> | undefined = undefined
  private found: string | undefined = undefined
  private gaveUp = false

  private static readonly maxIdBytes = 1024

  feed(bytes: Uint8Array): void {
    for (let i = 0; i < bytes.length && !this.gaveUp; i++) this.byte(bytes[i]!)
  }

  /** The id, when the message had a string or number id at its top level. */
  id(): string | number | undefined {
    if (this.found === undefined) return undefined
    try {
      const id: unknown = JSON.parse(this.found)
      return typeof id === "string" || (typeof id === "number" && Number.isFinite(id)) ? id : undefined
    } catch {
      return undefined
    }
  }

  private keep(byte: number) {
    if (this.capture === undefined) return
    this.capture.push(byte)
    if (this.capture.length > RequestIdScanner.maxIdBytes) this.gaveUp = true
  }

  private endCapture() {
    if (this.capture === undefined) return
    this.found = Buffer.from(this.capture).toString("utf8")
    this.capture = undefined
  }

  private byte(byte: number) {
    const char = String.fromCharCode(byte)
    if (this.inString) {
      this.keep(byte)
      if (this.escaped) this.escaped = false
      else if (char === "\\") this.escaped = true
      else if (char === "\"") {
        this.inString = false
        if (this.key !== undefined) this.lastKey = this.key
        this.key = undefined
        return
      }
      if (this.key !== undefined) this.key = this.key.length < 8 ? this.key + char : "\u0000"
      return
    }
    switch (char) {
      case "\"":
        this.inString = true
        if (this.depth === 1 && this.expectKey) {
          this.key = ""
          this.expectKey = false
        }
        this.keep(byte)
        return
      case "{":
      case "[":
        this.keep(byte)
        this.depth++
        if (this.depth === 1) this.expectKey = char === "{"
        return
      case "}":
      case "]":
        if (this.depth === 1) this.endCapture()
        this.keep(byte)
        this.depth--
        return
      case ",":
        if (this.depth === 1) {
          this.endCapture()
          this.expectKey = true
        } else this.keep(byte)
        return
      case ":":
        if (this.depth === 1 && this.lastKey === "id" && this.found === undefined && this.capture === undefined) {
          this.capture = []
          this.lastKey = undefined
        } else this.keep(byte)
        return
      default:
        this.keep(byte)
    }
  }
}
