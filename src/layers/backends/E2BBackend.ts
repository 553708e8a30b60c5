/**
 * The E2B backend: a computer is one E2B sandbox, driven with the official `e2b` SDK (v2).
 *
 * Sandboxes carry metadata (E2B's labels):
 *   kilntainers=true, kilntainers-computer-id=<id>, kilntainers-temporary=true|false,
 *   kilntainers-image=<template>, kilntainers-instance=<server instance id>,
 *   kilntainers-created=<ISO time>, kilntainers-owner-host / owner-pid / owner-start (the creating
 *   server process: host name, pid, start time from /proc/<pid>/stat field 22),
 *   kilntainers-create-nonce (one per create call: finds a sandbox whose create answer was lost).
 * `--e2b-metadata` pairs are added; ours win on a clash.
 *
 * Lifecycle:
 *   open     finds the sandbox by metadata (kilntainers=true + computer id) through the SDK's list;
 *            `Sandbox.connect` re-attaches to a running one or resumes a paused one; else
 *            `Sandbox.create(template, {timeoutMs, metadata, envs})`. A permanent sandbox is created
 *            with `lifecycle.onTimeout = "pause"`, so even a forgotten one is paused, not deleted.
 *   release  temporary → killed; permanent → paused (`pause({keepMemory: false})`, a filesystem
 *            snapshot), found again by metadata by a later server.
 *   keep-alive  while open, `setTimeout(--e2b-sandbox-timeout)` every third of that timeout
 *            (at least every 5 minutes), so a computer in use never reaches its end of life.
 *   restart  E2B has no restart: pause with `keepMemory: false` and resume — a cold boot that keeps
 *            the filesystem (processes and /tmp in memory are gone). Temporary or permanent alike.
 *   factoryReset  kill, then create again from the template recorded in kilntainers-image.
 *   destroy  kill.
 *   lost     completes when the sandbox is gone other than through the handle: the keep-alive
 *            finds it missing (killed, expired) or paused from outside, or a process's stream drops
 *            and the sandbox is then found gone.
 *   Reaper   E2B cannot tell whether the server that made a sandbox is alive. At layer build,
 *            temporary sandboxes created by a server process on THIS host (owner-host) that is no
 *            longer running (owner-pid + owner-start) and is not this instance are killed.
 *            Temporary sandboxes of other hosts are left to expire by their own timeout.
 *
 * Processes: envd's process service. argv is shell-quoted into the command string that envd runs
 * with `/bin/bash -l -c`; the script makes the process the leader of its own process group (pid ==
 * pgid: it already is when envd made it one, else `exec setsid` in place keeps the pid) and sets
 * the exact SpawnSpec environment with `env`, then execs argv. Output is read from the SDK's own
 * Connect client for the process service (`commands.rpc`, a protected member) so stdout/stderr
 * arrive as the bytes the process wrote — the public `onStdout/onStderr` callbacks hand out
 * UTF-8-decoded strings, which destroys binary output. Exit comes from the stream's end event,
 * which envd sends after all of the process's output. When that client is not there (another SDK
 * version), the public `commands.run({background: true, onStdout, onStderr})` is used instead and
 * output is re-encoded as UTF-8 (binary output is then not exact).
 *   write / closeStdin  `commands.sendStdin` / `commands.closeStdin` (envd ≥ 0.5.2); TTY:
 *            `pty.sendInput`, EOF = Ctrl-D.
 *   signal   envd only knows SIGKILL and SIGTERM for one pid; every signal is delivered to the
 *            process group by a second command, `kill -s SIG -- -<pgid>`.
 *   TTY      the same Start call with a PTY of the asked size; `pty.resize` resizes it.
 */
import { Deferred, Duration, Effect, Exit, Layer, Option, Redacted, Ref, Schedule, Stream } from "effect"
import type { Chunk } from "effect"
import { Chunk as C } from "effect"
import {
  AuthenticationError,
  CommandExitError,
  NotFoundError,
  RateLimitError,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
  ServiceBusyError,
  TimeoutError
} from "e2b"
import type { CommandHandle, SandboxInfo } from "e2b"
import { randomUUID } from "node:crypto"
import { hostname } from "node:os"
import { BackendError, SpawnFailed, Unsupported } from "../../domain/Errors.js"
import { normalizeSignal } from "../../domain/Signals.js"
import type {
  BackendComputer,
  BackendProcess,
  Capabilities,
  ComputerSpec,
  ExitInfo,
  ProcessEvent,
  ProviderComputer,
  SpawnSpec
} from "../../services/Backend.js"
import { Backend } from "../../services/Backend.js"
import { processStartTime } from "./ProcessOwner.js"

