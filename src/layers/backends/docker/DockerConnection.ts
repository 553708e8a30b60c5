/**
 * A connection to a running container: where its processes start, and how its loss is noticed.
 *
 * Processes run as the guest user `agent` (DockerGuest.ts, made so by a root step before the agent
 * starts) through the container's kt-agent (DockerAgent.ts), pipes and terminals alike: one
 * engine exec per connection (the connector), then a fork+exec per process; the agent holds each
 * process, its record and its output (`held`), keeps each process tree together (SIGKILL ends all
 * of it) and adds no_new_privs and its seccomp filter. Where the agent cannot run (another
 * architecture, a read-only root), every process is an Engine API exec instead (DockerExec.ts), and
 * the server holds them.
 *
 * `lost` completes when the container is removed or stopped from outside (the engine's events,
 * DockerEvents.ts) or the connection to its agent ends; the state of the container says which, in
 * the sentence. Everything here belongs to the connection's Scope: closing it lets go of the agent
 * (a temporary computer's ends with it; a permanent one's runs on) and ends the watchers.
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as ExecutionStrategy from "effect/ExecutionStrategy"
import * as Exit from "effect/Exit"
import * as Option from "effect/Option"
import * as Scope from "effect/Scope"
import type { ProviderError, SpawnFailed } from "../../../domain/Errors.js"
import type { BackendProcess, Connection, Instance, SpawnSpec } from "../../../services/Backend.js"
import type { ComputerEgress } from "../../egress/Egress.js"
import type * as AgentClient from "../agent/AgentClient.js"
import * as AgentProcesses from "../agent/AgentProcesses.js"
import type * as NativeBinaries from "../agent/NativeBinaries.js"
import * as Relay from "../agent/Relay.js"
import * as DockerAgent from "./DockerAgent.js"
import { type Containers, containerName, HOME } from "./DockerContainers.js"
import type { Engine } from "./DockerEngine.js"
import * as DockerEvents from "./DockerEvents.js"
import * as DockerExec from "./DockerExec.js"
import * as DockerGuest from "./DockerGuest.js"
import * as DockerTrust from "./DockerTrust.js"

/** What connections of one backend share. */
export interface ConnectionContext {
  readonly engine: Engine
  readonly containers: Containers
  /** The agent's binary; none: every process is an Engine exec. */
  readonly binaries: Option.Option<NativeBinaries.NativeBinaries>
  /** Why the agent failed its check at startup: then every computer is refused, never run without it. */
  readonly agentInvalid?: ProviderError | undefined
  /** Images whose containers could not run the agent, and why: they use Engine exec at once. */
  readonly agentRefused: Map<string, string>
  /** A relay port inside each container whose connections the server serves (the egress proxy). */
  readonly relay?: Relay.RelaySettings | undefined
  /** The egress CA bundle, put into each container before its processes start. */
  readonly egress?: ComputerEgress | undefined
  /** The agent's options beside the relay (--retain, --max-finished). */
  readonly agentArgs: ReadonlyArray<string>
  /** How long an agent's start may take (DockerAgent.START_MS unless a test says otherwise). */
  readonly agentStartMs?: number | undefined
  /**
   * A computer can write a host directory: the agent refuses setuid/setgid modes (`--no-setid-files`),
   * and a container without the agent gets no processes at all (nothing else would refuse them).
   */
  readonly writesHostFiles?: boolean | undefined
  /** The ids of the guest user `agent` (DockerGuest.ts); undefined: the image's own user. */
  readonly guest?: DockerGuest.GuestIds | undefined
}

/**
 * A connection without the agent: its processes run through Engine exec. Unless the egress policy
 * is on: then the agent's relay is the container's only network (it runs with none), and a
 * computer without it would have no network at all, so the connection fails and says why.
 */
