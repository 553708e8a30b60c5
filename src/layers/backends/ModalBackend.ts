/**
 * The Modal backend: a computer is one Modal Sandbox in the App `--modal-app-name`, made from the
 * registry image `--modal-image` (this backend's own flag, default debian:bookworm-slim — never the
 * Docker backend's --image; Kilntainers failed at startup for reading that one), with --modal-cpu,
 * --modal-memory (MiB), --gpu, --region, --sandbox-timeout and `blockNetwork` unless --network.
 * Modal is reached through ModalGateway (the SDK adapter, or a fake in tests).
 *
 * Sandboxes: named `kilntainer-<id>` (unique among the App's running sandboxes) and tagged
 *   kilntainers=true, kilntainers-computer-id=<id>, kilntainers-temporary=true|false,
 *   kilntainers-image=<image it was made from>, kilntainers-instance=<server instance id>,
 *   kilntainers-created=<ISO time>.
 * A running sandbox of that name without these tags (or with another computer id) is not ours:
 * open refuses and never touches it. `list` finds ours by the `kilntainers` tag.
 *
 * Lifetime — what "permanent" means here: a Modal sandbox always ends at its timeout
 * (--sandbox-timeout, default 1 h, at most 24 h, counted from its creation), and its filesystem goes
 * with it. A permanent computer is one that closing the server (or its session) leaves running, so
 * that this or another server can re-attach to it by id until that timeout; it is not kept beyond
 * it, and nothing here extends it (Modal has no keep-alive for a sandbox's lifetime). A temporary
 * one is terminated when its Scope closes. Temporary sandboxes of a server that crashed end at their
 * timeout (no reaper: the owner may be a live server on another machine).
 *
 * Lifecycle: restart is not offered — Modal cannot restart a sandbox keeping its filesystem, and
 * stop-and-recreate would silently lose the state (what Kilntainers did). factory reset = terminate
 * and create again, same name and tags, from the image in the `kilntainers-image` tag (not the
 * current flag); destroy = terminate. `lost` completes when the sandbox ends other than through the
 * handle (terminated from outside, timed out): one `sandbox.wait` per sandbox.
 *
 * Processes: `sandbox.exec` of a wrapper (ModalExec.ts) — own process group, exact environment
 * (`env -i`), working directory, pid header, and an end marker so Exit follows all of the process's
 * output. Signals: `kill -s SIG -- -pgid` in a second exec; closing a process's Scope SIGKILLs its
 * session. TTY: the SDK's PTY (fixed 80x24) sized with `stty`; resize = `stty -F <tty>` in a second
 * exec (the kernel sends SIGWINCH to the terminal's foreground group, when it has one).
 * The image needs /bin/sh, `env`, `kill`, `cat`, `setsid` (util-linux or busybox) and, for TTYs, `stty`.
 */
import type { Scope } from "effect"
import { Deferred, Effect, Layer, Option, Redacted, Stream } from "effect"
import { BackendError, SpawnFailed, Unsupported } from "../../domain/Errors.js"
import type { BackendComputer, BackendProcess, Capabilities, ComputerSpec, ProviderComputer, SpawnSpec } from "../../services/Backend.js"
import { Backend } from "../../services/Backend.js"
import * as ModalExec from "./ModalExec.js"
import * as ModalGateway from "./ModalGateway.js"
import type { ModalGatewayService, SandboxHandle } from "./ModalGateway.js"

export interface ModalBackendOptions {
  /** --modal-token-id (needed unless a gateway is given). */
  readonly tokenId: Redacted.Redacted<string> | undefined
  /** --modal-token-secret (needed unless a gateway is given). */
  readonly tokenSecret: Redacted.Redacted<string> | undefined
  /** --modal-app-name, default "kilntainers". */
  readonly appName: string
  /** --modal-image, default "debian:bookworm-slim": this backend's own flag, NOT the Docker --image. */
  readonly image: string
  /** --modal-cpu, default 1.0 (reserved physical cores). */
  readonly cpu: number
  /** --modal-memory in MiB, default 512. */
  readonly memoryMb: number
  /** --gpu, such as "T4" or "A100-80GB:2". */
  readonly gpu: string | undefined
  /** --region, such as "us-east". */
  readonly region: string | undefined
  /** --sandbox-timeout in seconds, default 3600, at most 86400: the sandbox's whole lifetime. */
  readonly sandboxTimeoutSec: number
  /** false → the sandbox has no network (blockNetwork). */
  readonly network: boolean
  /** This server instance (a random id made by the caller); recorded on the sandboxes it creates. */
  readonly instanceId: string
  /** Tests pass a fake; otherwise the SDK adapter. */
  readonly gateway?: ModalGatewayService | undefined
  /** Bound on each Modal call (default 120 s; creating includes pulling the image). */
  readonly callTimeoutMs?: number | undefined
}

