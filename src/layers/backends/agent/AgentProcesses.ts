/**
 * Processes of a computer held by its kt-agent (AgentClient), as BackendProcesses: shared by the
 * backends that run an agent inside their computers (host sandbox, Docker containers). Pipes and
 * terminals alike: the agent owns the pseudo-terminal inside the computer and its output comes over
 * the same connection, in order, with Exit after the last byte the process wrote. Output reaches the
 * runtime through ProcessEvents, whose back-pressure pauses the connection (the agent keeps the
 * output in its store meanwhile; the process never waits).
 *
 * A process started here, or attached to by its handle (one another server started), is followed
 * for the life of its Scope; the Scope's end lets go of it and leaves it running. The connection's
 * end ends its events without an Exit: the process may run on in the computer.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as Scope from "effect/Scope"
import { type ProviderError, providerError, type SpawnFailed, Unsupported } from "../../../domain/Errors.js"
import { directArgv } from "../../../domain/SimpleCommand.js"
import { type BackendProcess, checkSpec, type ExitInfo, type HeldProcess, type HeldProcesses, type SpawnSpec } from "../../../services/Backend.js"
import { signalName } from "../../../domain/Signals.js"
import { ProcessEvents } from "../ProcessEvents.js"
import type { AgentClient, WatchHandlers } from "./AgentClient.js"
import { MAX_META, type ProcessRecord, validSize } from "./AgentProtocol.js"

/** Fails while the connection to the computer's agent is gone. */
const agentAlive = (backend: string, client: AgentClient, operation: string): Effect.Effect<void, ProviderError> =>
  Effect.suspend(() => {
    const failure = client.failure
    return failure === undefined ? Effect.void : Effect.fail(providerError(backend, operation, "Unavailable", failure))
  })

const DEFAULT_TERM = "xterm-256color"

const invalidSize = (backend: string, operation: string, cols: number, rows: number) =>
  providerError(backend, operation, "Invalid", `invalid terminal size ${cols}x${rows}`)

/**
 * How a process ended, as the agent reports it: `ended` counts the processes of its tree that a
 * teardown ended with it (a kill, or the signal it died of), which ps shows as descendantsKilled.
 */
const exitWithTeardown = (exit: ExitInfo, ended: number): ExitInfo => ended > 0 ? { ...exit, descendantsKilled: ended } : exit

/** What the kernel keeps with a process in the computer: its command as ps shows it, and its cwd. */
const Meta = Schema.parseJson(Schema.Struct({ command: Schema.String, cwd: Schema.String }))
const encodeMeta = Schema.encodeSync(Meta)
const decodeMeta = Schema.decodeUnknownOption(Meta)

/**
 * The record's meta within the agent's MAX_META bytes: a long command (a heredoc) is shown cut,
 * ending in "…", never refused. 512 characters of cwd stay under the bound however JSON escapes them.
 */
const recordMeta = (command: string, cwd: string): string => {
  for (let cut = command.length; ; cut = Math.floor(cut / 2)) {
    const meta = encodeMeta({ command: cut === command.length ? command : `${command.slice(0, cut)}…`, cwd: cwd.slice(0, 512) })
    if (Buffer.byteLength(meta) <= MAX_META || cut === 0) return meta
  }
}

/** A record as the kernel reads it. */
export const heldProcess = (record: ProcessRecord): HeldProcess => {
  const meta = decodeMeta(record.meta)
  return {
    handle: record.handle,
    pid: record.pid,
    command: meta._tag === "Some" ? meta.value.command : "",
    cwd: meta._tag === "Some" ? meta.value.cwd : "",
    tty: record.tty,
    exit: record.exit === undefined ? undefined : exitWithTeardown(
      record.exit.kind === "code"
        ? { exitCode: record.exit.value, signal: null }
        : { exitCode: null, signal: signalName(record.exit.value) ?? `SIG${record.exit.value}` },
      record.ended
    ),
    closed: record.state === "closed",
    note: record.note,
    startedAt: record.startMs,
    endedAt: record.endMs === 0 ? undefined : record.endMs,
    totals: record.totals,
    size: record.size
  }
}

/**
 * The events of one followed process (from the given offsets), and the handlers the connection
 * feeds them through.
 */
const follow = (from: { readonly stdout: number; readonly stderr: number } = { stdout: 0, stderr: 0 }) => {
  const events = new ProcessEvents()
  // Where each stream's next byte is due: a piece that starts later follows a stretch that fell out
  // of the computer's store before this reader got to it (it fell behind the ring).
  const due = { ...from }
  // Output may arrive, and fill the buffer, before the spawn or attach resumes with the handle:
  // a hold asked for meanwhile is passed on once the handle is known (asProcess).
  const early = { held: false }
  events.hold = (hold) => {
    early.held = hold
  }
  const handlers: WatchHandlers = {
    onOutput: (stream, offset, data) => {
      const skipped = Math.max(0, offset - due[stream])
      due[stream] = offset + data.byteLength
      return stream === "stdout" ? events.data(data, skipped) : events.stderr(data, skipped)
    },
    onExit: (exit, ended) => events.exit(exitWithTeardown(exit, ended)),
    // Processes a teardown ends after the exit (leftovers of a killed tree) are not counted. No
    // count: the connection ended, or let go, first; the process may run on.
    onClosed: (ended) => (ended === undefined ? events.detach() : events.end())
  }
  return { events, handlers, early }
}

