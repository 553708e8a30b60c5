/**
 * A computer's agent on this machine (the host backend: inside bubblewrap, or directly in
 * unsandboxed mode): attached through its listening socket in the computer's directory (never a path
 * inside the sandbox), and started when none listens there.
 *
 * Started *durable*, the agent is a process of its own session that outlives the server (a
 * permanent computer: its processes survive the server's exit, crash or upgrade); started *bound*,
 * it ends when the server that started it does (its stdin is that server's: a temporary computer).
 * Only one agent runs per computer: a second launch exits with status 3 (the computer's lock, see
 * kt-sandbox --agent-dir and kt-agent --listen), and the launcher then attaches to the first. An
 * agent that is ending (asked to stop moments ago) is waited out, a bounded number of times.
 */
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import type * as Scope from "effect/Scope"
import { type ChildProcess, spawn as spawnChild } from "node:child_process"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import { handOn } from "../HandedDescriptors.js"
import { fromSocket } from "./AgentChannel.js"
import { AgentClient, type AgentOptions } from "./AgentClient.js"

/** How to start the agent: kt-sandbox with bwrap and the agent, or the agent itself when unsandboxed. */
export interface AgentCommand {
  readonly file: string
  readonly args: ReadonlyArray<string>
  readonly cwd: string
  /** The launcher's own environment (guest processes never inherit it). */
  readonly env: Readonly<Record<string, string>>
  /** The server's descriptors the command gets from HandedDescriptors.FIRST_FD on (kt-sandbox's mount templates). */
  readonly fds?: ReadonlyArray<number> | undefined
}

export interface AgentPlace {
  /** The agent's listening socket. */
  readonly socket: string
  /** The computer's key (64 hex digits): the agent gets it at start, every attach proves it. */
  readonly key: string
}

/** How long an attach (connect, handshake) may take. */
const ATTACH_TIMEOUT = "20 seconds"
/** Exit status of a launch that found the computer's agent already running. */
const ALREADY_RUNNING = 3
/**
 * How much of the launcher's stderr is read into its messages: what kt-sandbox, bubblewrap (through
 * kt-sandbox's bounded relay) and the agent say while starting is short; the rest is not looked at.
 */
const STDERR_LIMIT = 64 * 1024
/** Control characters (terminal escapes included) of stderr text, shown as "?" in messages. */
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g

const unavailable = (backend: string, detail: string, cause?: unknown) =>
  providerError(backend, "reach the computer's agent", "Unavailable", detail, cause)

/** Whether nothing listens at the socket (no agent, or one that died): then one must be started. */
const nobodyListens = (error: ProviderError) => /ENOENT|ECONNREFUSED/.test(error.detail)

/**
 * An agent that is ending (a stop or restart just asked it to) still holds the computer's lock and
 * may accept a connection it never answers; moments later nobody listens and a new one starts.
 */
class AgentEnding {
  readonly _tag = "AgentEnding"
  constructor(readonly error: ProviderError) {}
}
const ENDING_TRIES = 25
const ENDING_SPACING = "200 millis"

/**
 * Attaches to the agent at `place.socket`, proving the key; detached (the agent and its processes
 * left running) when the Scope closes.
 */
export const attach = (backend: string, place: AgentPlace, options: AgentOptions = {}): Effect.Effect<AgentClient, ProviderError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.suspend(() => {
      const { channel, socket } = fromSocket(place.socket)
      const connected = Effect.async<void, ProviderError>((resume) => {
        socket.once("connect", () => resume(Effect.void))
        socket.once("error", (error) => resume(Effect.fail(unavailable(backend, `${place.socket}: ${error.message}`, error))))
      })
      return connected.pipe(
        Effect.map(() =>
          new AgentClient(backend, { channel, write: (bytes) => void socket.write(bytes), close: () => socket.end() }, Buffer.from(place.key, "hex"), options)
        ),
        Effect.onInterrupt(() => Effect.sync(() => socket.destroy()))
      )
    }),
    (client) => client.detach
  ).pipe(
    Effect.tap((client) => client.ready),
    Effect.timeoutFail({
      duration: ATTACH_TIMEOUT,
      onTimeout: () => providerError(backend, "reach the computer's agent", "Timeout", `it did not answer within ${ATTACH_TIMEOUT}`)
    })
  )

/**
 * Ends the computer's agent if one runs (every process it holds ends with it): restart, reset,
 * delete. Bounded; an agent that cannot be reached is left to the caller (its cgroups).
 */
export const stop = (backend: string, place: AgentPlace): Effect.Effect<void> =>
  Effect.scoped(Effect.flatMap(attach(backend, place), (client) => client.shutdown)).pipe(
    Effect.timeout("10 seconds"),
    Effect.ignore
  )

/** A launch in progress: its exit (status and what it said on stderr), once it happened. */
interface Launch {
  readonly child: ChildProcess
  readonly exited: Effect.Effect<{ readonly code: number | null; readonly said: string }>
}

