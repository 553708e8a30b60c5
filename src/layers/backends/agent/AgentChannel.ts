/**
 * Where an agent's frames come from: a FIFO (host backend: the agent's stdout, never a path inside
 * the sandbox) or a stream (the agent's stdout over a container engine's exec). Either way chunks are
 * handed over one at a time, valid only during the call, and the source can be paused: that is how
 * the server applies backpressure to a computer's output.
 */
import { type OnReadOpts, Socket, type SocketConstructorOpts } from "node:net"
import type { Readable } from "node:stream"

export interface AgentChannel {
  /** Starts delivering chunks (each valid only during the call); `onEnd` once, when the source ends. */
  readonly start: (onChunk: (chunk: Buffer) => void, onEnd: () => void) => void
  readonly pause: () => void
  readonly resume: () => void
  readonly destroy: () => void
}

/** Read size of a FIFO channel (the agent raises the FIFO to this capacity when output is heavy). */
const FIFO_READ = 1 << 20

/**
 * The read buffer of every FIFO channel. One is enough: a read's chunk is handed over and consumed
 * synchronously, before the event loop reads anything else, and consumers copy what they keep (the
 * contract above). One per channel would hold 1 MiB per idle computer.
 */
let shared: Buffer | undefined

/** Reads an open FIFO into the shared read buffer: no allocation per read, none per channel. */
export const fromFifo = (fd: number): AgentChannel => {
  let socket: Socket | undefined
  let paused = false
  return {
    start: (onChunk, onEnd) => {
      const buffer = shared ??= Buffer.allocUnsafe(FIFO_READ)
      const onread: OnReadOpts = {
        buffer,
        callback: (n) => {
          onChunk(buffer.subarray(0, n))
          return true
        }
      }
      // Node supports `onread` for any socket; its types only declare it for net.connect.
      const options: SocketConstructorOpts & { readonly onread: OnReadOpts } = { fd, readable: true, writable: false, onread }
      socket = new Socket(options)
      if (paused) socket.pause()
      let ended = false
      const end = () => {
        if (ended) return
        ended = true
        onEnd()
      }
      socket.on("end", end)
      socket.on("close", end)
      socket.on("error", () => {})
    },
    pause: () => {
      paused = true
      socket?.pause()
    },
    resume: () => {
      paused = false
      socket?.resume()
    },
    destroy: () => socket?.destroy()
  }
}

/** A readable stream's chunks (an engine exec's demultiplexed stdout). */
export const fromStream = (stream: Readable): AgentChannel => ({
  start: (onChunk, onEnd) => {
    let ended = false
    const end = () => {
      if (ended) return
      ended = true
      onEnd()
    }
    stream.on("data", onChunk)
    stream.on("end", end)
    stream.on("close", end)
    stream.on("error", () => {})
  },
  pause: () => stream.pause(),
  resume: () => stream.resume(),
  destroy: () => stream.destroy()
})
