/**
 * Runs WASI module instances in tool workers (ToolWorker.ts): from a shell worker (ShellWorker.ts)
 * for the toolset, from the server for a user module. Workers are started ahead of need (a small
 * pool of ones that have loaded their program), so a run costs a message, not a thread start; a
 * worker whose run ended by itself goes back to the pool (its instance, and the instance's memory,
 * are garbage), one that was terminated is gone with everything it held.
 * `terminate()` ends a run at once (wall clock, kill): worker.terminate stops even a tight loop.
 */
import { type ResourceLimits, Worker } from "node:worker_threads"
import { type Credit, Feed, settle, type Sink } from "./Feed.js"
import { STDIN_CHUNK_BYTES, STDIN_HEADER_BYTES, type ToolJob, type ToolMessage } from "./ToolProtocol.js"
import type { Change, VDir } from "./Vfs.js"
import type { WorkerScript } from "./WorkerScript.js"

export interface RunOutcome {
  readonly code: number
  /** Set when the run did not end by itself: killed or out of time. */
  readonly terminated: boolean
  readonly trap: string | undefined
}

export interface Run {
  readonly done: Promise<RunOutcome>
  /** Ends the run now; resolves once its thread has stopped. */
  readonly terminate: () => Promise<void>
}

/** Where a run's standard streams go. */
export type RunInput = Feed | "empty" | { readonly file: string }
export type RunOutput = Sink | "null" | { readonly file: string }

export interface RunJob {
  readonly module: WebAssembly.Module
  readonly args: ReadonlyArray<string>
  readonly env: ReadonlyArray<string>
  readonly tree: VDir
  readonly stdin: RunInput
  readonly stdout: RunOutput
  readonly stderr: RunOutput | "stdout"
  readonly quota: BigInt64Array
  readonly reserved: BigInt64Array
  /** What the run changed in its tree, and the quota it reserved (not called when terminated). */
  readonly onChanges: (changes: ReadonlyArray<Change>, reserved: number) => void
}

/** A started worker, and whether it loaded its program (it posts one message when ready). */
export interface ReadyWorker {
  readonly worker: Worker
  readonly ready: Promise<boolean>
}

/** Starts a worker of a pool: its stdio drained, not keeping the server alive while idle. */
export const startWorker = (script: WorkerScript, resourceLimits: ResourceLimits, workerData?: unknown): ReadyWorker => {
  const worker = new Worker(script.source, { eval: script.eval, workerData, stdout: true, stderr: true, resourceLimits })
  worker.stdout.resume()
  worker.stderr.resume()
  worker.unref()
  const ready = new Promise<boolean>((resolve) => {
    worker.once("message", () => resolve(true))
    worker.once("error", () => resolve(false))
    worker.once("exit", () => resolve(false))
  })
  return { worker, ready }
}

/** Tool workers that have loaded their program and wait for a job. */
export class WorkerPool {
  private readonly idle: Array<ReadyWorker> = []
  private closed = false
  private active = 0

  /** `limit`: runs at once (a pipeline of more stages, or more background jobs, is refused). */
  constructor(private readonly script: WorkerScript, private readonly size: number, readonly limit: number) {
    this.fill()
  }

  get running() {
    return this.active
  }

  private start(): ReadyWorker {
    return startWorker(this.script, { maxOldGenerationSizeMb: 64, maxYoungGenerationSizeMb: 16 })
  }

  /** Resolves once the workers started so far are ready (or failed). */
  warm(): Promise<void> {
    return Promise.all(this.idle.map(({ ready }) => ready)).then(() => undefined)
  }

  private fill() {
    while (!this.closed && this.idle.length < this.size) this.idle.push(this.start())
  }

  close() {
    this.closed = true
    for (const { worker } of this.idle.splice(0)) void worker.terminate()
  }

  /** Starts a run, or returns undefined when `limit` runs are going. */
  run(job: RunJob): Run | undefined {
    if (this.active >= this.limit) return undefined
    this.active++
    const { worker, ready } = this.idle.shift() ?? this.start()
    // A run keeps the thread alive (idle pool workers do not).
    worker.ref()
    const ctl = new SharedArrayBuffer(STDIN_HEADER_BYTES + STDIN_CHUNK_BYTES)
    const window = new Int32Array(ctl, 12, 1)
    const feed = job.stdin instanceof Feed ? job.stdin : undefined
    let finished = false
    let stopped: Promise<unknown> = Promise.resolve()
    let resolveDone: (outcome: RunOutcome) => void = () => {}
    const done = new Promise<RunOutcome>((resolve) => (resolveDone = resolve))
    const finish = (outcome: RunOutcome, reusable = false) => {
      if (finished) return
      finished = true
      this.active--
      feed?.detach()
      worker.off("message", onMessage)
      worker.off("error", onError)
      worker.off("exit", onExit)
      if (reusable && !this.closed && this.idle.length < this.size) {
        worker.unref()
        this.idle.push({ worker, ready: Promise.resolve(true) })
      } else {
        stopped = worker.terminate()
        // A replacement, started after this run (not in its way).
        setImmediate(() => this.fill())
      }
      resolveDone(outcome)
    }
    const onMessage = (message: ToolMessage) => {
      if (finished) return
      if (message.t === "out") {
        const sink = message.fd === 2 ? job.stderr : job.stdout
        const credit: Credit = { cell: window, weight: message.weight }
        if (typeof sink === "function") sink(message.data, credit)
        else settle(credit)
      } else if (message.t === "exit") {
        job.onChanges(message.changes, message.reserved)
        finish({ code: message.code, terminated: false, trap: message.trap }, true)
      }
    }
    const onError = (error: Error) => finish({ code: 1, terminated: false, trap: error.message })
    const onExit = () => finish({ code: 1, terminated: true, trap: undefined })
    worker.on("message", onMessage)
    worker.on("error", onError)
    worker.on("exit", onExit)
    const spec = (output: RunOutput) => (typeof output === "function" ? "post" : output)
    void ready.then((ok) => {
      if (finished) return
      if (!ok) return finish({ code: 1, terminated: false, trap: "the worker thread did not start" })
      const message: ToolJob = {
        module: job.module,
        args: job.args,
        env: job.env,
        tree: job.tree,
        ctl,
        stdin: feed !== undefined ? "ring" : (job.stdin as "empty" | { readonly file: string }),
        stdout: spec(job.stdout),
        stderr: job.stderr === "stdout" ? "stdout" : spec(job.stderr),
        quota: job.quota,
        reserved: job.reserved
      }
      worker.postMessage(message)
      feed?.attach(ctl)
    })
    return {
      done,
      terminate: () => {
        finish({ code: 137, terminated: true, trap: undefined })
        return stopped.then(() => undefined, () => undefined)
      }
    }
  }
}
