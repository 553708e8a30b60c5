/**
 * Runs one WASI module instance in a worker thread (see WorkerSource.ts), with stdin fed from a
 * `Feed` and stdout/stderr delivered as they are written. Workers are started ahead of need (a
 * small pool of ones that have loaded the shim), so a run costs a message, not a thread start.
 * `terminate()` ends a run at once (wall clock, kill): worker.terminate stops even a tight loop.
 */
import { createRequire } from "node:module"
import { pathToFileURL } from "node:url"
import { Worker } from "node:worker_threads"
import type { Change, VDir } from "./Vfs.js"
import { STDIN_CHUNK_BYTES, STDIN_HEADER_BYTES, workerSource } from "./WorkerSource.js"

/** A byte stream into a process's stdin: pushed by the main thread, drained by one worker at a time. */
export class Feed {
  private readonly queue: Array<Uint8Array> = []
  private ended = false
  private ring: { readonly ctl: Int32Array; readonly bytes: Uint8Array } | undefined
  private waiting = false
  private readonly listeners = new Set<() => void>()

  push(data: Uint8Array) {
    if (this.ended || data.byteLength === 0) return
    this.queue.push(data)
    this.pump()
    this.listeners.forEach((listener) => listener())
  }

  end() {
    if (this.ended) return
    this.ended = true
    this.pump()
    this.listeners.forEach((listener) => listener())
  }

  get isEnded() {
    return this.ended
  }

  /** Everything pushed until the end (for a reader in the main thread). */
  async readAll(): Promise<Uint8Array> {
    while (!this.ended) await new Promise<void>((resolve) => {
      const listener = () => {
        this.listeners.delete(listener)
        resolve()
      }
      this.listeners.add(listener)
    })
    const all = Buffer.concat(this.queue)
    this.queue.length = 0
    return all
  }

  attach(buffer: SharedArrayBuffer) {
    this.ring = { ctl: new Int32Array(buffer, 0, 3), bytes: new Uint8Array(buffer, STDIN_HEADER_BYTES) }
    this.pump()
  }

  /** The worker is gone: what it had not read of the current chunk goes back to the queue. */
  detach() {
    const ring = this.ring
    this.ring = undefined
    this.waiting = false
    if (ring !== undefined && Atomics.load(ring.ctl, 0) === 1) {
      const unread = ring.bytes.slice(ring.ctl[2]!, ring.ctl[1]!)
      if (unread.byteLength > 0) this.queue.unshift(unread)
    }
  }

  private pump() {
    const ring = this.ring
    if (ring === undefined || this.waiting) return
    const state = Atomics.load(ring.ctl, 0)
    if (state === 0) {
      const chunk = this.queue.shift()
      if (chunk !== undefined) {
        const n = Math.min(chunk.byteLength, ring.bytes.byteLength)
        ring.bytes.set(chunk.subarray(0, n))
        if (n < chunk.byteLength) this.queue.unshift(chunk.subarray(n))
        ring.ctl[1] = n
        ring.ctl[2] = 0
        Atomics.store(ring.ctl, 0, 1)
        Atomics.notify(ring.ctl, 0)
      } else if (this.ended) {
        Atomics.store(ring.ctl, 0, 2)
        Atomics.notify(ring.ctl, 0)
        return
      } else return
    }
    if (this.queue.length === 0 && !this.ended) return
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

/** Atomics.waitAsync (Node 16+; typed from ES2024 on). */
const waitAsync = (Atomics as unknown as {
  readonly waitAsync: (array: Int32Array, index: number, value: number) => { readonly async: boolean; readonly value: Promise<string> | string }
}).waitAsync

export interface RunOutcome {
  readonly code: number
  /** Set when the run did not end by itself: killed or out of time. */
  readonly terminated: boolean
  readonly trap: string | undefined
}

export interface Run {
  readonly done: Promise<RunOutcome>
  readonly terminate: () => void
}

export interface RunJob {
  readonly module: WebAssembly.Module
  readonly args: ReadonlyArray<string>
  readonly env: ReadonlyArray<string>
  readonly tree: VDir
  readonly stdin: Feed
  readonly onStdout: (data: Uint8Array) => void
  readonly onStderr: (data: Uint8Array) => void
  readonly onChanges: (changes: ReadonlyArray<Change>) => void
}

const shimUrl = pathToFileURL(createRequire(import.meta.url).resolve("@bjorn3/browser_wasi_shim")).href
const source = workerSource(shimUrl)

interface ReadyWorker {
  readonly worker: Worker
  readonly ready: Promise<boolean>
}

const startWorker = (): ReadyWorker => {
  const worker = new Worker(source, { eval: true, stdout: false, stderr: false })
  worker.unref()
  const ready = new Promise<boolean>((resolve) => {
    worker.once("message", () => resolve(true))
    worker.once("error", () => resolve(false))
    worker.once("exit", () => resolve(false))
  })
  return { worker, ready }
}

/** Workers that have loaded the shim and wait for a job. */
export class WorkerPool {
  private readonly idle: Array<ReadyWorker> = []
  private closed = false

  constructor(private readonly size: number) {
    this.fill()
  }

  private fill() {
    while (!this.closed && this.idle.length < this.size) this.idle.push(startWorker())
  }

  private take(): ReadyWorker {
    const worker = this.idle.shift() ?? startWorker()
    // Replace it once this run has started (not in its way).
    setImmediate(() => this.fill())
    return worker
  }

  close() {
    this.closed = true
    for (const { worker } of this.idle.splice(0)) void worker.terminate()
  }

  run(job: RunJob): Run {
    const { worker, ready } = this.take()
    // A run keeps the process alive (idle pool workers do not).
    worker.ref()
    const stdin = new SharedArrayBuffer(STDIN_HEADER_BYTES + STDIN_CHUNK_BYTES)
    let finished = false
    let resolveDone: (outcome: RunOutcome) => void = () => {}
    const done = new Promise<RunOutcome>((resolve) => (resolveDone = resolve))
    const finish = (outcome: RunOutcome) => {
      if (finished) return
      finished = true
      job.stdin.detach()
      void worker.terminate()
      resolveDone(outcome)
    }
    const ctl = new Int32Array(stdin, 0, 4)
    worker.on("message", (message: { t: string; fd?: number; data?: Uint8Array; weight?: number; code?: number; changes?: Array<Change>; trap?: string }) => {
      if (finished) return
      if (message.t === "out" && message.data !== undefined) {
        Atomics.sub(ctl, 3, message.weight ?? message.data.byteLength)
        Atomics.notify(ctl, 3)
        if (message.fd === 2) job.onStderr(message.data)
        else job.onStdout(message.data)
      } else if (message.t === "exit") {
        job.onChanges(message.changes ?? [])
        finish({ code: message.code ?? 1, terminated: false, trap: message.trap })
      }
    })
    worker.on("error", (error) => finish({ code: 1, terminated: false, trap: error.message }))
    worker.on("exit", () => finish({ code: 1, terminated: true, trap: undefined }))
    void ready.then((ok) => {
      if (finished) return
      if (!ok) return finish({ code: 1, terminated: false, trap: "the worker thread did not start" })
      worker.postMessage({ module: job.module, args: job.args, env: job.env, tree: job.tree, stdin })
      job.stdin.attach(stdin)
    })
    return {
      done,
      terminate: () => finish({ code: 137, terminated: true, trap: undefined })
    }
  }
}