export interface E2BBackendOptions {
  /** --e2b-api-key / E2B_API_KEY (never logged). */
  readonly apiKey: Redacted.Redacted<string>
  /** --e2b-template, default "base". */
  readonly template: string
  /** --e2b-sandbox-timeout: the lifetime the keep-alive keeps renewing, seconds (default 3600). */
  readonly sandboxTimeoutSec: number
  /** --e2b-metadata k=v: added to ours. */
  readonly metadata: Readonly<Record<string, string>>
  /** --e2b-env k=v: sandbox-wide environment. */
  readonly envs: Readonly<Record<string, string>>
  /** The SDK's apiUrl (tests: the fake). */
  readonly apiUrl: string | undefined
  /** The SDK's sandboxUrl (tests: the fake's envd). */
  readonly sandboxUrl: string | undefined
  readonly domain: string | undefined
  readonly instanceId: string
  /** HOME and default working directory inside the sandbox; E2B templates use /home/user. */
  readonly home?: string | undefined
  /** Per-request timeout of control-plane and envd calls (the SDK's requestTimeoutMs); default 30 s. */
  readonly requestTimeoutMs?: number | undefined
  /** How often the keep-alive renews the lifetime; default a third of the timeout, at most 5 min. */
  readonly keepAliveIntervalMs?: number | undefined
  /** Tests: use the SDK's public string-callback path for process output. */
  readonly publicOutputApi?: boolean | undefined
}

const NAME = "e2b"
export const DEFAULT_HOME = "/home/user"
const DEFAULT_REQUEST_TIMEOUT_MS = 30_000
const LIST_PAGE = 100

export const META = {
  marker: "kilntainers",
  computerId: "kilntainers-computer-id",
  temporary: "kilntainers-temporary",
  image: "kilntainers-image",
  instance: "kilntainers-instance",
  created: "kilntainers-created",
  ownerHost: "kilntainers-owner-host",
  ownerPid: "kilntainers-owner-pid",
  ownerStart: "kilntainers-owner-start",
  nonce: "kilntainers-create-nonce"
} as const

/**
 * What works on E2B. restart: pause + resume (filesystem kept, a cold boot); files: the runtime
 * reads and writes files with processes, whose output is exact bytes; networkControl: not offered.
 */
export const capabilities: Capabilities = {
  pty: true,
  stdin: true,
  signals: true,
  restart: true,
  factoryReset: true,
  persistence: true,
  files: true,
  networkControl: false
}

// ---------------------------------------------------------------------------------------------
// Shell quoting and the process script

const SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/

