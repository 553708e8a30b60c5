import * as Chunk from "effect/Chunk"
import * as Effect from "effect/Effect"
import type { ProviderError, SpawnFailed } from "../domain/Errors.js"
import { type Connection, type ExitInfo, forEachEventChunk, type SpawnSpec } from "../services/Backend.js"
import type { RunResult } from "../services/Computers.js"

/** Most stderr a helper command's result keeps. */
const STDERR_LIMIT = 64 * 1024

/**
 * Runs a short helper command (file transfer) to completion: stdin given then closed, stdout kept
 * up to `maxBytes` (the rest is drained, not kept), stderr up to 64 KiB.
 */
export const runToCompletion = (
  connection: Connection,
  spec: SpawnSpec,
  stdin: Uint8Array | undefined,
  maxBytes: number
): Effect.Effect<RunResult, SpawnFailed | ProviderError> =>
  Effect.scoped(Effect.gen(function*() {
    const process = yield* connection.spawn(spec)
    if (stdin && stdin.length > 0) yield* process.write(stdin)
    yield* process.closeStdin
    const out: Array<Uint8Array> = []
    let outBytes = 0
    let overflow = false
    let err = ""
    const decoder = new TextDecoder()
    let exit: ExitInfo = { exitCode: null, signal: "SIGKILL" }
    yield* forEachEventChunk(process, (events) =>
        Effect.sync(() => {
          for (const event of Chunk.toReadonlyArray(events)) {
            if (event._tag === "Stdout") {
              const room = maxBytes - outBytes
              if (event.data.length > room) overflow = true
              const kept = event.data.subarray(0, Math.max(room, 0))
              if (kept.length > 0) out.push(Uint8Array.from(kept))
              outBytes += kept.length
            } else if (event._tag === "Stderr") {
              if (err.length < STDERR_LIMIT) err += decoder.decode(event.data, { stream: true })
            } else {
              exit = event.exit
            }
          }
        })
    )
    const stdout = new Uint8Array(outBytes)
    let offset = 0
    for (const piece of out) {
      stdout.set(piece, offset)
      offset += piece.length
    }
    return { exit, stdout, stderr: err, overflow }
  }))
