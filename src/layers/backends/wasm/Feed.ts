/**
 * A `Feed` is a byte stream into a tool's stdin (a pipe between stages, or the process's stdin):
 * pushed by its writer, drained into the one-chunk ring (ToolProtocol.ts) of the tool reading it,
 * or read here (`readAll`, `readLine`) by the shell's own builtins. Every chunk carries a `Credit`
 * settled once the reader has it, which is how a writer's output window reopens: a fast writer
 * waits for a slow reader, end to end.
 */
import { STDIN_HEADER_BYTES } from "./ToolProtocol.js"

/**
 * What a writer is owed for bytes in flight: `weight` to give back to its window `cell` (index 0)
 * once the bytes are taken. Shared memory, so it can be settled in any thread (the server settles
 * a tool's output when the process's reader has taken it).
 */
export interface Credit {
  readonly cell: Int32Array
  readonly weight: number
}

export const settle = (credit: Credit | undefined) => {
  if (credit === undefined) return
  Atomics.sub(credit.cell, 0, credit.weight)
  Atomics.notify(credit.cell, 0)
}

/** Output to somewhere; its `credit` is settled once the bytes are taken. */
export type Sink = (data: Uint8Array, credit?: Credit) => void

interface Chunk {
  data: Uint8Array
  readonly credit: Credit | undefined
}

/** Atomics.waitAsync (Node 16+; typed from ES2024 on). */
export const waitAsync = (Atomics as unknown as {
  readonly waitAsync: (array: Int32Array, index: number, value: number, timeout?: number) => { readonly async: boolean; readonly value: Promise<string> | string }
}).waitAsync

/** A byte stream into a tool's stdin (see the header). */
export class Feed {
  private readonly queue: Array<Chunk> = []
  private ended = false
  private discarded = false
  private ring: { readonly ctl: Int32Array; readonly bytes: Uint8Array } | undefined
  private waiting = false
  private pulling = false
  private readonly listeners = new Set<() => void>()

  /** `source`: where more bytes come from when a reader wants them (null: the end). */
  constructor(private readonly source?: () => Promise<Uint8Array | null>) {}

  push(data: Uint8Array, credit?: Credit) {
    if (this.ended || this.discarded || data.byteLength === 0) return settle(credit)
    this.queue.push({ data, credit })
    this.changed()
  }

  end() {
    if (this.ended) return
    this.ended = true
    this.changed()
  }

  /** The reader is gone: what is queued and what comes later is dropped (and released). */
  discard() {
    this.discarded = true
    for (const chunk of this.queue.splice(0)) settle(chunk.credit)
  }

  get isEnded() {
    return this.ended && this.queue.length === 0
  }

  /** Everything until the end (for a reader in this thread, such as `sh` reading its script). */
  async readAll(): Promise<Uint8Array> {
    const parts: Array<Uint8Array> = []
    for (;;) {
      for (const chunk of this.queue.splice(0)) {
        parts.push(chunk.data)
        settle(chunk.credit)
      }
      if (this.ended) break
      await this.more()
    }
    return Buffer.concat(parts)
  }

  /** The next line (without its newline) for a reader in this thread (`read`); null at the end. */
  async readLine(): Promise<string | null> {
    const parts: Array<Uint8Array> = []
    for (;;) {
      const chunk = this.queue.shift()
      if (chunk !== undefined) {
        settle(chunk.credit)
        const newline = chunk.data.indexOf(10)
        if (newline < 0) {
          parts.push(chunk.data)
          continue
        }
        parts.push(chunk.data.subarray(0, newline))
        if (newline + 1 < chunk.data.byteLength) this.queue.unshift({ data: chunk.data.subarray(newline + 1), credit: undefined })
        return new TextDecoder().decode(Buffer.concat(parts))
      }
      if (this.ended) return parts.length === 0 ? null : new TextDecoder().decode(Buffer.concat(parts))
      await this.more()
    }
  }

  /** Asks the source for more and resolves at the next change (a chunk, the end). */
  private more(): Promise<void> {
    this.pull()
    return new Promise<void>((resolve) => {
      const listener = () => {
        this.listeners.delete(listener)
        resolve()
      }
      this.listeners.add(listener)
    })
  }

  attach(buffer: SharedArrayBuffer) {
    this.ring = { ctl: new Int32Array(buffer, 0, 3), bytes: new Uint8Array(buffer, STDIN_HEADER_BYTES) }
    this.pump()
  }

  /** The reader is gone: what it had not read of the current chunk goes back to the queue. */
  detach() {
    const ring = this.ring
    this.ring = undefined
    this.waiting = false
    if (ring !== undefined && Atomics.load(ring.ctl, 0) === 1) {
      const unread = ring.bytes.slice(ring.ctl[2]!, ring.ctl[1]!)
      if (unread.byteLength > 0) this.queue.unshift({ data: unread, credit: undefined })
    }
  }

  private changed() {
    this.pump()
    this.listeners.forEach((listener) => listener())
  }

  /** Asks the source for more (once at a time), when someone wants to read. */
  private pull() {
    if (this.source === undefined || this.pulling || this.ended || this.queue.length > 0) return
    this.pulling = true
    void this.source().then((data) => {
      this.pulling = false
      if (data === null) this.end()
      else this.push(data)
    }, () => {
      this.pulling = false
      this.end()
    })
  }

  private pump() {
    const ring = this.ring
    if (ring === undefined || this.waiting) return
    const state = Atomics.load(ring.ctl, 0)
    if (state === 0) {
      const chunk = this.queue[0]
      if (chunk !== undefined) {
        const n = Math.min(chunk.data.byteLength, ring.bytes.byteLength)
        ring.bytes.set(chunk.data.subarray(0, n))
        if (n < chunk.data.byteLength) chunk.data = chunk.data.subarray(n)
        else {
          this.queue.shift()
          settle(chunk.credit)
        }
        ring.ctl[1] = n
        ring.ctl[2] = 0
        Atomics.store(ring.ctl, 0, 1)
        Atomics.notify(ring.ctl, 0)
      } else if (this.ended) {
        Atomics.store(ring.ctl, 0, 2)
        Atomics.notify(ring.ctl, 0)
        return
      } else return this.pull()
    }
    if (state === 2) return
    // The worker is reading the chunk: refill when it has taken it.
    this.waiting = true
    const result = waitAsync(ring.ctl, 0, 1)
    const again = () => {
      if (this.ring !== ring) return
      this.waiting = false
      this.pump()
    }
    if (result.async) void (result.value as Promise<string>).then(again)
    else again()
  }
}

/**
 * Reads a one-chunk ring (the layout of ToolProtocol.ts) filled by another thread: the source of
 * a `Feed` for the process's stdin in a shell worker, read only when a reader wants more.
 */
export const ringSource = (buffer: SharedArrayBuffer) => {
  const ctl = new Int32Array(buffer, 0, 3)
  const bytes = new Uint8Array(buffer, STDIN_HEADER_BYTES)
  return async (): Promise<Uint8Array | null> => {
    for (;;) {
      const state = Atomics.load(ctl, 0)
      if (state === 1) {
        const data = bytes.slice(ctl[2]!, ctl[1]!)
        Atomics.store(ctl, 0, 0)
        Atomics.notify(ctl, 0)
        return data
      }
      if (state === 2) return null
      const result = waitAsync(ctl, 0, 0)
      if (result.async) await result.value
    }
  }
}
