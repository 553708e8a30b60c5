/**
 * The fast path into a running container: kt-agent (the same static supervisor the host backend
 * runs in bubblewrap) copied into the container and started once, through one Engine API exec whose
 * hijacked stdin/stdout carry the agent's framed protocol. Every later process is a fork+exec by the
 * agent, with no engine round trip — instead of one exec create + start + inspect per command.
 */
import type Docker from "dockerode"
import { Effect } from "effect"
import type { Scope } from "effect"
import { EventEmitter } from "node:events"
import { readFileSync } from "node:fs"
import { PassThrough, type Duplex, type Writable } from "node:stream"
import { BackendError } from "../../domain/Errors.js"
import * as AgentClient from "./AgentClient.js"
import type * as NativeBinaries from "./NativeBinaries.js"

/** Where the agent lives inside the container. */
export const AGENT_DIR = "/.kilntainers"
export const AGENT_PATH = `${AGENT_DIR}/kt-agent`
const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

const header = (name: string, size: number, mode: number, type: "0" | "5") => {
  const block = Buffer.alloc(512)
  const field = (value: string, offset: number, length: number) => block.write(value, offset, length, "utf8")
  const octal = (value: number, offset: number, length: number) =>
    field(value.toString(8).padStart(length - 1, "0") + "\0", offset, length)
  field(name, 0, 100)
  octal(mode, 100, 8)
  octal(0, 108, 8)
  octal(0, 116, 8)
  octal(size, 124, 12)
  octal(0, 136, 12)
  block.fill(" ", 148, 156)
  field(type, 156, 1)
  field("ustar\0", 257, 6)
  field("00", 263, 2)
  let sum = 0
  for (const byte of block) sum += byte
  field(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8)
  return block
}

/** A ustar archive of the agent binary under AGENT_DIR, as the Engine's putArchive takes it. */
export const agentArchive = (binary: Buffer): Buffer =>
  Buffer.concat([
    header(`${AGENT_DIR.slice(1)}/`, 0, 0o755, "5"),
    header(AGENT_PATH.slice(1), binary.length, 0o755, "0"),
    binary,
    Buffer.alloc((512 - (binary.length % 512)) % 512),
    Buffer.alloc(1024)
  ])

/** The agent's exec, shaped like the child process AgentClient expects. */
class ExecAgent extends EventEmitter implements AgentClient.AgentProcess {
  readonly stdout = new PassThrough()
  readonly stderr = new PassThrough()
  readonly stdin: Writable

  constructor(docker: Docker, private readonly stream: Duplex, exec: Docker.Exec) {
    super()
    this.stdin = stream
    docker.modem.demuxStream(stream, this.stdout, this.stderr)
    let closed = false
    const close = () => {
      if (closed) return
      closed = true
      this.stdout.end()
      this.stderr.end()
      exec.inspect().then(
        (info) => this.emit("close", info.ExitCode ?? null, null),
        () => this.emit("close", null, "SIGKILL")
      )
    }
    stream.on("end", close)
    stream.on("close", close)
    stream.on("error", (error) => this.emit("error", error))
  }

  kill(): boolean {
    this.stream.destroy()
    return true
  }
}

/**
 * Copies the agent into the container and starts it; the agent (and every process it started)
 * ends with the Scope, and also when this server goes away (its stdin closes).
 */
export const start = (
  backend: string,
  docker: Docker,
  containerId: string,
  binaries: NativeBinaries.NativeBinaries,
  onLost?: (reason: string) => void
): Effect.Effect<AgentClient.AgentClient, BackendError, Scope.Scope> =>
  Effect.gen(function*() {
    const fail = (what: string) => (error: unknown) =>
      new BackendError({ backend, reason: `cannot ${what} the agent: ${error instanceof Error ? error.message : String(error)}` })
    const container = docker.getContainer(containerId)
    const binary = yield* Effect.try({ try: () => readFileSync(binaries.agent), catch: fail("read") })
    yield* Effect.tryPromise({ try: () => container.putArchive(agentArchive(binary), { path: "/" }), catch: fail("install") })
    const exec = yield* Effect.tryPromise({
      try: () =>
        container.exec({
          Cmd: [AGENT_PATH, "--no-parent"],
          Env: [`PATH=${PATH}`],
          WorkingDir: "/",
          AttachStdin: true,
          AttachStdout: true,
          AttachStderr: true,
          Tty: false
        }),
      catch: fail("create the exec of")
    })
    const stream = yield* Effect.tryPromise({
      try: () => exec.start({ hijack: true, stdin: true }) as Promise<Duplex>,
      catch: fail("start")
    })
    const client = yield* Effect.acquireRelease(
      Effect.sync(() => AgentClient.AgentClient.attach(backend, new ExecAgent(docker, stream, exec), onLost)),
      (client) => client.shutdown
    )
    yield* client.ready.pipe(
      Effect.timeoutFail({
        duration: "15 seconds",
        onTimeout: () => new BackendError({ backend, reason: "the agent did not start in the container within 15 seconds" })
      })
    )
    return client
  })