const withoutAgent = (context: ConnectionContext, instance: Instance, why: string) =>
  context.writesHostFiles === true
    ? Effect.fail(context.engine.fail(
      "start the computer's agent",
      "Unavailable",
      `${containerName(instance.metadata.id)}: ${why}. A computer that can write a host directory (a writable --mount or --volume) runs its processes only through the agent, which refuses setuid and setgid files there; use an image whose root lets the agent be copied into ${DockerAgent.AGENT_DIR} and run there`
    ))
    : context.relay === undefined
    ? Effect.succeed(Option.none<AgentClient.AgentClient>())
    : Effect.fail(context.engine.fail(
      "start the computer's agent",
      "Unavailable",
      `${containerName(instance.metadata.id)}: ${why}. With an egress policy (--allow-host) a container's only network is the agent's relay, so without the agent it would have none; use an image whose root lets the agent be copied into ${DockerAgent.AGENT_DIR} and run there, or start the server without an egress policy`
    ))

/** The agent of a connection, started in its own child scope so that a failed start leaves nothing behind. */
const startAgent = (context: ConnectionContext, instance: Instance, user: string | undefined, onLost: (reason: string) => void) =>
  Effect.gen(function*() {
    const { engine, binaries, agentRefused, relay } = context
    if (context.agentInvalid !== undefined) {
      return yield* engine.fail(
        "start the computer's agent",
        "Invalid",
        `${containerName(instance.metadata.id)} is refused: its agent failed verification (${context.agentInvalid.detail})`
      )
    }
    if (Option.isNone(binaries)) return yield* withoutAgent(context, instance, `no agent binary for the engine's architecture`)
    const refused = agentRefused.get(instance.metadata.image)
    if (refused !== undefined) return yield* withoutAgent(context, instance, `containers of ${instance.metadata.image} cannot run the agent (${refused})`)
    const state = yield* context.containers.inspectState(instance.providerId)
    if (Option.isNone(state) || !state.value.running) {
      return yield* engine.fail("connect to the container", "NotFound", `${containerName(instance.metadata.id)} is not running`)
    }
    const scope = yield* Scope.fork(yield* Effect.scope, ExecutionStrategy.sequential)
    const started = yield* Effect.gen(function*() {
      const listener = relay === undefined
        ? undefined
        : yield* Relay.listener((connection) => relay.handler(instance.metadata.id, connection))
      return yield* DockerAgent.open(engine, instance.providerId, binaries.value, {
        key: state.value.agentKey,
        bound: instance.metadata.temporary,
        user,
        startMs: context.agentStartMs,
        args: [
          ...(context.writesHostFiles === true ? ["--no-setid-files"] : []),
          ...(relay === undefined ? [] : ["--relay-port", String(relay.port)]),
          ...context.agentArgs
        ]
      }, { onLost, relay: listener })
    }).pipe(Scope.extend(scope), Effect.either)
    if (started._tag === "Right") return Option.some(started.right)
    yield* Scope.close(scope, Exit.void)
    // A container whose mounts a computer swapped fails for that (one clear error, naming the
    // mount), not for its image: other computers of the image keep their agent.
    yield* context.containers.checkMounts(instance.providerId)
    // A container that cannot run the agent still works through Engine exec (withoutAgent); one that
    // is not running cannot be connected to at all.
    const after = yield* context.containers.inspectState(instance.providerId)
    if (Option.isNone(after) || !after.value.running) {
      return yield* engine.fail("connect to the container", "NotFound", `${containerName(instance.metadata.id)} is not running`)
    }
    const why = `cannot ${started.left.operation}: ${started.left.detail}`
    // A slow start (a loaded engine) says nothing about the image: only this connection does without.
    const timedOut = started.left.reason === "Timeout"
    // Without its agent a permanent computer would hold nothing: its processes would end with this
    // server and nobody would be told. Refused instead, for a later call to start afresh.
    if (timedOut && !instance.metadata.temporary && context.writesHostFiles !== true && context.relay === undefined) {
      return yield* engine.fail(
        "start the computer's agent",
        "Timeout",
        `${containerName(instance.metadata.id)}: ${why}. A permanent computer runs its processes only through its agent, which keeps them whatever server comes and goes; the engine is slow to answer — try again`
      )
    }
    if (!timedOut) agentRefused.set(instance.metadata.image, why)
    if (relay === undefined) {
      yield* Effect.logWarning(
        timedOut
          ? `${engine.name} backend: ${containerName(instance.metadata.id)}: ${why}; its processes run through Engine API exec`
          : `${engine.name} backend: containers of ${instance.metadata.image} cannot run the agent (${why}); their processes run through Engine API exec`
      )
    }
    return yield* withoutAgent(context, instance, why)
  })

