/**
 * The Modal backend as a provider: small, stateless calls on sandboxes — find ours (by name for one
 * computer, by tags for the rest), create one (with its home directory), remove one, watch for its
 * end, run a short command, signal and resize processes. Every call is bounded by the call timeout
 * and fails with a ProviderError named after what we were doing; deciding what to do about a
 * failure is the kernel's.
 *
 * Modal has no restart that keeps a sandbox's files, no stopped state and no keep-alive (a sandbox
 * always ends at its timeout): there is no restart or renewal here, and `start` only accepts a
 * sandbox that still runs.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schedule from "effect/Schedule"
import * as Stream from "effect/Stream"
import type { ComputerMetadata } from "../../../domain/ComputerMetadata.js"
import type { ProviderError } from "../../../domain/Errors.js"
import type { Instance, Query } from "../../../services/Backend.js"
import { during, modalError } from "./ModalError.js"
import type { ModalGatewayService, SandboxHandle } from "./ModalGateway.js"
import { newKey } from "../agent/AgentHandshake.js"
import type { ModalBackendOptions } from "./ModalOptions.js"
import { killArgv, resizeArgv } from "./ModalWrapper.js"
import { instanceFrom, sandboxName, tagSelector, tagsFor } from "./SandboxIdentity.js"

/** The directory that is HOME and the default working directory of processes. */
export const HOME = "/home/agent"
/** How often, and how long at most, `remove` asks whether a terminated sandbox has ended. */
const REMOVE_POLL = Duration.millis(500)
const REMOVE_WAIT = Duration.seconds(30)

/** The sandboxes' options (ModalOptions.ts), the gateway, and the bounds on calls and polls. */
export interface ProviderConfig
  extends Pick<ModalBackendOptions, "appName" | "cpu" | "memoryMb" | "gpu" | "region" | "sandboxTimeoutSec" | "network" | "outbound" | "previewPorts">
{
  readonly gateway: ModalGatewayService
  readonly callTimeoutMs: number
  readonly watchIntervalMs: number
}

export interface ShortResult {
  readonly stdout: string
  readonly stderr: string
  readonly code: number
}

