/**
 * The server side of one connection to a kt-agent (AgentProtocol.ts, native/kt-agent.c): the
 * requests (spawn, watch, read, list, step) answered by tag, and the processes this connection
 * watches. The agent holds the processes; this connection only follows some of them, and its end
 * (a violation, the socket closed, `detach`) ends nothing in the computer. Backends use it through
 * AgentProcesses.ts; AgentLauncher.ts (host) and DockerAgent.ts make its link. The link itself,
 * the handshake, the frames and the connection's end are AgentConnection.ts's.
 *
 * Its failures are ProviderErrors of the backend ("Unavailable": the connection is gone;
 * "NotFound": the agent has no such process).
 */
import * as Effect from "effect/Effect"
import type { Duplex } from "node:stream"
import { type ProviderError, providerError, SpawnFailed } from "../../../domain/Errors.js"
import { signalNumber } from "../../../domain/Signals.js"
import { AgentConnection, type WatchHandlers } from "./AgentConnection.js"
import {
  type AgentSpawnSpec,
  encodeRead,
  encodeSize,
  encodeSpawn,
  encodeStep,
  encodeU16,
  encodeU32,
  encodeWatch,
  FrameType,
  MAX_META,
  MAX_NOTE,
  MAX_READ,
  type ProcessRecord,
  RELAY_MAX_STREAMS
} from "./AgentProtocol.js"

export type { AgentLink, AgentOptions, WatchHandlers } from "./AgentConnection.js"

export class AgentClient extends AgentConnection {
  /**
   * Starts a process with pipes, or on a terminal of the given size; this connection then watches
   * it from its first byte. Interrupted before it started: whatever starts is killed.
   */
  spawn(
    spec: AgentSpawnSpec,
    handlers: WatchHandlers,
    tty?: { readonly cols: number; readonly rows: number }
  ): Effect.Effect<{ readonly handle: number; readonly pid: number; readonly startMs: number }, SpawnFailed | ProviderError> {
    const command = spec.argv.join(" ")
    // A terminal's process always gets its shell: interactive programs start under it.
    const payload = encodeSpawn(tty === undefined ? spec : { ...spec, direct: undefined }, tty)
    // The spec passed Backend.checkSpec; only a meta over MAX_META is left to refuse.
    if (payload === undefined) return Effect.fail(new SpawnFailed({ command, reason: `the process's record is over ${MAX_META} bytes` }))
    const type = tty !== undefined ? FrameType.SpawnTty : spec.direct?.length ? FrameType.SpawnDirect : FrameType.Spawn
    return Effect.async((resume) => {
      if (this.dead !== undefined) return resume(Effect.fail(this.unavailable("start a process", this.dead)))
      const tag = this.nextTag++
      let waiting = true
      this.pending.set(tag, {
        kind: "spawn",
        resume: (result) => {
          if ("handle" in result) {
            this.watches.set(result.handle, handlers)
            if (waiting) return resume(Effect.succeed(result))
            // Interrupted while starting: it is killed and let go of.
            this.signal(result.handle, "SIGKILL")
            void Effect.runFork(this.unwatch(result.handle))
            return
          }
          if (!waiting) return
          resume(Effect.fail("failed" in result ? new SpawnFailed({ command, reason: result.failed }) : this.unavailable("start a process", result.error)))
        }
      })
      this.decoder.answers.expect(tag, { kind: "spawn" })
      this.send(type, tag, payload)
      return Effect.sync(() => {
        waiting = false
      })
    })
  }

  /**
   * A connection to 127.0.0.1:port inside the computer, through the agent's relay (RELAY_CONNECT):
   * the computer needs no network for it. Interrupted before it connects, the stream is reset.
   */
  openPort(port: number): Effect.Effect<Duplex, ProviderError> {
    const operation = `connect to port ${port} inside the computer`
    return Effect.async((resume) => {
      if (this.dead !== undefined) return resume(Effect.fail(this.unavailable(operation, this.dead)))
      if (this.relay.serverStreams >= RELAY_MAX_STREAMS) {
        return resume(Effect.fail(providerError(this.backend, operation, "Unavailable", `${RELAY_MAX_STREAMS} connections are open already`)))
      }
      // Never reused; past 2^32 (billions of connections) the ids would wrap onto the agent's.
      const id = this.nextStream++
      if (id > 0xffff_ffff) return resume(Effect.fail(this.unavailable(operation, "no stream ids left")))
      this.decoder.relay.expectConnect(id)
      const pending = this.relay.connect(id, this.decoder.relay, (result) =>
        resume(typeof result === "string" ? Effect.fail(this.unavailable(operation, result)) : Effect.succeed(result)))
      this.send(FrameType.RelayConnect, id, encodeU16(port))
      return Effect.sync(pending.cancel)
    })
  }

