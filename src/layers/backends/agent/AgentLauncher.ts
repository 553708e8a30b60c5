/**
 * Starts a kt-agent as a child process of the server (the host backend: inside bubblewrap, or
 * directly in unsandboxed mode), its frames coming back over a FIFO that is unlinked as soon as both
 * ends are open (so no path leads to it) and never mounted in the sandbox.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { execFile, spawn as spawnChild } from "node:child_process"
import { closeSync, constants as fsConstants, openSync, rmSync, unlinkSync } from "node:fs"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import { handOn } from "../HandedDescriptors.js"
import { fromFifo } from "./AgentChannel.js"
import { AgentClient, type AgentOptions } from "./AgentClient.js"

/** How to start the agent: bwrap plus its arguments, or the agent itself when unsandboxed. */
export interface AgentCommand {
  readonly file: string
  readonly args: ReadonlyArray<string>
  readonly cwd: string
  /** The agent's own environment (children never inherit it). */
  readonly env: Readonly<Record<string, string>>
  /** Where to create the FIFO that carries the agent's frames (its stdout); it must not exist yet. */
  readonly channel: string
  /** The server's descriptors the command gets as its descriptors 5, 6, … (kt-sandbox's mount templates). */
  readonly fds?: ReadonlyArray<number> | undefined
}

/** Starts the agent process (see `make`). */
export const launch = (backend: string, command: AgentCommand, options: AgentOptions): AgentClient => {
  let readFd: number | undefined
  let writeFd: number | undefined
  try {
    readFd = openSync(command.channel, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK)
    writeFd = openSync(command.channel, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK)
  } catch (error) {
    if (readFd !== undefined) closeSync(readFd)
    throw error
  } finally {
    unlinkSync(command.channel)
  }
  try {
    const child = spawnChild(command.file, [...command.args], {
      cwd: command.cwd,
      env: { ...command.env },
      stdio: handOn(["pipe", writeFd, "pipe"], command.fds ?? [])
    })
    return new AgentClient(backend, child, fromFifo(readFd), false, options)
  } catch (error) {
    closeSync(readFd)
    throw error
  } finally {
    closeSync(writeFd)
  }
}

/** Creates the FIFO (Node cannot); one left behind by a crash is replaced. */
const mkfifo = (backend: string, path: string) =>
  Effect.async<void, ProviderError>((resume) => {
    rmSync(path, { force: true })
    const child = execFile("mkfifo", ["-m", "600", path], { env: { PATH: "/usr/bin:/bin" }, timeout: 10_000 }, (error, _stdout, stderr) =>
      resume(
        error
          ? Effect.fail(providerError(backend, `create the agent's channel ${path}`, "Failed", stderr.trim() || error.message, error))
          : Effect.void
      ))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/**
 * Starts an agent that lives as long as the Scope; fails with the agent's own words when it cannot
 * start. `options.onLost` is called when the agent dies (or breaks the protocol) other than through
 * the Scope's end.
 */
export const make = (
  backend: string,
  command: AgentCommand,
  options: AgentOptions = {}
): Effect.Effect<AgentClient, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* mkfifo(backend, command.channel)
    const client = yield* Effect.acquireRelease(
      Effect.try({
        try: () => launch(backend, command, options),
        catch: (error) => providerError(backend, "start the computer's agent", "Failed", String(error), error)
      }),
      (client) => client.shutdown
    )
    // The FIFO may outlive the agent (held open elsewhere): its death is noticed all the same.
    yield* Effect.forkScoped(client.drainAfterExit)
    yield* client.ready.pipe(
      Effect.timeoutFail({
        duration: "20 seconds",
        onTimeout: () => providerError(backend, "start the computer's agent", "Timeout", "it did not start within 20 seconds")
      })
    )
    return client
  })
