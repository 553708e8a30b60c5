/**
 * The server's side of a toolset process: a shell worker (ShellWorker.ts) from a small pool of
 * started ones, given the process's job, and answered while it runs — its output goes to the
 * process's events, its filesystem calls to the computer's `ComputerFs`. The server does no guest
 * work here: every message costs it a bounded amount (a sync costs the batches the worker missed,
 * or one copy of the tree's directories).
 */
import { MessageChannel, type Worker } from "node:worker_threads"
import type { ComputerFs } from "./ComputerFs.js"
import { type ReadyWorker, startWorker } from "./Runner.js"
import type { ShellJob, ShellMessage, ShellWorkerData, SyncReply } from "./ShellProtocol.js"
import { STDIN_CHUNK_BYTES, STDIN_HEADER_BYTES } from "./ToolProtocol.js"
import type { Launched, ProcessIo } from "./WasmProcess.js"
import type { WorkerScript } from "./WorkerScript.js"

/** Shell workers that have loaded their program (and started their first tool worker). */
export class ShellPool {
  private readonly idle: Array<ReadyWorker> = []
  private closed = false

  constructor(private readonly script: WorkerScript, private readonly data: ShellWorkerData, private readonly size: number) {
    this.fill()
  }

  private start(): ReadyWorker {
    // The shell's own memory (variables, `$(…)` output); file contents are outside this heap.
    return startWorker(this.script, { maxOldGenerationSizeMb: 128, maxYoungGenerationSizeMb: 32 }, this.data)
  }

  /** Resolves once the workers started so far are ready (or failed). */
  warm(): Promise<void> {
    return Promise.all(this.idle.map(({ ready }) => ready)).then(() => undefined)
  }

  private fill() {
    while (!this.closed && this.idle.length < this.size) this.idle.push(this.start())
  }

  take(): ReadyWorker {
    return this.idle.shift() ?? this.start()
  }

  /** A job ended: its worker is kept for the next job when nothing of it runs any more, else terminated (and replaced). */
  release(worker: Worker, reusable: boolean): Promise<unknown> {
    if (reusable && !this.closed && this.idle.length < this.size) {
      worker.unref()
      this.idle.push({ worker, ready: Promise.resolve(true) })
      return Promise.resolve()
    }
    setImmediate(() => this.fill())
    return worker.terminate()
  }

  close() {
    this.closed = true
    for (const { worker } of this.idle.splice(0)) void worker.terminate()
  }
}

export interface ShellSpec {
  readonly argv: ReadonlyArray<string>
  readonly env: Readonly<Record<string, string>>
  readonly cwd: string
  readonly hostname: string
}

/** Starts a toolset process in a shell worker. */
export const startShell = (pool: ShellPool, fs: ComputerFs, spec: ShellSpec, io: ProcessIo): Launched => {
  const { worker, ready } = pool.take()
  worker.ref()
  const reserved = fs.begin()
  const rpc = new MessageChannel()
  const cell = new Int32Array(new SharedArrayBuffer(4))
  const stdinRing = new SharedArrayBuffer(STDIN_HEADER_BYTES + STDIN_CHUNK_BYTES)
  let stopped = false
  let idle = false
  let resolveDone: (outcome: { code: number; message?: string | undefined }) => void = () => {}
  const done = new Promise<{ code: number; message?: string | undefined }>((resolve) => (resolveDone = resolve))

  const reply = (answer: SyncReply) => {
    rpc.port1.postMessage(answer)
    Atomics.store(cell, 0, 1)
    Atomics.notify(cell, 0)
  }
  const onMessage = (message: ShellMessage) => {
    if (stopped) return
    switch (message.t) {
      case "out":
        return (message.fd === 2 ? io.stderr : io.stdout)(message.data, message.credit)
      case "sync":
        return reply(fs.since(message.since))
      case "commit":
        fs.apply(message.changes, message.reserved, reserved)
        return reply(fs.since(message.since))
      case "exit":
        idle = message.idle
        return resolveDone({ code: message.code, message: message.error })
    }
  }
  const onError = (error: Error) => {
    const reason = (error as { code?: string }).code === "ERR_WORKER_OUT_OF_MEMORY" ? "the shell ran out of memory" : error.message
    resolveDone({ code: 1, message: reason })
  }
  const onExit = () => resolveDone({ code: 1, message: "the shell worker stopped" })
  worker.on("message", onMessage)
  worker.on("error", onError)
  worker.on("exit", onExit)

  void ready.then((ok) => {
    if (stopped) return
    if (!ok) return resolveDone({ code: 1, message: "the shell worker did not start" })
    const job: ShellJob = {
      ...spec,
      tree: fs.vfs.root,
      gen: fs.generation,
      genCell: fs.genCell,
      quota: fs.quota,
      reserved,
      stdin: stdinRing,
      window: new Int32Array(new SharedArrayBuffer(4)),
      rpc: { port: rpc.port2, cell }
    }
    worker.postMessage(job, [rpc.port2])
    io.stdin.attach(stdinRing)
  })

  return {
    done,
    stop: async () => {
      if (stopped) return
      stopped = true
      io.stdin.detach()
      // A read of stdin still waiting in the worker ends.
      const ring = new Int32Array(stdinRing, 0, 1)
      Atomics.store(ring, 0, 2)
      Atomics.notify(ring, 0)
      worker.off("message", onMessage)
      worker.off("error", onError)
      worker.off("exit", onExit)
      rpc.port1.close()
      await pool.release(worker, idle)
      fs.end(reserved)
    }
  }
}