/** POSIX shell quoting of one word: safe words as they are, else single quotes ('\'' for a quote). */
export const shellQuote = (word: string): string => (SAFE.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`)

/** A command line that runs exactly argv. */
export const shellJoin = (argv: ReadonlyArray<string>): string => argv.map(shellQuote).join(" ")

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/

/**
 * The script envd runs with `bash -l -c`: the process becomes its own process group (pgid = the
 * pid envd reports) and gets exactly `env` on top of the sandbox's, then execs argv.
 */
export const processScript = (argv: ReadonlyArray<string>, env: Readonly<Record<string, string>>): string => {
  const assignments = Object.entries(env).filter(([key]) => ENV_NAME.test(key)).map(([key, value]) => shellQuote(`${key}=${value}`))
  // `env` would take a first word containing '=' as an assignment: run such a word through `command`.
  const program = argv[0]!.includes("=") ? ["sh", "-c", 'exec "$@"', "sh", ...argv] : argv
  const exec = shellJoin(["env", ...assignments, ...program])
  return `if [ "$(cut -d' ' -f5 /proc/$$/stat)" = "$$" ]; then exec ${exec}; else exec setsid ${exec}; fi`
}

const SIGNAL_SCRIPT = `kill -s "$1" -- "-$2" 2>/dev/null || kill -s "$1" "$2" 2>/dev/null; exit 0`

const GO_SIGNALS: Record<string, string> = {
  hangup: "SIGHUP",
  interrupt: "SIGINT",
  quit: "SIGQUIT",
  "illegal instruction": "SIGILL",
  "trace/breakpoint trap": "SIGTRAP",
  aborted: "SIGABRT",
  "bus error": "SIGBUS",
  "floating point exception": "SIGFPE",
  killed: "SIGKILL",
  "user defined signal 1": "SIGUSR1",
  "segmentation fault": "SIGSEGV",
  "user defined signal 2": "SIGUSR2",
  "broken pipe": "SIGPIPE",
  "alarm clock": "SIGALRM",
  terminated: "SIGTERM"
}

/** envd's end event (Go's ProcessState) as ExitInfo. */
export const exitInfo = (end: { readonly exitCode: number; readonly status?: string | undefined }): ExitInfo => {
  const signal = /^signal: (.+?)( \(core dumped\))?$/.exec(end.status ?? "")
  if (signal) return { exitCode: null, signal: GO_SIGNALS[signal[1]!] ?? "SIGKILL" }
  return { exitCode: end.exitCode, signal: null }
}

const LOST_EXIT: ExitInfo = { exitCode: null, signal: "SIGKILL" }

// ---------------------------------------------------------------------------------------------
// SDK calls

/** A failed SDK call, kept raw until it becomes a BackendError. */
interface CallFailure {
  readonly what: string
  readonly error: unknown
}

const statusOf = (error: unknown): number | undefined => {
  if (error instanceof AuthenticationError) return 401
  if (error instanceof RateLimitError) return 429
  if (error instanceof ServiceBusyError) return 503
  if (error instanceof SandboxNotFoundError || error instanceof NotFoundError) return 404
  const code = (error as { statusCode?: unknown } | null)?.statusCode
  if (typeof code === "number") return code
  const leading = error instanceof Error ? /^(\d{3}):/.exec(error.message) : null
  return leading ? Number(leading[1]) : undefined
}

const isNotFound = (error: unknown) => statusOf(error) === 404

const isRequestTimeout = (error: unknown) =>
  error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError") && !(error instanceof TimeoutError)

/** 5xx, 429, request timeouts and transport errors: worth another try for idempotent calls. */
const isTransient = (failure: CallFailure) => {
  const status = statusOf(failure.error)
  if (status !== undefined) return status >= 500 || status === 429
  const error = failure.error
  return isRequestTimeout(error) || (error instanceof TypeError && /fetch failed|terminated|socket/i.test(error.message))
}

// ---------------------------------------------------------------------------------------------
// The process service client (the SDK's own Connect client; see the header)

interface ProcessStartRequest {
  readonly process: {
    readonly cmd: string
    readonly args: ReadonlyArray<string>
    readonly envs: Readonly<Record<string, string>>
    readonly cwd?: string
  }
  readonly pty?: { readonly size: { readonly cols: number; readonly rows: number } }
  readonly stdin?: boolean
}

interface ProcessStreamMessage {
  readonly event?: {
    readonly event:
      | { readonly case: "start"; readonly value: { readonly pid: number } }
      | {
        readonly case: "data"
        readonly value: {
          readonly output:
            | { readonly case: "stdout" | "stderr" | "pty"; readonly value: Uint8Array }
            | { readonly case: undefined; readonly value?: undefined }
        }
      }
      | { readonly case: "end"; readonly value: { readonly exitCode: number; readonly status: string; readonly error?: string } }
      | { readonly case: "keepalive" | undefined; readonly value?: unknown }
  }
}

interface ProcessRpc {
  readonly start: (
    request: ProcessStartRequest,
    options: { readonly headers?: Record<string, string>; readonly signal?: AbortSignal; readonly timeoutMs?: number }
  ) => AsyncIterable<ProcessStreamMessage>
}

const processRpc = (sandbox: Sandbox): ProcessRpc | undefined => {
  const rpc = (sandbox.commands as unknown as { readonly rpc?: Partial<ProcessRpc> }).rpc
  return typeof rpc?.start === "function" ? (rpc as ProcessRpc) : undefined
}

// ---------------------------------------------------------------------------------------------

const fail = (reason: string) => new BackendError({ backend: NAME, reason })

/** The E2B backend. */
export const make = (options: E2BBackendOptions) =>
  Effect.gen(function*() {
    const home = options.home ?? DEFAULT_HOME
    const requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS
    const timeoutMs = options.sandboxTimeoutSec * 1000
    const keepAliveMs = options.keepAliveIntervalMs ?? Math.max(1000, Math.min(Math.floor(timeoutMs / 3), 5 * 60_000))
    const secret = Redacted.value(options.apiKey)
    const ownerHost = hostname()
    const self = { pid: String(process.pid), start: processStartTime(process.pid) ?? "" }
    const connection = {
      apiKey: secret,
      requestTimeoutMs,
      ...(options.apiUrl !== undefined ? { apiUrl: options.apiUrl } : {}),
      ...(options.sandboxUrl !== undefined ? { sandboxUrl: options.sandboxUrl } : {}),
      ...(options.domain !== undefined ? { domain: options.domain } : {})
    }

    /** Never let the key into a message, whatever the SDK or the service put there. */
    const scrub = (text: string) => (secret.length >= 4 ? text.split(secret).join("<redacted>") : text)

    const explain = (failure: CallFailure): string => {
      const { error, what } = failure
      const status = statusOf(error)
      const message = scrub(error instanceof Error ? error.message : String(error))
      if (status === 401) return `${what}: the E2B API key was rejected (check --e2b-api-key / E2B_API_KEY)`
      if (isRequestTimeout(error)) return `${what}: no answer from E2B within ${requestTimeoutMs} ms`
      if (status !== undefined && status >= 500) return `${what}: the E2B service failed (${message})`
      return `${what}: ${message}`
    }
    const toBackendError = (failure: CallFailure) => fail(explain(failure))

    const call = <A>(what: string, f: (signal: AbortSignal) => Promise<A>): Effect.Effect<A, CallFailure> =>
      Effect.tryPromise({ try: f, catch: (error): CallFailure => ({ what, error }) })

    /** An idempotent call: transient failures are tried again, twice. */
    const retried = <A>(what: string, f: (signal: AbortSignal) => Promise<A>) =>
      call(what, f).pipe(
        Effect.retry({ schedule: Schedule.exponential("200 millis"), times: 2, while: isTransient })
      )

    const listWhere = (metadata: Record<string, string>) =>
      retried("listing sandboxes", async (signal) => {
        const paginator = Sandbox.list({ ...connection, query: { metadata, state: ["running", "paused"] }, limit: LIST_PAGE })
        const all: Array<SandboxInfo> = []
        while (paginator.hasNext) all.push(...(await paginator.nextItems({ signal })))
        return all
      })

    const kill = (sandboxId: string) => retried("killing the sandbox", (signal) => Sandbox.kill(sandboxId, { ...connection, signal }))

    // ---- reaper ---------------------------------------------------------------------------------
    const temporaries = yield* listWhere({ [META.marker]: "true", [META.temporary]: "true" }).pipe(Effect.mapError(toBackendError))
    for (const info of temporaries) {
      const meta = info.metadata
      if (meta[META.ownerHost] !== ownerHost || meta[META.instance] === options.instanceId) continue
      const pid = Number(meta[META.ownerPid])
      if (!Number.isInteger(pid) || (processStartTime(pid) !== undefined && processStartTime(pid) === meta[META.ownerStart])) continue
      yield* kill(info.sandboxId).pipe(
        Effect.andThen(Effect.logInfo(
          `${NAME} backend: reaped temporary sandbox ${info.sandboxId} (computer ${meta[META.computerId]}) left by server pid ${pid}, no longer running`
        )),
        Effect.catchAll((failure) => Effect.logWarning(`${NAME} backend: cannot reap ${info.sandboxId}: ${explain(failure)}`))
      )
    }

    // ---- list -----------------------------------------------------------------------------------
    const toProvider = (info: SandboxInfo): ProviderComputer | undefined => {
      const id = info.metadata[META.computerId]
      if (id === undefined) return undefined
      return {
        id,
        temporary: info.metadata[META.temporary] === "true",
        providerId: info.sandboxId,
        image: info.metadata[META.image] ?? info.templateId,
        createdAt: info.metadata[META.created] ?? info.startedAt.toISOString(),
        state: info.state
      }
    }
    const list = listWhere({ [META.marker]: "true" }).pipe(
      Effect.map((infos) => infos.flatMap((info) => toProvider(info) ?? [])),
      Effect.mapError(toBackendError)
    )

    // ---- create / connect -------------------------------------------------------------------------
    const createSandbox = (spec: ComputerSpec, template: string) =>
      Effect.gen(function*() {
        const nonce = randomUUID()
        const metadata: Record<string, string> = {
          ...options.metadata,
          [META.marker]: "true",
          [META.computerId]: spec.id,
          [META.temporary]: String(spec.temporary),
          [META.image]: template,
          [META.instance]: options.instanceId,
          [META.created]: new Date().toISOString(),
          [META.ownerHost]: ownerHost,
          [META.ownerPid]: self.pid,
          [META.ownerStart]: self.start,
          [META.nonce]: nonce
        }
        // A create whose answer is lost (timeout, interruption) may still have made a sandbox: find
        // it by the nonce and kill it, so nothing is left running unseen.
        const cleanup = listWhere({ [META.nonce]: nonce }).pipe(
          Effect.flatMap((found) => Effect.forEach(found, (info) => kill(info.sandboxId), { discard: true })),
          Effect.timeout("20 seconds"),
          Effect.catchAllCause(() => Effect.void)
        )
        return yield* call("creating the sandbox", (signal) =>
          Sandbox.create(template, {
            ...connection,
            signal,
            timeoutMs,
            metadata,
            envs: { ...options.envs },
            ...(spec.temporary ? {} : { lifecycle: { onTimeout: "pause" as const } })
          })).pipe(Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : cleanup)))
      })

    const connectTo = (sandboxId: string) =>
      retried("connecting to the sandbox", (signal) => Sandbox.connect(sandboxId, { ...connection, signal, timeoutMs }))

    // ---- open -----------------------------------------------------------------------------------
    const open = (spec: ComputerSpec) =>
      Effect.gen(function*() {
        const found = yield* listWhere({ [META.marker]: "true", [META.computerId]: spec.id }).pipe(Effect.mapError(toBackendError))
        const existing = found.find((info) => info.state === "running") ?? found[0]
        if (existing !== undefined) {
          const temporary = existing.metadata[META.temporary] === "true"
          if (temporary !== spec.temporary) {
            return yield* fail(
              `computer '${spec.id}' exists and is ${temporary ? "temporary" : "permanent"}; open it with temporary: ${temporary}, or use another id`
            )
          }
        }
        const template = existing?.metadata[META.image] ?? existing?.templateId ?? options.template
        const first = yield* Effect.acquireRelease(
          (existing !== undefined ? connectTo(existing.sandboxId) : createSandbox(spec, template)).pipe(Effect.mapError(toBackendError)),
          // Released below by `release`; this only covers a failure while opening.
          () => Effect.void
        )
        const current = yield* Ref.make(first)
        /** Bumped by restart and factory reset: older processes must not be touched. */
        const generation = yield* Ref.make(0)
        let destroyed = false
        const lost = yield* Deferred.make<string>()
        const lifecycle = yield* Effect.makeSemaphore(1)
        let changing = false

        const markLost = (reason: string) =>
          Effect.suspend(() =>
            destroyed ? Effect.void : Effect.logWarning(`${NAME} backend: computer ${spec.id}: ${reason}`).pipe(
              Effect.andThen(Deferred.succeed(lost, `computer '${spec.id}' was lost: ${reason}`)),
              Effect.asVoid
            )
          )

        /** After a call failed: is the sandbox still there and running? */
        const checkAlive = (sandboxId: string) =>
          retried("checking the sandbox", (signal) => Sandbox.getInfo(sandboxId, { ...connection, signal })).pipe(
            Effect.flatMap((info) =>
              info.state === "running" ? Effect.void : markLost(`its sandbox ${sandboxId} was ${info.state} outside kilntainers`)
            ),
            Effect.catchAll((failure) =>
              isNotFound(failure.error)
                ? markLost(`its sandbox ${sandboxId} is gone (killed outside kilntainers or past its timeout)`)
                : Effect.logDebug(`${NAME} backend: ${explain(failure)}`)
            )
          )

        const release = Effect.suspend(() => {
          if (destroyed) return Effect.void
          const sandboxId = Ref.get(current).pipe(Effect.map((s) => s.sandboxId))
          if (spec.temporary) {
            return sandboxId.pipe(
              Effect.flatMap(kill),
              Effect.catchAll((failure) => Effect.logWarning(`${NAME} backend: cannot kill the sandbox of ${spec.id}: ${explain(failure)}`))
            )
          }
          return sandboxId.pipe(
            Effect.flatMap((id) => retried("pausing the sandbox", (signal) => Sandbox.pause(id, { ...connection, signal, keepMemory: false }))),
            Effect.catchAll((failure) =>
              Effect.logWarning(
                `${NAME} backend: cannot pause the sandbox of ${spec.id} (${explain(failure)}); it keeps running until its timeout, then pauses`
              )
            )
          )
        })
        yield* Effect.addFinalizer(() => Effect.sync(() => void (changing = true)).pipe(Effect.andThen(release)))

        // ---- keep-alive ---------------------------------------------------------------------------
        const keepAlive = lifecycle.withPermits(1)(Effect.gen(function*() {
          if (destroyed || (yield* Deferred.isDone(lost))) return
          const sandbox = yield* Ref.get(current)
          yield* retried("extending the sandbox timeout", (signal) => Sandbox.setTimeout(sandbox.sandboxId, timeoutMs, { ...connection, signal })).pipe(
            Effect.catchAll((failure) =>
              isNotFound(failure.error)
                ? checkAlive(sandbox.sandboxId)
                : Effect.logWarning(`${NAME} backend: computer ${spec.id}: ${explain(failure)}`)
            )
          )
        }))
        yield* keepAlive.pipe(
          Effect.repeat(Schedule.spaced(Duration.millis(keepAliveMs))),
          Effect.delay(Duration.millis(keepAliveMs)),
          Effect.interruptible,
          Effect.forkScoped
        )

        // ---- lifecycle ------------------------------------------------------------------------------
        const usable = Effect.suspend(() => (destroyed ? Effect.fail(fail(`computer '${spec.id}' was destroyed`)) : Effect.void))
        const changingWhile = <A, E>(effect: Effect.Effect<A, E>) =>
          lifecycle.withPermits(1)(
            Effect.sync(() => void (changing = true)).pipe(
              Effect.andThen(Ref.update(generation, (n) => n + 1)),
              Effect.andThen(effect),
              Effect.ensuring(Effect.sync(() => void (changing = false)))
            )
          )

        const restart = changingWhile(Effect.gen(function*() {
          yield* usable
          const sandbox = yield* Ref.get(current)
          yield* call("pausing the sandbox", (signal) => Sandbox.pause(sandbox.sandboxId, { ...connection, signal, keepMemory: false })).pipe(
            Effect.catchAll((failure): Effect.Effect<boolean, BackendError | Unsupported> => {
              const status = statusOf(failure.error)
              return status === 400 || status === 403 || status === 501
                ? Effect.fail(new Unsupported({ backend: NAME, feature: `restart (pause is refused: ${explain(failure)})` }))
                : Effect.fail(toBackendError(failure))
            })
          )
          yield* Ref.set(current, yield* connectTo(sandbox.sandboxId).pipe(Effect.mapError(toBackendError)))
        }))

        const factoryReset = changingWhile(Effect.gen(function*() {
          yield* usable
          const sandbox = yield* Ref.get(current)
          yield* kill(sandbox.sandboxId).pipe(Effect.mapError(toBackendError))
          yield* Ref.set(current, yield* createSandbox(spec, template).pipe(Effect.mapError(toBackendError)))
        }))

        const destroy = lifecycle.withPermits(1)(Effect.gen(function*() {
          if (destroyed) return
          const sandbox = yield* Ref.get(current)
          yield* kill(sandbox.sandboxId).pipe(Effect.mapError(toBackendError))
          destroyed = true
        }))

        // ---- processes ------------------------------------------------------------------------------
        const spawn = (spawnSpec: SpawnSpec) =>
          Effect.gen(function*() {
            yield* usable
            const command = shellJoin(spawnSpec.argv)
            if (spawnSpec.argv.length === 0) return yield* new SpawnFailed({ command, reason: "empty argv" })
            if ([...spawnSpec.argv, spawnSpec.cwd, ...Object.entries(spawnSpec.env).flat()].some((s) => s.includes("\0"))) {
              return yield* new SpawnFailed({ command, reason: "arguments and environment cannot contain NUL bytes" })
            }
            const sandbox = yield* Ref.get(current)
            const myGeneration = yield* Ref.get(generation)
            const stale = Effect.map(Ref.get(generation), (n) => n !== myGeneration || destroyed)
            const rpc = options.publicOutputApi === true ? undefined : processRpc(sandbox)
            const started = rpc !== undefined
              ? yield* startRaw(rpc, sandbox, spawnSpec, command)
              : yield* startPublic(sandbox, spawnSpec, command)
            const { pid } = started
            let exited = false

            const onDropped = Effect.suspend(() =>
              Effect.gen(function*() {
                if (changing || (yield* stale)) return
                yield* checkAlive(sandbox.sandboxId)
              })
            )
            const events: Stream.Stream<ProcessEvent> = started.events(onDropped).pipe(
              Stream.tap((event) => Effect.sync(() => void (event._tag === "Exit" && (exited = true))))
            )

            const live = <A>(what: string, f: (signal: AbortSignal) => Promise<A>) =>
              Effect.gen(function*() {
                if (yield* stale) return yield* fail("the computer was restarted; this process is gone")
                yield* call(what, f).pipe(Effect.mapError(toBackendError))
              })
            /** Input for a process that has just ended (envd: not found) is dropped, as by a host pipe. */
            const input = <A>(what: string, f: (signal: AbortSignal) => Promise<A>) =>
              Effect.gen(function*() {
                if (yield* stale) return yield* fail("the computer was restarted; this process is gone")
                yield* call(what, f).pipe(
                  Effect.catchAll((failure) => (isNotFound(failure.error) ? Effect.void : Effect.fail(toBackendError(failure))))
                )
              })

            const signalGroup = (name: string) =>
              call("signalling the process", (signal) =>
                sandbox.commands.run(shellJoin(["sh", "-c", SIGNAL_SCRIPT, "kill", name.replace(/^SIG/, ""), String(pid)]), {
                  signal,
                  timeoutMs: requestTimeoutMs,
                  requestTimeoutMs
                }))

            yield* Effect.addFinalizer(() =>
              Effect.gen(function*() {
                if (!exited && !(yield* stale) && !(yield* Deferred.isDone(lost))) {
                  yield* signalGroup("SIGKILL").pipe(
                    Effect.timeout("10 seconds"),
                    Effect.catchAllCause(() => call("killing the process", () => sandbox.commands.kill(pid)).pipe(Effect.ignore))
                  )
                }
                started.abort()
              })
            )

            const tty = spawnSpec.tty !== undefined
            const backendProcess: BackendProcess = {
              pid,
              events,
              write: (data) =>
                tty
                  ? input("writing to the terminal", (signal) => sandbox.pty.sendInput(pid, data, { signal }))
                  : input("writing to stdin", (signal) => sandbox.commands.sendStdin(pid, data, { signal })),
              closeStdin: tty
                ? input("sending EOF", (signal) => sandbox.pty.sendInput(pid, new Uint8Array([4]), { signal }))
                : input("closing stdin", (signal) => sandbox.commands.closeStdin(pid, { signal })),
              signal: (name) =>
                Effect.gen(function*() {
                  const normalized = normalizeSignal(name)
                  if (normalized._tag === "Left") return yield* fail(normalized.left)
                  if (yield* stale) return
                  yield* signalGroup(normalized.right).pipe(Effect.mapError(toBackendError))
                }),
              resize: (cols, rows) =>
                !tty
                  ? Effect.fail(new Unsupported({ backend: NAME, feature: "resize of a process without a TTY" }))
                  : Number.isInteger(cols) && Number.isInteger(rows) && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535
                  ? live("resizing the terminal", (signal) => sandbox.pty.resize(pid, { cols, rows }, { signal }))
                  : Effect.fail(fail(`invalid terminal size ${cols}x${rows}`))
            }
            return backendProcess
          })

        const computer: BackendComputer = {
          providerId: first.sandboxId,
          home,
          image: template,
          spawn,
          restart,
          factoryReset,
          destroy,
          lost: Deferred.await(lost)
        }
        return computer
      }).pipe(Effect.withSpan("E2BBackend.open"))

    // ---- starting processes -------------------------------------------------------------------------

    interface Started {
      readonly pid: number
      /** The process's events; `onDropped` runs when the stream breaks before the end event. */
      readonly events: (onDropped: Effect.Effect<void>) => Stream.Stream<ProcessEvent>
      readonly abort: () => void
    }

    const startRaw = (rpc: ProcessRpc, sandbox: Sandbox, spec: SpawnSpec, command: string) =>
      Effect.gen(function*() {
        const controller = new AbortController()
        const request: ProcessStartRequest = {
          process: { cmd: "/bin/bash", args: ["-l", "-c", processScript(spec.argv, spec.env)], envs: { ...spec.env }, cwd: spec.cwd },
          ...(spec.tty ? { pty: { size: { cols: spec.tty.cols, rows: spec.tty.rows } } } : {}),
          stdin: true
        }
        const iterator = rpc.start(request, {
          headers: { "Keepalive-Ping-Interval": "50" },
          signal: controller.signal,
          timeoutMs: 0
        })[Symbol.asyncIterator]()
        const first = yield* Effect.tryPromise({
          try: () => iterator.next(),
          catch: (error) => error
        }).pipe(
          Effect.timeoutFail({ duration: Duration.millis(requestTimeoutMs), onTimeout: () => new Error(`no answer within ${requestTimeoutMs} ms`) }),
          Effect.onInterrupt(() => Effect.sync(() => controller.abort())),
          Effect.mapError((error) => {
            controller.abort()
            return new SpawnFailed({ command, reason: explain({ what: "starting the process", error }) })
          })
        )
        const start = first.done ? undefined : first.value.event?.event
        if (start?.case !== "start") {
          controller.abort()
          return yield* new SpawnFailed({ command, reason: "envd did not report the process start" })
        }
        const pid = start.value.pid
        const events = (onDropped: Effect.Effect<void>): Stream.Stream<ProcessEvent> => {
          let finished = false
          const pull: Effect.Effect<Chunk.Chunk<ProcessEvent>, Option.Option<never>> = Effect.suspend(() => {
            if (finished) return Effect.fail(Option.none())
            return Effect.tryPromise({ try: () => iterator.next(), catch: (error) => error }).pipe(
              Effect.flatMap((result): Effect.Effect<Chunk.Chunk<ProcessEvent>> => {
                if (result.done) {
                  finished = true
                  return onDropped.pipe(Effect.as(C.of<ProcessEvent>({ _tag: "Exit", exit: LOST_EXIT })))
                }
                const event = result.value.event?.event
                if (event?.case === "data") {
                  const output = event.value.output
                  if (output.case === undefined || output.value.byteLength === 0) return Effect.succeed(C.empty())
                  return Effect.succeed(C.of<ProcessEvent>({ _tag: output.case === "stderr" ? "Stderr" : "Stdout", data: output.value }))
                }
                if (event?.case === "end") {
                  finished = true
                  return Effect.succeed(C.of<ProcessEvent>({ _tag: "Exit", exit: exitInfo(event.value) }))
                }
                return Effect.succeed(C.empty())
              }),
              Effect.catchAll(() => {
                finished = true
                return onDropped.pipe(Effect.as(C.of<ProcessEvent>({ _tag: "Exit", exit: LOST_EXIT })))
              })
            )
          })
          return Stream.repeatEffectChunkOption(pull)
        }
        const started: Started = { pid, events, abort: () => controller.abort() }
        return started
      })

    /** The SDK's public API: output as UTF-8-decoded strings, re-encoded here (binary is not exact). */
    const startPublic = (sandbox: Sandbox, spec: SpawnSpec, command: string) =>
      Effect.gen(function*() {
        const queue: Array<ProcessEvent> = []
        let wake: (() => void) | undefined
        const push = (event: ProcessEvent) => {
          queue.push(event)
          const w = wake
          wake = undefined
          w?.()
        }
        const encoder = new TextEncoder()
        const controller = new AbortController()
        let handle: CommandHandle
        const script = processScript(spec.argv, spec.env)
        if (spec.tty) {
          // The PTY runs an interactive bash; the script replaces it (exec) once it reads the line.
          handle = yield* call("starting the process", (signal) =>
            sandbox.pty.create({
              cols: spec.tty!.cols,
              rows: spec.tty!.rows,
              cwd: spec.cwd,
              envs: { ...spec.env },
              timeoutMs: 0,
              signal: AbortSignal.any([signal, controller.signal]),
              onData: (data) => push({ _tag: "Stdout", data })
            })).pipe(Effect.mapError((failure) => new SpawnFailed({ command, reason: explain(failure) })))
          yield* call("starting the process", (signal) =>
            sandbox.pty.sendInput(handle.pid, encoder.encode(`stty -echo; ${script}\n`), { signal })).pipe(
              Effect.mapError((failure) => new SpawnFailed({ command, reason: explain(failure) }))
            )
        } else {
          handle = yield* call("starting the process", (signal) =>
            sandbox.commands.run(script, {
              background: true,
              cwd: spec.cwd,
              envs: { ...spec.env },
              stdin: true,
              timeoutMs: 0,
              signal: AbortSignal.any([signal, controller.signal]),
              onStdout: (data) => push({ _tag: "Stdout", data: encoder.encode(data) }),
              onStderr: (data) => push({ _tag: "Stderr", data: encoder.encode(data) })
            })).pipe(Effect.mapError((failure) => new SpawnFailed({ command, reason: explain(failure) })))
        }
        let ended = false
        const done = handle.wait().then(
          (result) => ({ exit: { exitCode: result.exitCode, signal: null } as ExitInfo, dropped: false }),
          (error) =>
            error instanceof CommandExitError
              ? { exit: exitInfo({ exitCode: error.exitCode, status: error.error ?? "" }), dropped: false }
              : { exit: LOST_EXIT, dropped: !(error instanceof SandboxError) || error instanceof TimeoutError }
        )
        const events = (onDropped: Effect.Effect<void>): Stream.Stream<ProcessEvent> => {
          const pull: Effect.Effect<Chunk.Chunk<ProcessEvent>, Option.Option<never>> = Effect.suspend(() => {
            if (queue.length > 0) return Effect.succeed(C.unsafeFromArray(queue.splice(0)))
            if (ended) return Effect.fail(Option.none())
            return Effect.async<Chunk.Chunk<ProcessEvent>, Option.Option<never>>((resume) => {
              wake = () => resume(pull)
              return Effect.sync(() => void (wake = undefined))
            })
          })
          void done.then(({ dropped, exit }) => {
            const finish = () => {
              ended = true
              push({ _tag: "Exit", exit })
            }
            if (dropped) Effect.runPromise(onDropped).finally(finish)
            else finish()
          })
          return Stream.repeatEffectChunkOption(pull)
        }
        const started: Started = {
          pid: handle.pid,
          events,
          abort: () => {
            controller.abort()
            void handle.disconnect()
          }
        }
        return started
      })

    return Backend.of({ name: NAME, capabilities, open, list })
  })

/** The E2B backend as a Layer: fails when E2B cannot be reached or refuses the API key. */
export const layer = (options: E2BBackendOptions): Layer.Layer<Backend, BackendError> => Layer.scoped(Backend, make(options))