  /** Follows a process from the given offsets; answers its record, or NotFound. */
  watch(handle: number, from: { readonly stdout: number; readonly stderr: number }, handlers: WatchHandlers): Effect.Effect<ProcessRecord, ProviderError> {
    return Effect.flatMap(
      this.request<ProcessRecord | { failed: string } | { error: string }>("follow a process", FrameType.Watch, encodeWatch(handle, from.stdout, from.stderr), (resume) => ({
        kind: "watch",
        resume: (result) => {
          // The output that follows WATCHING in the same read reaches the handlers.
          if ("handle" in result) this.watches.set(handle, handlers)
          resume(result)
        }
      })),
      (result) => {
        if ("failed" in result) return Effect.fail(providerError(this.backend, "follow a process", "NotFound", result.failed))
        if ("error" in result) return Effect.fail(this.unavailable("follow a process", result.error))
        return Effect.succeed(result)
      }
    )
  }

  /** Whether this connection follows the process (from its STARTED or WATCHING on, until CLOSED or unwatched). */
  watching(handle: number): boolean {
    return this.watches.has(handle)
  }

  /**
   * Stops following a process: nothing more comes for it once this completes. A watch that ended
   * (its CLOSED came: the agent dropped it) needs no UNWATCH, nor its answer: most short commands'
   * do by the time their caller lets go.
   */
  unwatch(handle: number): Effect.Effect<void> {
    return Effect.async<void>((resume) => {
      const watch = this.watches.get(handle)
      this.watches.delete(handle)
      this.holdOutput(handle, false)
      if (this.dead !== undefined || watch === undefined) return resume(Effect.void)
      const waiting = this.unwatched.get(handle) ?? []
      waiting.push(() => resume(Effect.void))
      this.unwatched.set(handle, waiting)
      this.decoder.answers.unwatch(handle)
      this.send(FrameType.Unwatch, handle)
      watch?.onClosed(undefined)
    })
  }

  /** Retained bytes of a stream from `from` (moved past what fell out: see `start`), at most `most`. */
  read(handle: number, stream: "stdout" | "stderr", from: number, most: number): Effect.Effect<{ readonly start: number; readonly total: number; readonly data: Buffer }, ProviderError> {
    return Effect.flatMap(
      this.request<{ start: number; total: number; data: Buffer } | { failed: string } | { error: string }>(
        "read a process's output",
        FrameType.Read,
        encodeRead(handle, stream, from, Math.min(most, MAX_READ)),
        (resume) => ({ kind: "read", resume, pieces: [], start: 0, total: 0 })
      ),
      (result) =>
        "failed" in result
          ? Effect.fail(providerError(this.backend, "read a process's output", "NotFound", result.failed))
          : "error" in result
          ? Effect.fail(this.unavailable("read a process's output", result.error))
          : Effect.succeed(result)
    )
  }

  /** Every process the computer keeps. */
  readonly list: Effect.Effect<ReadonlyArray<ProcessRecord>, ProviderError> = Effect.flatMap(
    this.request<Array<ProcessRecord> | { error: string }>("list the computer's processes", FrameType.List, undefined, (resume) => ({
      kind: "list",
      resume,
      records: []
    })),
    (result) => (Array.isArray(result) ? Effect.succeed(result) : Effect.fail(this.unavailable("list the computer's processes", result.error)))
  )

  /** Takes (or gives back) the computer's lifecycle lease; a refusal names the holder's step. */
  step(take: boolean, name: string): Effect.Effect<{ readonly granted: boolean; readonly holder: string }, ProviderError> {
    return Effect.flatMap(
      this.request<{ granted: boolean; holder: string } | { error: string }>("coordinate a lifecycle step", FrameType.Step, encodeStep(take, name), (resume) => ({
        kind: "step",
        resume
      })),
      (result) => ("error" in result ? Effect.fail(this.unavailable("coordinate a lifecycle step", result.error)) : Effect.succeed(result))
    )
  }

  write(handle: number, data: Uint8Array): void {
    this.send(FrameType.Stdin, handle, data)
  }

  closeStdin(handle: number): void {
    this.send(FrameType.StdinEof, handle)
  }

  resize(handle: number, cols: number, rows: number): void {
    this.send(FrameType.Resize, handle, encodeSize(cols, rows))
  }

  /** Signals the process group; SIGKILL ends the whole tree. False when the name is unknown. */
  signal(handle: number, signal: string): boolean {
    const n = signalNumber(signal)
    if (n === undefined) return false
    this.send(FrameType.Signal, handle, encodeU32(n))
    return true
  }

  /** Records why the process ends, for every server that lists it. */
  note(handle: number, text: string): void {
    this.send(FrameType.Note, handle, Buffer.from(text, "utf8").subarray(0, MAX_NOTE))
  }
}