const launch = (command: AgentCommand, key: string, bound: boolean): Launch => {
  const child = spawnChild(command.file, [...command.args], {
    cwd: command.cwd,
    env: { ...command.env },
    // Durable: a session of its own, so that the server's end (a terminal's hangup, its group's
    // signals) does not reach it.
    detached: !bound,
    stdio: handOn(["pipe", "ignore", "pipe"], command.fds ?? [])
  })
  // Untrusted text: bounded, and without control characters.
  let said = ""
  let heard = 0
  child.stderr?.on("data", (chunk: Buffer) => {
    heard += chunk.length
    if (heard <= STDERR_LIMIT) said = (said + chunk.toString("utf8").replace(CONTROL, "?")).slice(-4000)
  })
  child.stdin?.on("error", () => {})
  child.stdin?.write(`${key}\n`)
  // Bound: stdin stays open for the server's life, and its end ends the computer.
  if (!bound) child.stdin?.end()
  const exited = Effect.async<{ readonly code: number | null; readonly said: string }>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.succeed({ code: child.exitCode, said: said.trim() }))
    const done = (code: number | null) => resume(Effect.succeed({ code, said: said.trim() }))
    child.once("exit", done)
    child.once("error", (error) => resume(Effect.succeed({ code: null, said: error.message })))
  })
  return { child, exited }
}

/**
 * The computer's agent: attached when it runs, else started with `command` (durable unless
 * `bound`) and attached. A bound agent started here ends with the Scope.
 */
export const open = (
  backend: string,
  place: AgentPlace,
  /** Made only when the agent must be started (cgroups, say): its resources live in the Scope. */
  command: Effect.Effect<AgentCommand, ProviderError, Scope.Scope>,
  bound: boolean,
  options: AgentOptions = {}
): Effect.Effect<AgentClient, ProviderError, Scope.Scope> =>
  // Made once however many tries: a launch that found the lock held used none of it.
  Effect.flatMap(Effect.cached(command), (made) =>
    attachOrLaunch(backend, place, made, bound, options).pipe(
      Effect.retry({ while: (error) => error instanceof AgentEnding, schedule: Schedule.spaced(ENDING_SPACING), times: ENDING_TRIES }),
      Effect.mapError((error) => (error instanceof AgentEnding ? error.error : error))
    ))

/** One try of `open`: AgentEnding when the agent found is on its way out. */
const attachOrLaunch = (
  backend: string,
  place: AgentPlace,
  command: Effect.Effect<AgentCommand, ProviderError, Scope.Scope>,
  bound: boolean,
  options: AgentOptions
): Effect.Effect<AgentClient, ProviderError | AgentEnding, Scope.Scope> =>
  Effect.gen(function*() {
    const first = yield* Effect.either(attach(backend, place, options))
    if (first._tag === "Right") return first.right
    if (!nobodyListens(first.left)) {
      // Connected, but the connection ended before the handshake: an agent on its way out.
      const ending = /connection to the computer's agent ended/.test(first.left.detail)
      return yield* (ending ? Effect.fail<ProviderError | AgentEnding>(new AgentEnding(first.left)) : Effect.fail(first.left))
    }
    const started = launch(yield* command, place.key, bound)
    if (bound) {
      yield* Effect.addFinalizer(() => Effect.sync(() => started.child.stdin?.end()))
    }
    // The launcher binds the socket before the agent runs: attach as soon as it exists, unless the
    // launch ends first (it failed, or found the computer's agent already running).
    const attached = attach(backend, place, options).pipe(
      Effect.retry({ while: nobodyListens, schedule: Schedule.spaced("20 millis"), times: 500 })
    )
    // An attach that fails while the launch ends (the agent died at once) says what it said.
    const explained = attached.pipe(
      Effect.catchAll((error) =>
        started.exited.pipe(
          Effect.timeout("2 seconds"),
          Effect.flatMap((exit) =>
            Effect.fail(exit.said === "" ? error : providerError(backend, "start the computer's agent", "Failed", exit.said))
          ),
          Effect.catchTag("TimeoutException", () => Effect.fail(error))
        )
      )
    )
    const outcome = yield* Effect.raceFirst(
      Effect.map(explained, (client) => ({ _tag: "Attached" as const, client })),
      Effect.map(started.exited, (exit) => ({ _tag: "Exited" as const, exit }))
    )
    if (outcome._tag === "Attached") {
      if (!bound) {
        // The agent lives on its own now: the server neither waits for nor reads its launcher.
        started.child.stderr?.destroy()
        started.child.unref()
      }
      return outcome.client
    }
    if (outcome.exit.code === ALREADY_RUNNING || outcome.exit.code === 0) {
      // The lock was held: by a running agent (attach), or by one that is ending (try again).
      return yield* attach(backend, place, options).pipe(
        Effect.catchAll((error): Effect.Effect<never, ProviderError | AgentEnding> =>
          nobodyListens(error) ? Effect.fail(new AgentEnding(error)) : Effect.fail(error)
        )
      )
    }
    return yield* providerError(
      backend,
      "start the computer's agent",
      "Failed",
      outcome.exit.said || `its launcher exited with status ${outcome.exit.code}`
    )
  })