/**
 * A process followed until the Scope closes, then let go (`release`): a plain finalizer of the Scope,
 * which needs none of the fiber's context (Effect.acquireRelease restores the acquiring fiber's
 * FiberRefs around its release: two diffs and two patches per process).
 */
const followedFor = <A, E>(acquire: Effect.Effect<A, E>, release: (acquired: A) => Effect.Effect<unknown>): Effect.Effect<A, E, Scope.Scope> =>
  Effect.flatMap(Effect.scope, (scope) =>
    Effect.uninterruptible(Effect.tap(acquire, (acquired) => Scope.addFinalizer(scope, Effect.suspend(() => release(acquired))))))

/** A followed process as a BackendProcess. */
const asProcess = (
  backend: string,
  client: AgentClient,
  handle: number,
  pid: number,
  tty: boolean,
  { early, events }: { readonly events: ProcessEvents; readonly early: { readonly held: boolean } }
): BackendProcess => {
  const alive = (operation: string) => agentAlive(backend, client, operation)
  const write = (data: Uint8Array) => alive("write to a process").pipe(Effect.andThen(() => client.write(handle, data)))
  events.hold = (hold) => client.holdOutput(handle, hold)
  if (early.held) client.holdOutput(handle, true)
  return {
    pid,
    handle,
    pull: events.pull,
    write,
    // On a terminal, EOF is what Ctrl-D types.
    closeStdin: tty
      ? write(new Uint8Array([4]))
      : alive("close a process's stdin").pipe(Effect.andThen(() => client.closeStdin(handle))),
    signal: (signal) =>
      Effect.gen(function*() {
        yield* alive("signal a process")
        if (!client.signal(handle, signal)) {
          return yield* providerError(backend, "signal a process", "Invalid", `unknown signal '${signal}'`)
        }
      }),
    resize: (cols, rows) =>
      !tty
        ? Effect.fail(new Unsupported({ backend, feature: "resize of a process without a TTY" }))
        : !validSize(cols, rows)
        ? Effect.fail(invalidSize(backend, "resize a terminal", cols, rows))
        : alive("resize a terminal").pipe(Effect.andThen(() => client.resize(handle, cols, rows)))
  }
}

/**
 * Starts a process through the agent, with pipes or (spec.tty) on a terminal inside the computer,
 * followed for the Scope (its end lets go of the process and leaves it running).
 */
export const spawn = (backend: string, client: AgentClient, spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    yield* checkSpec(spec)
    const tty = spec.tty
    if (tty !== undefined && !validSize(tty.cols, tty.rows)) return yield* invalidSize(backend, "start a process", tty.cols, tty.rows)
    const followed = follow()
    const { events, handlers } = followed
    const env = tty !== undefined && spec.env["TERM"] === undefined ? { ...spec.env, TERM: DEFAULT_TERM } : spec.env
    const meta = recordMeta(spec.label ?? spec.argv.join(" "), spec.cwd)
    const { handle, pid } = yield* followedFor(
      client.spawn({ argv: spec.argv, cwd: spec.cwd, env, meta, direct: tty === undefined ? directArgv(spec.argv, env) : undefined }, handlers, tty),
      ({ handle }) => Effect.zipRight(client.unwatch(handle), Effect.sync(() => events.detach()))
    )
    return asProcess(backend, client, handle, pid, tty !== undefined, followed)
  })

/** Follows a process the computer holds from the given offsets, for the Scope. */
export const attach = (
  backend: string,
  client: AgentClient,
  handle: number,
  from: { readonly stdout: number; readonly stderr: number }
): Effect.Effect<{ readonly process: BackendProcess; readonly held: HeldProcess }, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const followed = follow(from)
    const { events, handlers } = followed
    const record = yield* followedFor(
      client.watch(handle, from, handlers),
      () => Effect.zipRight(client.unwatch(handle), Effect.sync(() => events.detach()))
    )
    return { process: asProcess(backend, client, handle, record.pid, record.tty, followed), held: heldProcess(record) }
  })

/** The computer's process table as the kernel reaches it through this connection. */
export const held = (backend: string, client: AgentClient): HeldProcesses => ({
  boot: client.boot ?? "",
  retention: { headBytes: client.welcome?.headBytes ?? 0, tailBytes: client.welcome?.tailBytes ?? 0 },
  list: Effect.map(client.list, (records) => records.map(heldProcess)),
  attach: (handle, from) => attach(backend, client, handle, from),
  read: (handle, stream, from, most) => client.read(handle, stream, from, most),
  note: (handle, text) => Effect.sync(() => client.note(handle, text)),
  following: (handle) => client.watching(handle)
})

/** The computer's lifecycle lease for a step, held for the Scope (one server at a time). */
export const lease = (backend: string, client: AgentClient, id: string, step: string): Effect.Effect<void, ProviderError, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.flatMap(client.step(true, step), ({ granted, holder }) =>
      granted
        ? Effect.void
        : Effect.fail(providerError(backend, `${step} computer '${id}'`, "Conflict", `another kilntainers server is in its ${holder || "lifecycle step"}; try again when it is done`))),
    () => Effect.ignore(client.step(false, step))
  )
