/**
 * Signals for processes of the exec fallback (DockerExec.ts): a second short exec runs `kill` on the
 * process group inside the container, so remote engines work too (the engine only knows host pids).
 * With `session`, processes that left the group but not the session are reached as well (through
 * `ps`, when the image has it): what closing a process's Scope does with SIGKILL.
 */
import * as Effect from "effect/Effect"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Engine } from "./DockerEngine.js"

const KILL_SCRIPT = [
  `kill -s "$1" -- "-$2" 2>/dev/null`,
  `if [ "$3" = session ] && command -v ps >/dev/null 2>&1; then`,
  `  ps -e -o pid= -o sid= 2>/dev/null | while read -r p s; do [ "$s" = "$2" ] && kill -s "$1" "$p" 2>/dev/null; done`,
  `fi`,
  `exit 0`
].join("\n")

/** Everything a short exec wrote (stdout and stderr, multiplexed; the headers are dropped below). */
const drain = (stream: NodeJS.ReadableStream) =>
  new Promise<string>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    stream.on("data", (chunk: Buffer) => chunks.push(chunk))
    stream.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    stream.on("error", reject)
  })

/**
 * Runs a short command inside the container (as `user`; the image's own user when absent) and
 * answers its exit code and what it wrote, the stream headers' control bytes removed.
 */
export const runShort = (engine: Engine, providerId: string, operation: string, argv: ReadonlyArray<string>, user?: string) =>
  Effect.gen(function*() {
    const exec = yield* engine.call(operation, (abort) =>
      engine.docker.getContainer(providerId).exec({
        Cmd: [...argv],
        ...(user === undefined ? {} : { User: user }),
        AttachStdout: true,
        AttachStderr: true,
        abortSignal: abort
      }))
    const said = yield* engine.call(operation, () => exec.start({}).then(drain))
    const info = yield* engine.call(operation, (abort) => exec.inspect({ abortSignal: abort }))
    return { exitCode: info.ExitCode, said: said.replace(/[\x00-\x08]/g, "").trim() }
  })

/** Delivers a signal (canonical name) to the process group `pgid`; `session` also reaches its session. */
export const kill = (
  engine: Engine,
  providerId: string,
  pgid: number,
  signal: string,
  session: boolean
): Effect.Effect<void, ProviderError> =>
  Effect.gen(function*() {
    const operation = `deliver ${signal}`
    const argv = ["/bin/sh", "-c", KILL_SCRIPT, "kilntainers", signal.replace(/^SIG/, ""), String(pgid), session ? "session" : ""]
    const { exitCode, said } = yield* runShort(engine, providerId, operation, argv)
    if (exitCode !== 0) {
      const quota = /resource temporarily unavailable/i.test(said)
      return yield* engine.fail(
        operation,
        quota ? "Quota" : "Failed",
        `${said || `exit code ${exitCode}`}${quota ? " (the computer's pids limit is reached; restart it)" : ""}`
      )
    }
  })