export const NAME = "modal"
export const DEFAULT_IMAGE = "debian:bookworm-slim"
export const DEFAULT_APP_NAME = "kilntainers"
export const DEFAULT_CPU = 1
export const DEFAULT_MEMORY_MB = 512
export const DEFAULT_SANDBOX_TIMEOUT_SEC = 3600
export const MAX_SANDBOX_TIMEOUT_SEC = 86400
export const HOME = "/home/agent"

export const TAG = {
  marker: "kilntainers",
  computerId: "kilntainers-computer-id",
  temporary: "kilntainers-temporary",
  image: "kilntainers-image",
  instance: "kilntainers-instance",
  created: "kilntainers-created"
} as const

/** The capabilities of the Modal backend (see the header for restart). */
export const capabilities: Capabilities = {
  pty: true,
  stdin: true,
  signals: true,
  restart: false,
  factoryReset: true,
  persistence: true,
  files: true,
  networkControl: true
}

const COMPUTER_ID = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/
const TERMINATE_TIMEOUT = "30 seconds"

export const sandboxName = (id: string) => `kilntainer-${id}`

const fail = (reason: string) => new BackendError({ backend: NAME, reason })

/** A reason why the options cannot work, or undefined. */
export const invalidOptions = (options: ModalBackendOptions): string | undefined => {
  if (options.appName.trim() === "") return "--modal-app-name must not be empty"
  if (options.image.trim() === "") return "--modal-image must not be empty"
  if (!(Number.isFinite(options.cpu) && options.cpu > 0)) return `--modal-cpu must be a positive number, got ${options.cpu}`
  if (!(Number.isInteger(options.memoryMb) && options.memoryMb > 0)) {
    return `--modal-memory must be a positive whole number of MiB, got ${options.memoryMb}`
  }
  if (!(Number.isInteger(options.sandboxTimeoutSec) && options.sandboxTimeoutSec >= 1 && options.sandboxTimeoutSec <= MAX_SANDBOX_TIMEOUT_SEC)) {
    return `--sandbox-timeout must be a whole number of seconds from 1 to ${MAX_SANDBOX_TIMEOUT_SEC} (24 h, Modal's limit), got ${options.sandboxTimeoutSec}`
  }
  return undefined
}

interface Live {
  readonly spec: ComputerSpec
  readonly name: string
  sandbox: SandboxHandle
  image: string
  /** Bumped when the sandbox is replaced: processes and watchers of older ones are stale. */
  generation: number
  gone: string | undefined
  destroyed: boolean
  readonly processes: Set<ModalExec.ModalProcess>
  readonly lost: Deferred.Deferred<string>
}

