/**
 * The program of a shell worker: one toolset process, its shell and everything it starts, in a
 * thread of its own (loaded through WorkerScript.ts, started by ShellProcess.ts). The server's
 * thread never runs guest work: a spinning loop spins here, and terminating this worker ends it
 * with every tool worker it started.
 */
import { parentPort, workerData } from "node:worker_threads"
import { collectGarbage } from "./Collect.js"
import { FsReplica } from "./FsReplica.js"
import { Feed, ringSource, waitAsync, type Sink } from "./Feed.js"
import { WorkerPool } from "./Runner.js"
import { Shell } from "./Shell.js"
import { Control } from "./ShellControl.js"
import type { FileWriter, ShellHost } from "./ShellIo.js"
import type { ShellJob, ShellMessage, ShellWorkerData } from "./ShellProtocol.js"
import { OUTPUT_WINDOW_BYTES } from "./ToolProtocol.js"

const run = async (data: ShellWorkerData, pool: WorkerPool, job: ShellJob) => {
  const port = parentPort!
  const post = (message: ShellMessage, transfer: ReadonlyArray<ArrayBuffer> = []) => port.postMessage(message, [...transfer])
  const fs = new FsReplica(job.tree, job.gen, job.genCell, job.rpc, post, job.quota, job.reserved)
  const output = (fd: 1 | 2): Sink => (bytes, credit) => {
    let owed = credit
    if (owed === undefined) {
      const weight = Math.max(bytes.byteLength, 1024)
      Atomics.add(job.window, 0, weight)
      owed = { cell: job.window, weight }
    }
    const whole = bytes.buffer instanceof ArrayBuffer && bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength
    post({ t: "out", fd, data: bytes, credit: owed }, whole ? [bytes.buffer as ArrayBuffer] : [])
  }
  const throttle = async () => {
    for (let inFlight = Atomics.load(job.window, 0); inFlight > OUTPUT_WINDOW_BYTES; inFlight = Atomics.load(job.window, 0)) {
      const result = waitAsync(job.window, 0, inFlight, 1000)
      if (result.async) await result.value
    }
  }
  const host: ShellHost = {
    fs,
    hostname: job.hostname,
    commands: data.commands,
    pool,
    writers: new Set<FileWriter>(),
    jobs: { running: 0 },
    maxPipeline: data.maxPipeline,
    throttle
  }
  const io = {
    stdin: { kind: "feed", feed: new Feed(ringSource(job.stdin)) },
    stdout: { kind: "sink", write: output(1) },
    stderr: { kind: "sink", write: output(2) }
  } as const
  try {
    const code = await new Shell(host, new Control()).runArgv(job.argv, job.env, job.cwd, io)
    host.writers.forEach((writer) => writer.close())
    post({ t: "exit", code, idle: host.jobs.running === 0 && pool.running === 0 })
  } catch (error) {
    post({ t: "exit", code: 1, idle: false, error: error instanceof Error ? error.message : String(error) })
  }
}

if (parentPort !== null) {
  const data = workerData as ShellWorkerData
  const pool = new WorkerPool(data.toolScript, 1, data.maxPipeline)
  parentPort.on("message", (job: ShellJob) => void run(data, pool, job).then(() => setImmediate(collectGarbage)))
  parentPort.postMessage({ t: "ready" } satisfies ShellMessage)
}
