/**
 * Where an agent's frames come from: a socket (host backend: the agent's listening socket in the
 * computer's directory, never a path inside the sandbox) or a stream (the connector's stdout over a
 * container engine's exec). Either way chunks are handed over one at a time, valid only during the
 * call, and the source can be paused: that is how the server applies backpressure to a computer's
 * output.
 */
import { connect, type OnReadOpts, type Socket } from "node:net"
import type { Readable } from "node:stream"

export interface AgentChannel {
  /** Starts delivering chunks (each valid only during the call); `onEnd` once, when the source ends. */
  readonly start: (onChunk: (chunk: Buffer) => void, onEnd: () => void) => void
  readonly pause: () => void
  readonly resume: () => void
  readonly destroy: () => void
}

/** Read size of a socket channel. */
const SOCKET_READ = 1 << 20

/**
 * The read buffer of every socket channel. One is enough: a read's chunk is handed over and consumed
 * synchronously, before the event loop reads anything else, and consumers copy what they keep (the
 * contract above). One per channel would hold 1 MiB per idle computer.
 */
let shared: Buffer | undefined

/** A connected Unix socket to the agent, read into the shared buffer: no allocation per read, none per channel. */
export const fromSocket = (path: string): { readonly channel: AgentChannel; readonly socket: Socket } => {
  let paused = false
  let deliver: (chunk: Buffer) => void = () => {}
  const buffer = shared ??= Buffer.allocUnsafe(SOCKET_READ)
  const onread: OnReadOpts = {
    buffer,
    callback: (n) => {
      deliver(buffer.subarray(0, n))
      return true
    }
  }
  const socket = connect({ path, onread })
  socket.on("error", () => {})
  return {
    socket,
    channel: {
      start: (onChunk, onEnd) => {
        deliver = onChunk
        if (paused) socket.pause()
        let ended = false
        const end = () => {
          if (ended) return
          ended = true
          onEnd()
        }
        socket.on("end", end)
        socket.on("close", end)
      },
      pause: () => {
        paused = true
        socket.pause()
      },
      resume: () => {
        paused = false
        socket.resume()
      },
      destroy: () => socket.destroy()
    }
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