/** Connects to a running container. */
export const connect = (context: ConnectionContext) => (instance: Instance): Effect.Effect<Connection, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const { engine, containers } = context
    const name = containerName(instance.metadata.id)
    const lost = yield* Deferred.make<string>()
    const agentDied = yield* Deferred.make<string>()
    /** Why the container is gone, once it is: its processes' pids mean nothing any more. */
    let gone: string | undefined
    let open = true
    yield* Effect.addFinalizer(() => Effect.sync(() => void (open = false)))
    const markLost = (reason: string) =>
      Effect.suspend(() => {
        gone ??= reason
        return Deferred.succeed(lost, reason)
      })

    const since = yield* Clock.currentTimeMillis
    if (context.egress !== undefined) yield* DockerTrust.install(engine, instance.providerId, instance.metadata.id, context.egress)
    // Root steps first (the bundle, the user), then every process as the guest. An adopted container
    // (--docker-container) is the user's own: its users are left as they are.
    const user = context.guest === undefined || instance.metadata.external === true
      ? undefined
      : yield* DockerGuest.prepare(engine, instance.providerId, instance.metadata.id, context.guest)
    const agent = yield* startAgent(context, instance, user, (reason) => Deferred.unsafeDone(agentDied, Effect.succeed(reason)))
    // Followed once the agent runs (off the path to the first process), from before it started.
    yield* DockerEvents.watch(engine, containers, instance.providerId, name, since).pipe(
      Effect.flatMap(markLost),
      Effect.forkScoped
    )
    // The agent ends with its container: the container's state says what happened, when it can. Its
    // connection (an exec) may end before the engine says the container stopped: asked a few times.
    const diagnosed = (reason: string) =>
      Effect.gen(function*() {
        for (let look = 0; look < 5; look++) {
          yield* Effect.sleep("200 millis")
          const found = yield* DockerEvents.diagnose(containers, instance.providerId, name)
          if (Option.isSome(found)) return found.value
        }
        return `its agent ended: ${reason}`
      })
    yield* Deferred.await(agentDied).pipe(
      Effect.flatMap(diagnosed),
      Effect.flatMap(markLost),
      Effect.forkScoped
    )

    const host: DockerExec.ExecHost = { engine, providerId: instance.providerId, user, current: () => open && gone === undefined }
    const spawn = (spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | ProviderError, Scope.Scope> =>
      Effect.suspend(() => {
        if (gone !== undefined) {
          return Effect.fail(engine.fail("start the process", "NotFound", `computer ${instance.metadata.id} is gone: ${gone}`))
        }
        if (Option.isNone(agent)) return DockerExec.spawn(host, spec)
        return AgentProcesses.spawn(engine.name, agent.value, spec)
      })
    return {
      home: HOME,
      spawn,
      lost: Deferred.await(lost),
      // Without the agent (an image that cannot run it) nothing is held, and no channel reaches a port inside.
      ...(Option.isNone(agent) ? {} : {
        held: AgentProcesses.held(engine.name, agent.value),
        lease: (step: string) => AgentProcesses.lease(engine.name, agent.value, instance.metadata.id, step),
        openPort: (port: number) => agent.value.openPort(port)
      })
    }
  })
