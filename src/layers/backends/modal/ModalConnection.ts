/**
 * A connection to a running sandbox: where the kernel starts processes, and how it learns that the
 * sandbox went away. Everything here belongs to the connection's Scope: the SDK handle, the watcher
 * that polls the sandbox every --watch interval (the owner of what would otherwise be the SDK's
 * unstoppable `wait()` loop), and the processes' pumps. Closing the Scope ends them all; the
 * sandbox itself is the kernel's to keep or remove.
 *
 * Processes: the sandbox's agent (ModalAgent.ts), when its tags hold the agent's key: it holds every
 * process, its record and its output (`held`), whatever server comes and goes; one exec per
 * connection (the connector), then a fork+exec per process. A sandbox without the key (made by an
 * older kilntainers), or one whose agent cannot start (no agent binary, an image without /bin/sh,
 * `cat`, `mkdir` or a writable root), runs each process under the wrapper in its own exec
 * (ModalExec.ts), held by this server: signals are `kill -s SIG -- -pgid` in a second exec; closing
 * a process's Scope SIGKILLs its session; TTY: the SDK's PTY (fixed 80x24) sized with `stty`; resize
 * = `stty -F <tty>` in a second exec. Preview URLs: the sandbox's Modal tunnels (`publicUrl`), for
 * the ports declared at its creation (--modal-preview-port).
 */
import type * as Scope from "effect/Scope"
import * as Chunk from "effect/Chunk"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { InvalidInput, type ProviderError, type SpawnFailed, Unsupported } from "../../../domain/Errors.js"
import { type BackendProcess, checkSpec, type Connection, type Instance, type SpawnSpec, throughEnv } from "../../../services/Backend.js"
import * as AgentProcesses from "../agent/AgentProcesses.js"
import type * as NativeBinaries from "../agent/NativeBinaries.js"
import * as ModalAgent from "./ModalAgent.js"
import { BACKEND, modalError } from "./ModalError.js"
import * as ModalExec from "./ModalExec.js"
import type { ModalGatewayService } from "./ModalGateway.js"
import { HOME, type ModalProvider } from "./ModalProvider.js"
import { payloadProblem } from "./ModalWrapper.js"
import { agentKeyOf, sandboxName } from "./SandboxIdentity.js"

/** Bound on the one poll a process makes when it lost its wrapper without a word. */
const ASK_TIMEOUT = "10 seconds"
/** How long an agent's process whose connector went waits for the connection to say why (ModalExec's, too). */
const LOSS_GRACE = "5 seconds"

const validSize = (cols: number, rows: number) =>
  Number.isInteger(cols) && Number.isInteger(rows) && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535

/** Why the sandbox is gone, from its exit code. */
export const lostReason = (instance: Instance, code: number, sandboxTimeoutSec: number) => {
  const which = `its Modal sandbox ${sandboxName(instance.metadata.id)} (${instance.providerId})`
  return code === 124
    ? `${which} reached its timeout (--sandbox-timeout, ${sandboxTimeoutSec} s now) and Modal ended it, with its files`
    : `${which} ended outside kilntainers (exit code ${code}): terminated from outside, or its main process ended`
}