export const make = (config: ProviderConfig) => {
  const { gateway } = config

  /** A Modal call, bounded by the call timeout, its failure named after what we were doing. */
  const call = <A>(operation: string, effect: Effect.Effect<A, ProviderError>) =>
    effect.pipe(
      Effect.timeoutFail({
        duration: config.callTimeoutMs,
        onTimeout: () => modalError(operation, "Timeout", `no answer from Modal within ${config.callTimeoutMs / 1000} s`)
      }),
      Effect.mapError(during(operation))
    )

  /** A handle on a sandbox for the length of `use`. */
  const withSandbox = <A>(sandboxId: string, use: (sandbox: SandboxHandle) => Effect.Effect<A, ProviderError>) =>
    Effect.acquireUseRelease(gateway.fromId(sandboxId), use, (sandbox) => sandbox.detach)

  /** The sandbox as an Instance when its tags are ours (and match the query). */
  const read = (sandbox: SandboxHandle, query: Query) =>
    call(`read the tags of the sandbox ${sandbox.sandboxId}`, sandbox.tags).pipe(
      Effect.map((tags) =>
        instanceFrom(sandbox.sandboxId, tags).pipe(Option.filter(({ metadata }) =>
          (query.id === undefined || metadata.id === query.id) &&
          (query.temporary === undefined || metadata.temporary === query.temporary)
        ))
      ),
      Effect.ensuring(sandbox.detach)
    )

  /** The running sandbox under a computer's name, whoever made it. */
  const named = (id: string) => call(`look up the sandbox ${sandboxName(id)}`, gateway.fromName(config.appName, sandboxName(id)))

  /**
   * Our running sandboxes: one computer's by its name (the tags must name the same id, so even a
   * hash collision of long names could not hand over another's sandbox), the others by tags.
   */
  const find = (query: Query): Effect.Effect<ReadonlyArray<Instance>, ProviderError> =>
    Effect.gen(function*() {
      if (query.id !== undefined) {
        const sandbox = yield* named(query.id)
        return Option.isNone(sandbox) ? [] : Option.toArray(yield* read(sandbox.value, query))
      }
      const sandboxes = yield* call("list sandboxes", gateway.list(config.appName, tagSelector(query)))
      const found = yield* Effect.forEach(sandboxes, (sandbox) => read(sandbox, query), { concurrency: 8 })
      return found.flatMap(Option.toArray)
    })

  /** Whether the sandbox has ended (an unknown one has). */
  const hasEnded = (sandbox: SandboxHandle) =>
    call("poll the sandbox", sandbox.poll).pipe(
      Effect.map((code) => code !== null),
      Effect.catchIf((error) => error.reason === "NotFound", () => Effect.succeed(true))
    )

  /**
   * Terminates a sandbox and waits (bounded) until Modal says it has ended, so that its name is
   * free and no lookup finds it any more: a factory reset creates the new one under the same name
   * right after. One that has already ended, or is unknown, is fine.
   */
  const remove = (instance: Instance): Effect.Effect<void, ProviderError> =>
    withSandbox(instance.providerId, (sandbox) => {
      const operation = `terminate the sandbox ${instance.providerId}`
      const ended = hasEnded(sandbox).pipe(
        Effect.repeat({ schedule: Schedule.spaced(REMOVE_POLL), until: (done) => done }),
        Effect.timeoutFail({
          duration: REMOVE_WAIT,
          onTimeout: () => modalError(operation, "Timeout", `Modal has not ended it within ${Duration.format(REMOVE_WAIT)}`)
        })
      )
      return call(operation, sandbox.terminate).pipe(
        Effect.matchEffect({
          onSuccess: () => Effect.asVoid(ended),
          onFailure: (error) =>
            error.reason === "NotFound" ? Effect.void : hasEnded(sandbox).pipe(
              Effect.orElseSucceed(() => false),
              Effect.flatMap((done) => (done ? Effect.void : Effect.fail(error)))
            )
        })
      )
    })

  /** A short command: its whole output and exit code (it runs to its end). */
  const run = (sandbox: SandboxHandle, what: string, argv: ReadonlyArray<string>) =>
    Effect.gen(function*() {
      const exec = yield* call(what, sandbox.exec({ argv, pty: false }))
      const [stdout, stderr] = yield* call(what, Effect.all([
        exec.stdout.pipe(Stream.decodeText(), Stream.mkString),
        exec.stderr.pipe(Stream.decodeText(), Stream.mkString)
      ], { concurrency: "unbounded" }))
      // The output has ended, so the command has: its exit status is there to read.
      const code = yield* call(what, exec.wait)
      return { stdout, stderr, code } satisfies ShortResult
    })

  /**
   * A name taken: by our own sandbox of this computer it is a Conflict (the kernel finds and
   * attaches it); by anyone else's, a clear refusal that leaves that sandbox alone.
   */
  const nameTaken = (metadata: ComputerMetadata, taken: ProviderError) =>
    named(metadata.id).pipe(
      Effect.flatMap(Option.match({
        onNone: () => Effect.succeed(true),
        onSome: (sandbox) => Effect.map(read(sandbox, { id: metadata.id }), Option.isSome)
      })),
      Effect.orElseSucceed(() => true),
      Effect.flatMap((ours) =>
        Effect.fail(ours ? taken : modalError(
          taken.operation,
          "Invalid",
          `a sandbox named ${sandboxName(metadata.id)} is running in the Modal app '${config.appName}' but was not created by kilntainers for computer '${metadata.id}' (its tags do not match); it is left untouched — use another computer id or app`
        ))
      )
    )

  /**
   * Creates and starts the sandbox of a computer, with its home directory; from a snapshot's image
   * when `imageId` is given (a fork). Nothing is left behind
   * when a step fails or the call is given up (the gateway cancels a late create).
   */
  const create = (metadata: ComputerMetadata, imageId?: string): Effect.Effect<Instance, ProviderError> =>
    Effect.gen(function*() {
      const name = sandboxName(metadata.id)
      const endsAt = (yield* Clock.currentTimeMillis) + config.sandboxTimeoutSec * 1000
      const operation = `create the sandbox ${name} from ${imageId ?? metadata.image}`
      const sandbox = yield* call(operation, gateway.create({
        appName: config.appName,
        image: metadata.image,
        imageId,
        cpu: config.cpu,
        memoryMiB: config.memoryMb,
        gpu: config.gpu,
        region: config.region,
        timeoutMs: config.sandboxTimeoutSec * 1000,
        blockNetwork: !config.network && config.outbound === undefined,
        outbound: config.outbound,
        name,
        tags: tagsFor(metadata, endsAt, newKey()),
        tunnelPorts: config.previewPorts
      })).pipe(Effect.catchIf((error) => error.reason === "Conflict", (error) => nameTaken(metadata, error)))
      const instance: Instance = { providerId: sandbox.sandboxId, metadata, state: "running", endsAt }
      yield* run(sandbox, "prepare the home directory", ["mkdir", "-p", "--", HOME]).pipe(
        Effect.filterOrFail((done) => done.code === 0, (done) =>
          modalError("prepare the home directory", "Failed", `mkdir ${HOME} failed with exit code ${done.code}: ${done.stderr.trim()}`)),
        Effect.tapError(() => remove(instance).pipe(Effect.ignore)),
        Effect.onInterrupt(() => remove(instance).pipe(Effect.ignore)),
        Effect.ensuring(sandbox.detach)
      )
      return instance
    })

  /** A Modal sandbox is running or gone: there is nothing to start again. */
  const start = (instance: Instance): Effect.Effect<Instance, ProviderError> =>
    instance.state === "running"
      ? Effect.succeed(instance)
      : Effect.fail(modalError(
        `start the sandbox ${instance.providerId}`,
        "NotFound",
        "a Modal sandbox that has ended cannot be started again (its files went with it)"
      ))

  /**
   * Completes with the sandbox's exit code once it has ended (terminated, timed out, main process
   * ended). It asks Modal every `watchIntervalMs` (read with Clock) and never fails: an unanswered
   * poll is tried again on the next tick. Interrupting it ends it; nothing is left running.
   */
  const watch = (sandbox: SandboxHandle): Effect.Effect<number> => {
    const poll = sandbox.poll.pipe(
      Effect.timeout(config.callTimeoutMs),
      Effect.option,
      Effect.map((polled) => Option.flatMap(polled, Option.fromNullable))
    )
    const loop: Effect.Effect<number> = poll.pipe(
      Effect.flatMap(Option.match({
        onSome: Effect.succeed,
        onNone: () => Effect.sleep(Duration.millis(config.watchIntervalMs)).pipe(Effect.zipRight(Effect.suspend(() => loop)))
      }))
    )
    return loop
  }

  /** Delivers a signal (canonical name) to a process group; `session` also reaches its session. */
  const signal = (sandbox: SandboxHandle, pgid: number, name: string, session: boolean) =>
    run(sandbox, "signal the process", killArgv(name, pgid, session)).pipe(
      Effect.flatMap((result) =>
        // 1: no such group (it has ended) — not an error.
        result.code === 0 || result.code === 1
          ? Effect.void
          : Effect.fail(modalError(`deliver ${name}`, "Failed", result.stderr.trim() || `exit code ${result.code}`))
      )
    )

  /** Sets the size of a process's terminal. */
  const resize = (sandbox: SandboxHandle, tty: string, cols: number, rows: number) =>
    run(sandbox, "resize the terminal", resizeArgv(tty, cols, rows)).pipe(
      Effect.flatMap((result) =>
        result.code === 0
          ? Effect.void
          : Effect.fail(modalError("resize the terminal", "Failed", result.stderr.trim() || `exit code ${result.code}`))
      )
    )

  return { call, find, create, start, remove, run, watch, signal, resize, withSandbox }
}

export type ModalProvider = ReturnType<typeof make>