export const make = (options: ModalBackendOptions) =>
  Effect.gen(function*() {
    const invalid = invalidOptions(options)
    if (invalid !== undefined) return yield* fail(invalid)
    const gateway = options.gateway ?? (yield* Effect.gen(function*() {
      if (options.tokenId === undefined || options.tokenSecret === undefined) {
        return yield* fail(
          "Modal credentials are missing: pass --modal-token-id and --modal-token-secret (or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET); create a token with 'modal token new' or at modal.com/settings/tokens"
        )
      }
      const made = yield* ModalGateway.sdk({
        tokenId: Redacted.value(options.tokenId),
        tokenSecret: Redacted.value(options.tokenSecret)
      }).pipe(Effect.mapError((error) => fail(error.message)))
      yield* Effect.addFinalizer(() => made.close)
      return made
    }))
    const callTimeout = options.callTimeoutMs ?? 120_000

    /** A Modal call, bounded, with a clear BackendError. */
    const call = <A>(what: string, effect: Effect.Effect<A, ModalGateway.ModalGatewayError>) =>
      effect.pipe(
        Effect.timeoutFail({
          duration: callTimeout,
          onTimeout: () => new ModalGateway.ModalGatewayError({ operation: what, kind: "Timeout", detail: `no answer from Modal within ${callTimeout / 1000} s` })
        }),
        Effect.mapError((error) => fail(`cannot ${what}: ${error.detail}${hint(error)}`))
      )
    const hint = (error: ModalGateway.ModalGatewayError) =>
      /unauthenticated|token|credential|permission denied/i.test(error.detail)
        ? " (check --modal-token-id and --modal-token-secret)"
        : ""

    const terminate = (sandbox: SandboxHandle) =>
      call("terminate the sandbox", sandbox.terminate).pipe(
        Effect.catchAll((error) =>
          // Already gone is fine.
          sandbox.poll.pipe(
            Effect.flatMap((code) => (code === null ? Effect.fail(error) : Effect.void)),
            Effect.catchAll(() => Effect.fail(error))
          )
        )
      )

    // ---- processes ----------------------------------------------------------------------------
    const runShort = (live: Live, what: string, argv: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        const exec = yield* call(what, live.sandbox.exec({ argv, pty: false }))
        const [out, err, code] = yield* call(what, Effect.all([
          exec.stdout.pipe(Stream.decodeText(), Stream.mkString),
          exec.stderr.pipe(Stream.decodeText(), Stream.mkString),
          exec.wait
        ], { concurrency: "unbounded" }))
        return { stdout: out, stderr: err, code }
      })

    const kill = (live: Live) => (pgid: number, signal: string, session: boolean) =>
      Effect.gen(function*() {
        const result = yield* runShort(live, "signal the process", [
          "/bin/sh", "-c", ModalExec.KILL_SCRIPT, "kilntainers", signal.replace(/^SIG/, ""), String(pgid), session ? "session" : ""
        ])
        // Non-zero: no such group (it has ended) — not an error.
        if (result.code !== 0 && result.code !== 1) {
          return yield* fail(`cannot deliver ${signal}: ${result.stderr.trim() || `exit code ${result.code}`}`)
        }
      })

    const spawn = (live: Live) => (spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | BackendError, Scope.Scope> =>
      Effect.gen(function*() {
        const command = spec.argv.join(" ")
        if (live.gone !== undefined) return yield* fail(`computer ${live.spec.id} is gone: ${live.gone}`)
        const invalid = ModalExec.invalidSpec(spec)
        if (invalid !== undefined) return yield* new SpawnFailed({ command, reason: invalid })
        const generation = live.generation
        const host: ModalExec.ExecHost = {
          backend: NAME,
          sandbox: live.sandbox,
          current: () => live.generation === generation && live.gone === undefined,
          kill: kill(live)
        }
        const process = yield* Effect.acquireRelease(
          ModalExec.start({ host, spec, command }).pipe(Effect.tap((process) => Effect.sync(() => live.processes.add(process)))),
          (process) => process.terminate.pipe(Effect.ensuring(Effect.sync(() => live.processes.delete(process))))
        )
        const result: BackendProcess = {
          pid: process.pid,
          events: process.events,
          write: process.write,
          closeStdin: process.closeStdin,
          signal: process.signal,
          resize: (cols, rows) =>
            Effect.gen(function*() {
              if (process.tty === undefined) {
                return yield* new Unsupported({ backend: NAME, feature: "resize of a process without a TTY" })
              }
              if (!(Number.isInteger(cols) && Number.isInteger(rows) && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535)) {
                return yield* fail(`invalid terminal size ${cols}x${rows}`)
              }
              if (!host.current()) return yield* fail("the process has ended")
              const done = yield* runShort(live, "resize the terminal", ["stty", "-F", process.tty, "cols", String(cols), "rows", String(rows)])
              if (done.code !== 0) return yield* fail(`cannot resize the terminal: ${done.stderr.trim() || `exit code ${done.code}`}`)
            })
        }
        return result
      })

    const abortProcesses = (live: Live) =>
      Effect.sync(() => {
        for (const process of live.processes) process.abort()
      })
    const endProcesses = (live: Live) =>
      Effect.forEach([...live.processes], (process) => process.terminate, { concurrency: "unbounded", discard: true })

    // ---- computers ----------------------------------------------------------------------------
    const tagsFor = (spec: ComputerSpec, image: string): Record<string, string> => ({
      [TAG.marker]: "true",
      [TAG.computerId]: spec.id,
      [TAG.temporary]: String(spec.temporary),
      [TAG.image]: image,
      [TAG.instance]: options.instanceId,
      [TAG.created]: new Date().toISOString()
    })

    /** Creates the sandbox and its home; nothing is left behind when a step fails. */
    const create = (spec: ComputerSpec, image: string) =>
      Effect.gen(function*() {
        const name = sandboxName(spec.id)
        const sandbox = yield* call(`create the sandbox ${name} from ${image}`, gateway.create({
          appName: options.appName,
          image,
          cpu: options.cpu,
          memoryMiB: options.memoryMb,
          gpu: options.gpu,
          region: options.region,
          timeoutMs: options.sandboxTimeoutSec * 1000,
          blockNetwork: !options.network,
          name,
          tags: tagsFor(spec, image)
        }))
        yield* Effect.gen(function*() {
          const exec = yield* call("prepare the home directory", sandbox.exec({ argv: ["mkdir", "-p", "--", HOME], pty: false }))
          const code = yield* call("prepare the home directory", exec.wait)
          if (code !== 0) return yield* fail(`cannot create ${HOME} in the sandbox (exit code ${code})`)
        }).pipe(Effect.tapError(() => terminate(sandbox).pipe(Effect.ignore)))
        yield* Effect.logInfo(`${NAME} backend: created sandbox ${name} (${sandbox.sandboxId}) from ${image}${spec.temporary ? " (temporary)" : ""}`)
        return sandbox
      })

    const attachOrCreate = (spec: ComputerSpec) =>
      Effect.gen(function*() {
        const name = sandboxName(spec.id)
        for (let attempt = 0; attempt < 3; attempt++) {
          const existing = yield* call(`look up the sandbox ${name}`, gateway.fromName(options.appName, name))
          if (Option.isNone(existing)) {
            const created = yield* create(spec, options.image).pipe(
              Effect.map(Option.some),
              Effect.catchIf((error) => /already exists/i.test(error.reason), () => Effect.succeed(Option.none<SandboxHandle>()))
            )
            if (Option.isNone(created)) continue
            return { sandbox: created.value, image: options.image }
          }
          const sandbox = existing.value
          const tags = yield* call(`read the tags of ${name}`, sandbox.tags)
          if (tags[TAG.marker] !== "true" || tags[TAG.computerId] !== spec.id) {
            yield* sandbox.detach
            return yield* fail(
              `a sandbox named ${name} is running in the Modal app '${options.appName}' but was not created by kilntainers for computer '${spec.id}' (its tags do not match); it is left untouched — use another computer id or app`
            )
          }
          const temporary = tags[TAG.temporary] === "true"
          if (temporary !== spec.temporary) {
            yield* sandbox.detach
            return yield* fail(
              `computer '${spec.id}' exists as a ${temporary ? "temporary" : "permanent"} computer; it cannot be opened as a ${
                spec.temporary ? "temporary" : "permanent"
              } one`
            )
          }
          return { sandbox, image: tags[TAG.image] ?? options.image }
        }
        return yield* fail(`cannot create ${name}: its name keeps being taken`)
      })

    const markLost = (live: Live, reason: string) =>
      Effect.gen(function*() {
        if (live.gone !== undefined) return
        live.gone = reason
        for (const process of live.processes) process.abort()
        yield* Effect.logWarning(`${NAME} backend: computer ${live.spec.id}: ${reason}`)
        yield* Deferred.succeed(live.lost, reason)
      })

    /** Watches one sandbox of the computer until it ends; reports it lost unless we ended it. */
    const watch = (live: Live, sandbox: SandboxHandle, generation: number) =>
      Effect.gen(function*() {
        let code: number | undefined
        while (code === undefined) {
          const waited = yield* sandbox.wait.pipe(Effect.either)
          if (waited._tag === "Right") code = waited.right
          else {
            // The long poll failed (network): ask once, then try again later.
            const polled = yield* sandbox.poll.pipe(Effect.orElseSucceed(() => null))
            if (polled !== null) code = polled
            else yield* Effect.sleep("2 seconds")
          }
        }
        if (live.generation !== generation || live.destroyed) return
        yield* markLost(
          live,
          `its Modal sandbox ${live.name} (${sandbox.sandboxId}) ended outside kilntainers (exit code ${code}): terminated from outside, or it reached its --sandbox-timeout of ${options.sandboxTimeoutSec} s`
        )
      })

    const open = Effect.fn("ModalBackend.open")(function*(spec: ComputerSpec) {
      if (!COMPUTER_ID.test(spec.id)) return yield* fail(`invalid computer id '${spec.id}'`)
      const { sandbox, image } = yield* attachOrCreate(spec)
      const live: Live = {
        spec,
        name: sandboxName(spec.id),
        sandbox,
        image,
        generation: 0,
        gone: undefined,
        destroyed: false,
        processes: new Set(),
        lost: yield* Deferred.make<string>()
      }
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          const current = live.sandbox
          live.generation++
          if (live.destroyed || live.gone !== undefined) return yield* abortProcesses(live)
          if (!spec.temporary) {
            // Left running for a later open: only its processes end.
            yield* endProcesses(live)
            return yield* current.detach
          }
          yield* abortProcesses(live)
          yield* terminate(current).pipe(
            Effect.interruptible,
            Effect.timeout(TERMINATE_TIMEOUT),
            Effect.catchAll((error) =>
              Effect.logWarning(`${NAME} backend: cannot terminate the temporary sandbox ${live.name}: ${"reason" in error ? error.reason : "timed out"}`)
            )
          )
        })
      )
      yield* Effect.forkScoped(watch(live, sandbox, live.generation))

      const usable = Effect.suspend(() =>
        live.destroyed
          ? Effect.fail(fail(`computer ${spec.id} was destroyed`))
          : live.gone === undefined
          ? Effect.void
          : Effect.fail(fail(`computer ${spec.id} is gone: ${live.gone}`))
      )
      const lifecycle = yield* Effect.makeSemaphore(1)
      const scope = yield* Effect.scope

      const factoryReset = lifecycle.withPermits(1)(Effect.gen(function*() {
        yield* usable
        const old = live.sandbox
        live.generation++
        yield* abortProcesses(live)
        yield* terminate(old)
        // The name is free once Modal has seen the old sandbox end.
        let fresh: SandboxHandle | undefined
        for (let attempt = 0; attempt < 20 && fresh === undefined; attempt++) {
          const made = yield* create(spec, live.image).pipe(Effect.either)
          if (made._tag === "Right") fresh = made.right
          else if (/already exists/i.test(made.left.reason)) yield* Effect.sleep("1 second")
          else {
            live.gone = `factory reset failed: ${made.left.reason}`
            return yield* made.left
          }
        }
        if (fresh === undefined) {
          live.gone = "factory reset failed: the sandbox name stayed taken"
          return yield* fail(`factory reset of ${spec.id} failed: the name ${live.name} stayed taken`)
        }
        live.sandbox = fresh
        yield* Effect.forkIn(watch(live, fresh, live.generation), scope)
        yield* Effect.logInfo(`${NAME} backend: factory reset ${live.name} from ${live.image}`)
      }))

      const destroy = Effect.gen(function*() {
        if (live.destroyed) return
        live.destroyed = true
        live.generation++
        live.gone ??= "it was deleted"
        yield* abortProcesses(live)
        yield* terminate(live.sandbox)
      })

      const computer: BackendComputer = {
        get providerId() {
          return live.sandbox.sandboxId
        },
        home: HOME,
        get image() {
          return live.image
        },
        spawn: spawn(live),
        restart: Effect.fail(new Unsupported({ backend: NAME, feature: "restart (a Modal sandbox cannot be restarted keeping its files; factory reset recreates it)" })),
        factoryReset,
        destroy,
        lost: Deferred.await(live.lost)
      }
      return computer
    })

    const list = Effect.gen(function*() {
      const sandboxes = yield* call("list sandboxes", gateway.list(options.appName, { [TAG.marker]: "true" }))
      const found = yield* Effect.forEach(sandboxes, (sandbox) =>
        call("read a sandbox's tags", sandbox.tags).pipe(
          Effect.map((tags): Array<ProviderComputer> => {
            const id = tags[TAG.computerId]
            if (id === undefined) return []
            return [{
              id,
              temporary: tags[TAG.temporary] === "true",
              providerId: sandbox.sandboxId,
              image: tags[TAG.image] ?? "",
              createdAt: tags[TAG.created] ?? "",
              state: "running"
            }]
          }),
          Effect.ensuring(sandbox.detach)
        ), { concurrency: 8 })
      return found.flat() as ReadonlyArray<ProviderComputer>
    })

    return Backend.of({ name: NAME, capabilities, open, list })
  })

/** The Modal backend as a Layer. Building it makes no Modal call (credentials are checked on first use). */
export const layer = (options: ModalBackendOptions): Layer.Layer<Backend, BackendError> => Layer.scoped(Backend, make(options))