export const connect = (options: {
  readonly gateway: ModalGatewayService
  readonly provider: ModalProvider
  readonly sandboxTimeoutSec: number
  /** The agent copied into sandboxes; none: every process runs under the wrapper (held by the server). */
  readonly binaries: Option.Option<NativeBinaries.NativeBinaries>
  /** The agent's options (--retain). */
  readonly agentArgs: ReadonlyArray<string>
}) =>
(instance: Instance): Effect.Effect<Connection, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const { provider } = options
    const sandbox = yield* Effect.acquireRelease(options.gateway.fromId(instance.providerId), (handle) => handle.detach)
    const lost = yield* Deferred.make<string>()
    let gone = false
    // Processes end before the handle goes, whichever Scope closes first (theirs or the connection's).
    const live = new Set<ModalExec.ModalProcess>()
    yield* Effect.addFinalizer(() =>
      Effect.forEach([...live], (process) => process.terminate, { concurrency: "unbounded", discard: true })
    )
    /** The sandbox has ended with this exit code: processes know at once, the kernel through `lost`. */
    const ended = (code: number) =>
      Effect.suspend(() => {
        gone = true
        return Deferred.succeed(lost, lostReason(instance, code, options.sandboxTimeoutSec))
      })
    yield* provider.watch(sandbox).pipe(Effect.flatMap(ended), Effect.forkScoped)

    const host: ModalExec.ExecHost = {
      exec: (request) => provider.call("start the process", sandbox.exec(request)),
      kill: (pgid, signal, session) => provider.signal(sandbox, pgid, signal, session),
      current: () => !gone,
      ended: sandbox.poll.pipe(
        Effect.timeout(ASK_TIMEOUT),
        Effect.flatMap((code) => (code === null ? Effect.succeed(false) : Effect.as(ended(code), true))),
        Effect.orElseSucceed(() => false)
      )
    }

    /** A process under the wrapper, in its own exec. */
    const spawnWrapped = (spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope> =>
      Effect.gen(function*() {
        const command = spec.argv.join(" ")
        yield* checkSpec(spec, throughEnv(BACKEND), payloadProblem)
        if (gone) return yield* modalError("start the process", "NotFound", "the sandbox has ended")
        const process = yield* Effect.acquireRelease(
          ModalExec.start({ host, spec, command }).pipe(Effect.tap((started) => Effect.sync(() => live.add(started)))),
          (started) => started.terminate.pipe(Effect.ensuring(Effect.sync(() => live.delete(started))))
        )
        return {
          pid: process.pid,
          pull: process.pull,
          write: process.write,
          closeStdin: process.closeStdin,
          signal: process.signal,
          resize: (cols, rows) =>
            Effect.gen(function*() {
              if (process.tty === undefined) {
                return yield* new Unsupported({ backend: BACKEND, feature: "resize of a process without a TTY" })
              }
              if (!validSize(cols, rows)) return yield* modalError("resize the terminal", "Invalid", `invalid terminal size ${cols}x${rows}`)
              if (gone) return yield* modalError("resize the terminal", "NotFound", "the sandbox has ended")
              yield* provider.resize(sandbox, process.tty, cols, rows)
            })
        } satisfies BackendProcess
      })

    /** Modal's tunnel of a port: only ports declared when the sandbox was made have one. */
    const publicUrl = (port: number) =>
      provider.call("read the sandbox's tunnels", sandbox.tunnels).pipe(Effect.flatMap((urls) => {
        const url = urls.get(port)
        if (url !== undefined) return Effect.succeed(`${url}/`)
        const declared = [...urls.keys()].join(", ") || "none"
        return Effect.fail(
          new InvalidInput({
            message: `port ${port} has no Modal tunnel: Modal serves only ports declared when the sandbox was made ` +
              `(--modal-preview-port; this computer's: ${declared})`
          })
        )
      }))

    const agentDied = yield* Deferred.make<string>()
    const tags = yield* provider.call("read the sandbox's tags", sandbox.tags)
    const agent = yield* openAgent(instance, options, tags, spawnWrapped, host.exec, (reason) => Deferred.unsafeDone(agentDied, Effect.succeed(reason)))
    // The connector's exec ended: the sandbox's end says why when it is the cause.
    yield* Deferred.await(agentDied).pipe(
      Effect.flatMap((reason) =>
        sandbox.poll.pipe(
          Effect.timeout(ASK_TIMEOUT),
          Effect.flatMap((code) => (code === null ? Effect.fail(reason) : ended(code))),
          Effect.catchAll(() => Deferred.succeed(lost, `its agent in ${sandboxName(instance.metadata.id)} could not be reached: ${reason}`))
        )
      ),
      Effect.forkScoped
    )
    if (Option.isNone(agent)) return { home: HOME, spawn: spawnWrapped, lost: Deferred.await(lost), publicUrl } satisfies Connection
    const client = agent.value
    const known = Deferred.await(lost)
    const spawn = (spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope> =>
      gone
        ? modalError("start the process", "NotFound", "the sandbox has ended")
        : Effect.map(AgentProcesses.spawn(BACKEND, client, spec), (process) => untilLoss(process, known))
    const held = AgentProcesses.held(BACKEND, client)
    return {
      home: HOME,
      spawn,
      lost: known,
      publicUrl,
      held: {
        ...held,
        attach: (handle, from) => Effect.map(held.attach(handle, from), (found) => ({ ...found, process: untilLoss(found.process, known) }))
      },
      lease: (step: string) => AgentProcesses.lease(BACKEND, client, instance.metadata.id, step)
    } satisfies Connection
  })

/**
 * A process of the agent whose events end without its exit (the connector's exec ended: the sandbox
 * went, or Modal's router dropped it) ends only once the connection knows why, or after LOSS_GRACE,
 * so that the kernel notes the loss (`ps` says the sandbox ended) rather than "lost the process".
 */
const untilLoss = (process: BackendProcess, known: Effect.Effect<string>): BackendProcess => {
  let exited = false
  return {
    ...process,
    pull: process.pull.pipe(
      Effect.tap((events) => Effect.sync(() => void (exited ||= Chunk.some(events, (event) => event._tag === "Exit")))),
      Effect.catchAll((end) => (exited ? Effect.fail(end) : known.pipe(Effect.timeout(LOSS_GRACE), Effect.ignore, Effect.zipRight(Effect.fail(end)))))
    )
  }
}

/**
 * The sandbox's agent, when its tags hold a key and the agent starts; none (with a warning) when it
 * cannot: the connection then runs its processes under the wrapper.
 */
const openAgent = (
  instance: Instance,
  options: { readonly binaries: Option.Option<NativeBinaries.NativeBinaries>; readonly agentArgs: ReadonlyArray<string> },
  tags: Readonly<Record<string, string>>,
  spawn: (spec: SpawnSpec) => Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope>,
  exec: ModalExec.ExecHost["exec"],
  onLost: (reason: string) => void
) =>
  Effect.gen(function*() {
    const key = agentKeyOf(tags)
    if (Option.isNone(key)) return Option.none()
    const name = sandboxName(instance.metadata.id)
    if (Option.isNone(options.binaries)) {
      yield* Effect.logWarning(`${BACKEND} backend: ${name}: no agent binary for ${ModalAgent.AGENT_PLATFORM}; its processes end with this server`)
      return Option.none()
    }
    const started = yield* Effect.either(ModalAgent.open({ spawn, exec, binaries: options.binaries.value, key: key.value, args: options.agentArgs, onLost }))
    if (started._tag === "Right") return Option.some(started.right)
    yield* Effect.logWarning(`${BACKEND} backend: ${name}: its agent cannot start (${started.left.message}); its processes run in Modal execs and end with this server`)
    return Option.none()
  })
