/**
 * The Fly Machines backend: a computer is one Fly Machine of the configured app, driven through
 * the Machines REST API (FlyApi.ts, @effect/platform HttpClient) — never flyctl.
 *
 * Machines are named `kilntainer-<id>` and carry metadata
 *   kilntainers=true, kilntainers-computer-id=<id>, kilntainers-temporary=true|false,
 *   kilntainers-image=<image it was created from>, kilntainers-instance=<server instance id>,
 *   kilntainers-expires=<ISO time> (temporary machines: the lease, see the reaper below).
 * A machine with that name but other metadata is not ours: open refuses and never touches it.
 * Config: the image, guest {cpu_kind, cpus, memory_mb}, `init.exec` = a sleep loop (keeps the
 * machine up: the image's own command never runs), restart policy `no` (temporary) / `always`
 * (permanent), `auto_destroy` for temporary machines, and `rootfs.persist` `restart` (temporary:
 * the state survives a restart, as the Backend contract requires, and goes with the machine) or
 * `always` (permanent), with `rootfs.size_gb` when set.
 *
 * Lifecycle: open attaches to our machine of that id (starting it when stopped; a different
 * `temporary` is refused), else creates one (a 422 on the name → attach when it turned out to be
 * ours) and waits with `GET …/wait?state=started` (a 408 means "not yet": asked again, within a
 * bounded budget). Closing the Scope destroys a temporary machine and leaves a permanent one
 * running. restart = `POST …/restart` (rootfs kept); factory reset = destroy, wait until it is
 * destroyed, create again from the `kilntainers-image` metadata; destroy = `DELETE …?force=true`.
 *
 * Processes: exec has no streaming, TTY, cwd or env, so each process runs detached inside the
 * machine and is followed through files (FlyScripts.ts). One poller per computer reads every
 * followed process's new output in a single exec call, on a backoff schedule (50 ms doubling to
 * 1 s, back to fast on any activity), so the exec rate per machine does not grow with the number
 * of processes. stdin: `write` appends (base64, idempotent by offset) to a file that a feeder
 * streams into the process; `closeStdin` ends the feeder after what was written. Signals go to the
 * process group (`kill -s SIG -- -pgid`). No TTY (pty: false), so resize is Unsupported.
 *
 * `lost`: a failed poll of a computer is checked with `GET …/{id}`, and one shared watcher lists
 * all kilntainers machines (one call, every 30 s by default) for every open computer at once; a
 * machine destroyed or stopped from outside completes `lost` and ends its processes.
 *
 * Reaper (at layer build): a server cannot see whether another server is alive, so temporary
 * machines carry a lease, `kilntainers-expires`, that the live server renews (every third of the
 * lease, default 10 minutes, through `POST …/metadata/kilntainers-expires`). Temporary machines of
 * other instances whose lease expired (or, without one, created longer ago than the lease) are
 * destroyed. Permanent machines are never reaped.
 *
 * Network: Fly machines always have network access; `network: false` cannot be enforced here
 * (networkControl: false) and is logged as such.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import type { HttpClient } from "@effect/platform"
import type { Redacted, Scope } from "effect"
import { Deferred, Duration, Effect, Either, Layer, Option, Queue, Schedule, Stream, Take } from "effect"
import { randomBytes } from "node:crypto"
import { BackendError, SpawnFailed, Unsupported } from "../../domain/Errors.js"
import { normalizeSignal, signalName, signalNumber } from "../../domain/Signals.js"
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
import * as FlyApi from "./FlyApi.js"
import * as Scripts from "./FlyScripts.js"

export interface FlyTuning {
  /** Longest wait for one API answer (default 30 s); exec and wait calls add their own duration. */
  readonly requestTimeoutMs: number
  /** Retries of a call after 429, 5xx or a transport failure (default 5). */
  readonly maxRetries: number
  /** First retry delay, doubling with jitter (default 250 ms). */
  readonly retryBaseMs: number
  /** The longest Retry-After honoured (default 30 s). */
  readonly maxRetryAfterMs: number
  /** Budget for a machine to reach `started` / `destroyed` (default 180 s). */
  readonly startTimeoutMs: number
  /** `timeout` of one `/wait` call, seconds (default and API maximum 60). */
  readonly waitTimeoutSeconds: number
  /** Output polling: first and longest delay (default 50 ms and 1 s). */
  readonly pollMinMs: number
  readonly pollMaxMs: number
  /** How long the start exec waits for a short command to finish (default 200 ms). */
  readonly startWaitMs: number
  /** The shared watcher's period (default 30 s). */
  readonly watchIntervalMs: number
  /** Lease of temporary machines (default 10 minutes), renewed every third of it. */
  readonly leaseTtlMs: number
  /** `timeout` of the backend's own exec calls, seconds (default 30). */
  readonly execTimeoutSeconds: number
}

export interface FlyBackendOptions {
  /** --fly-app / FLY_APP_NAME */
  readonly app: string
  /** --fly-token / FLY_API_TOKEN or FLY_TOKEN; never in argv, never logged. */
  readonly token: Redacted.Redacted<string>
  /** --fly-image, default debian:bookworm-slim */
  readonly image: string
  /** --fly-region */
  readonly region: string | undefined
  /** --fly-cpu-kind, default shared */
  readonly cpuKind: "shared" | "performance"
  /** --fly-cpus, default 1 */
  readonly cpus: number
  /** --fly-memory (MB), default 512, at least 256 */
  readonly memoryMb: number
  /** --fly-rootfs-size (GB) */
  readonly rootfsSizeGb: number | undefined
  /** default https://api.machines.dev */
  readonly apiUrl: string
  /** Fly machines always have network; false is logged as not enforceable. */
  readonly network: boolean
  /** This server instance (a random id made by the caller); recorded on the machines it creates. */
  readonly instanceId: string
  /** Timings and retry budgets (tests shorten them). */
  readonly tuning?: Partial<FlyTuning> | undefined
}

export const DEFAULT_IMAGE = "debian:bookworm-slim"
export const DEFAULT_API_URL = "https://api.machines.dev"
export const HOME = "/home/agent"
const NAME = "fly"

export const DEFAULT_TUNING: FlyTuning = {
  requestTimeoutMs: 30_000,
  maxRetries: 5,
  retryBaseMs: 250,
  maxRetryAfterMs: 30_000,
  startTimeoutMs: 180_000,
  waitTimeoutSeconds: 60,
  pollMinMs: 50,
  pollMaxMs: 1000,
  startWaitMs: 200,
  watchIntervalMs: 30_000,
  leaseTtlMs: 10 * 60_000,
  execTimeoutSeconds: 30
}

export const META = {
  marker: "kilntainers",
  computerId: "kilntainers-computer-id",
  temporary: "kilntainers-temporary",
  image: "kilntainers-image",
  instance: "kilntainers-instance",
  expires: "kilntainers-expires"
} as const

/** The capabilities of the Fly backend (see the header for how each one works). */
export const capabilities: Capabilities = {
  pty: false,
  stdin: true,
  signals: true,
  restart: true,
  factoryReset: true,
  persistence: true,
  files: true,
  networkControl: false
}

/** The machine's main process: keeps it up and reaps; the image's own command never runs. */
export const KEEP_ALIVE = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 2147483647 & wait $!; done"]
const COMPUTER_ID = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/
/** Most bytes of one stream read back per poll. */
const READ_CAP = 1024 * 1024
/** Most bytes of stdin sent per exec call. */
const WRITE_CHUNK = 768 * 1024
/** Output waiting for its consumer past which a process is not polled. */
const HOLD_BYTES = 8 * 1024 * 1024
const GONE_STATES = new Set(["destroying", "destroyed"])
const DOWN_STATES = new Set(["stopping", "stopped", "suspending", "suspended", "failed"])

export const machineName = (id: string) => `kilntainer-${id}`

const fail = (reason: string) => new BackendError({ backend: NAME, reason })
const fromApi = (error: FlyApi.FlyApiError) => fail(error.description)

/** A reason why the spec cannot be run, or undefined. */
export const invalidSpec = (spec: SpawnSpec): string | undefined => {
  if (spec.tty !== undefined) return "the fly backend has no terminals (the Machines exec API has no TTY); run it without tty"
  if (spec.argv.length === 0 || spec.argv[0] === "") return "argv is empty"
  if (spec.argv.some((arg) => arg.includes("\0"))) return "an argument contains a NUL byte"
  if (spec.argv[0]!.includes("=")) return "a command name containing '=' is not supported by the fly backend"
  if (!spec.cwd.startsWith("/")) return `the working directory must be absolute, got '${spec.cwd}'`
  if (spec.cwd.includes("\0")) return "the working directory contains a NUL byte"
  for (const [key, value] of Object.entries(spec.env)) {
    if (key === "" || key.includes("=") || key.includes("\0") || value.includes("\0")) return `invalid environment variable '${key}'`
  }
  return undefined
}

/** One process followed through its files. */
interface Followed {
  readonly dir: string
  readonly generation: number
  readonly queue: Queue.Queue<Take.Take<ProcessEvent>>
  outOffset: number
  errOffset: number
  pid: number | null
  pgid: number | undefined
  exited: boolean
  ended: boolean
  stdinOffset: number
  stdinClosed: boolean
  /** Output handed to the queue and not yet taken by the consumer. */
  pendingBytes: number
  readonly delivered: Set<number>
  lastSignal: string | undefined
}

interface Live {
  readonly spec: ComputerSpec
  machineId: string
  image: string
  generation: number
  /** A restart/reset of ours is under way: machine state changes are expected. */
  busy: number
  gone: string | undefined
  destroyed: boolean
  readonly followed: Map<string, Followed>
  /** Directories to remove at the next poll. */
  readonly garbage: Array<string>
  readonly wake: Queue.Queue<void>
  readonly lost: Deferred.Deferred<string>
}

const offer = (process: Followed, event: ProcessEvent) => {
  if (process.ended) return
  if (event._tag !== "Exit") process.pendingBytes += event.data.byteLength
  Queue.unsafeOffer(process.queue, Take.of(event))
}

const exitWith = (process: Followed, exit: ExitInfo) => {
  if (process.exited || process.ended) return
  process.exited = true
  offer(process, { _tag: "Exit", exit })
}

const endStream = (process: Followed, exit: ExitInfo = { exitCode: null, signal: "SIGKILL" }) => {
  if (process.ended) return
  exitWith(process, exit)
  process.ended = true
  Queue.unsafeOffer(process.queue, Take.end)
}

const decodeStatus = (process: Followed, status: number): ExitInfo =>
  status > 128 && process.delivered.has(status - 128)
    ? { exitCode: null, signal: signalName(status - 128) ?? `SIG${status - 128}` }
    : { exitCode: status, signal: null }

/** Applies a REPORT: new output, then Exit once the output is read to the end, then the end of the stream. */
const applyReport = (process: Followed, report: Scripts.Report) => {
  if (process.ended) return false
  if (report.pid !== undefined) process.pid = report.pid
  if (report.pgid !== undefined) process.pgid = report.pgid
  let active = false
  if (report.out.byteLength > 0) {
    offer(process, { _tag: "Stdout", data: report.out })
    process.outOffset += report.out.byteLength
    active = true
  }
  if (report.err.byteLength > 0) {
    offer(process, { _tag: "Stderr", data: report.err })
    process.errOffset += report.err.byteLength
    active = true
  }
  const drained = process.outOffset >= report.outSize && process.errOffset >= report.errSize
  if (!process.exited && drained) {
    if (report.status !== undefined) exitWith(process, decodeStatus(process, report.status))
    else if (!report.runnerAlive) exitWith(process, { exitCode: null, signal: process.lastSignal ?? "SIGKILL" })
  }
  if (process.exited && drained && !report.groupAlive && !active) endStream(process)
  return active || process.ended
}

/** The Fly backend; needs an HttpClient. Fails when the API cannot be reached or the settings are wrong. */
export const make = (options: FlyBackendOptions): Effect.Effect<Backend["Type"], BackendError, HttpClient.HttpClient | Scope.Scope> =>
  Effect.gen(function*() {
    const tuning: FlyTuning = { ...DEFAULT_TUNING, ...options.tuning }
    if (options.app.trim() === "") return yield* fail("no Fly app: set --fly-app or FLY_APP_NAME")
    if (!(Number.isInteger(options.cpus) && options.cpus >= 1)) return yield* fail(`invalid CPU count ${options.cpus} (an integer ≥ 1)`)
    if (!(Number.isInteger(options.memoryMb) && options.memoryMb >= 256)) {
      return yield* fail(`invalid memory ${options.memoryMb} MB (an integer ≥ 256; Fly wants a multiple of 256)`)
    }
    if (options.rootfsSizeGb !== undefined && !(Number.isInteger(options.rootfsSizeGb) && options.rootfsSizeGb >= 1)) {
      return yield* fail(`invalid rootfs size ${options.rootfsSizeGb} GB (an integer ≥ 1)`)
    }
    const api = yield* FlyApi.make({
      apiUrl: options.apiUrl,
      app: options.app,
      token: options.token,
      requestTimeoutMs: tuning.requestTimeoutMs,
      maxRetries: tuning.maxRetries,
      retryBaseMs: tuning.retryBaseMs,
      maxRetryAfterMs: tuning.maxRetryAfterMs
    })
    // Process directories are unique per layer: a retried start finds its own directory, never another server's.
    const instanceTag = randomBytes(6).toString("hex")
    let counter = 0
    const registry = new Map<string, Live>()

    if (!options.network) {
      yield* Effect.logInfo("fly backend: Fly machines always have network access; --network off cannot be enforced on this backend")
    }

    const expiry = () => new Date(Date.now() + tuning.leaseTtlMs).toISOString()

    // ---- machines --------------------------------------------------------------------------------
    const metadataOf = (machine: FlyApi.Machine): Readonly<Record<string, string>> => machine.config?.metadata ?? {}
    const isOurs = (machine: FlyApi.Machine, id: string) => {
      const metadata = metadataOf(machine)
      return metadata[META.marker] === "true" && metadata[META.computerId] === id
    }

    /** Waits (bounded) for a machine to reach a state; a 408 from /wait just means "ask again". */
    const waitState = (machineId: string, state: "started" | "destroyed") =>
      Effect.gen(function*() {
        const deadline = Date.now() + tuning.startTimeoutMs
        for (;;) {
          const remaining = Math.ceil((deadline - Date.now()) / 1000)
          if (remaining <= 0) break
          const reached = yield* api.wait(machineId, state, Math.max(1, Math.min(tuning.waitTimeoutSeconds, remaining))).pipe(
            Effect.catchIf((error) => state === "destroyed" && error.status === 404, () => Effect.succeed(true))
          )
          if (reached) return
          const machine = yield* api.get(machineId).pipe(
            Effect.map(Option.some),
            Effect.catchIf((error) => error.status === 404, () => Effect.succeed(Option.none()))
          )
          if (Option.isNone(machine)) {
            if (state === "destroyed") return
            return yield* fail(`machine ${machineId} disappeared while waiting for it to start`)
          }
          if (machine.value.state === state) return
          if (state === "started" && GONE_STATES.has(machine.value.state)) {
            return yield* fail(`machine ${machineId} is ${machine.value.state} instead of starting`)
          }
          yield* Effect.sleep(Duration.millis(100))
        }
        return yield* fail(`machine ${machineId} did not become ${state} within ${Math.round(tuning.startTimeoutMs / 1000)} s`)
      }).pipe(Effect.mapError((error) => (error._tag === "FlyApiError" ? fromApi(error) : error)))

    /** Home and process directories exist (after create, restart, reset); retried while the machine settles. */
    const prepare = (machineId: string) =>
      api.exec(machineId, ["/bin/sh", "-c", Scripts.PREPARE, "kt", HOME], tuning.execTimeoutSeconds).pipe(
        Effect.retry({
          schedule: Schedule.spaced(Duration.millis(500)).pipe(Schedule.intersect(Schedule.recurs(20))),
          while: (error) => error.status === 409 || error.status === 412 || error.status === 404
        }),
        Effect.mapError(fromApi),
        Effect.flatMap((result) =>
          result.exit_code === 0
            ? Effect.void
            : Effect.fail(fail(`cannot prepare ${HOME} in machine ${machineId}: ${(result.stderr ?? "").trim() || `exit code ${result.exit_code}`}`))
        )
      )

    const ensureStarted = (machine: FlyApi.Machine) =>
      Effect.gen(function*() {
        switch (machine.state) {
          case "started":
            return
          case "stopping":
          case "suspending":
            yield* api.wait(machine.id, machine.state === "stopping" ? "stopped" : "suspended", 30, machine.instance_id ?? undefined).pipe(
              Effect.ignore
            )
            yield* api.start(machine.id).pipe(Effect.mapError(fromApi))
            break
          case "stopped":
          case "suspended":
            yield* api.start(machine.id).pipe(Effect.mapError(fromApi))
            break
          default:
            if (GONE_STATES.has(machine.state)) return yield* fail(`machine ${machine.id} is ${machine.state}`)
        }
        yield* waitState(machine.id, "started")
      })

    const createBody = (spec: ComputerSpec, image: string) => ({
      name: machineName(spec.id),
      ...(options.region === undefined ? {} : { region: options.region }),
      config: {
        image,
        guest: { cpu_kind: options.cpuKind, cpus: options.cpus, memory_mb: options.memoryMb },
        metadata: {
          [META.marker]: "true",
          [META.computerId]: spec.id,
          [META.temporary]: String(spec.temporary),
          [META.image]: image,
          [META.instance]: options.instanceId,
          ...(spec.temporary ? { [META.expires]: expiry() } : {})
        },
        init: { exec: KEEP_ALIVE },
        restart: { policy: spec.temporary ? "no" : "always" },
        auto_destroy: spec.temporary,
        rootfs: {
          persist: spec.temporary ? "restart" : "always",
          ...(options.rootfsSizeGb === undefined ? {} : { size_gb: options.rootfsSizeGb })
        }
      }
    })

    const findOurs = (id: string) =>
      api.list({ [META.marker]: "true", [META.computerId]: id }).pipe(
        Effect.mapError(fromApi),
        Effect.map((machines) =>
          machines.find((machine) => machine.name === machineName(id) && isOurs(machine, id) && !GONE_STATES.has(machine.state))
        )
      )

    const attach = (spec: ComputerSpec, machine: FlyApi.Machine) =>
      Effect.gen(function*() {
        const metadata = metadataOf(machine)
        const temporary = metadata[META.temporary] === "true"
        if (temporary !== spec.temporary) {
          return yield* fail(
            `computer '${spec.id}' exists as a ${temporary ? "temporary" : "permanent"} computer; it cannot be opened as a ${
              spec.temporary ? "temporary" : "permanent"
            } one`
          )
        }
        yield* ensureStarted(machine)
        yield* prepare(machine.id)
        if (spec.temporary) {
          yield* api.setMetadata(machine.id, META.expires, expiry()).pipe(Effect.ignore)
        }
        return { machineId: machine.id, image: metadata[META.image] ?? machine.config?.image ?? options.image }
      })

    const create = (spec: ComputerSpec, image: string) =>
      api.create(createBody(spec, image)).pipe(
        Effect.map(Either.right),
        Effect.catchIf((error) => error.status === 422 || error.status === 409, (error) => Effect.succeed(Either.left(error))),
        Effect.mapError(fromApi)
      )

    const attachOrCreate = (spec: ComputerSpec) =>
      Effect.gen(function*() {
        const existing = yield* findOurs(spec.id)
        if (existing !== undefined) return yield* attach(spec, existing)
        const created = yield* create(spec, options.image)
        if (Either.isLeft(created)) {
          const again = yield* findOurs(spec.id)
          if (again !== undefined) return yield* attach(spec, again)
          return yield* fail(
            `cannot create machine ${machineName(spec.id)} in app ${options.app}: ${created.left.detail} — a machine of that name exists but was not created by kilntainers for computer '${spec.id}'; it is left untouched (remove or rename it, or use another computer id)`
          )
        }
        const machine = created.right
        const started = Effect.gen(function*() {
          yield* waitState(machine.id, "started")
          yield* prepare(machine.id)
        })
        // A machine that never came up is removed rather than left behind.
        yield* started.pipe(Effect.tapError(() => api.destroy(machine.id).pipe(Effect.ignore)))
        yield* Effect.logInfo(`fly backend: created machine ${machine.id} (${machineName(spec.id)}) from ${options.image}${spec.temporary ? ", temporary" : ""}`)
        return { machineId: machine.id, image: options.image }
      })

    const destroyMachine = (machineId: string) =>
      api.destroy(machineId).pipe(
        Effect.asVoid,
        Effect.catchIf((error) => error.status === 404, () => Effect.void),
        Effect.mapError(fromApi)
      )

    // ---- lost --------------------------------------------------------------------------------------
    const dropProcesses = (live: Live) =>
      Effect.sync(() => {
        for (const process of live.followed.values()) endStream(process)
        live.followed.clear()
      })

    const markLost = (live: Live, reason: string) =>
      Effect.gen(function*() {
        if (live.gone !== undefined) return
        live.gone = reason
        registry.delete(live.machineId)
        yield* dropProcesses(live)
        yield* Effect.logWarning(`fly backend: computer ${live.spec.id}: ${reason}`)
        yield* Deferred.succeed(live.lost, reason)
      })

    /** Looks at the machine itself; marks the computer lost when it was destroyed or stopped from outside. */
    const checkMachine = (live: Live) =>
      Effect.gen(function*() {
        if (live.busy > 0 || live.gone !== undefined) return
        const machineId = live.machineId
        const machine = yield* api.get(machineId).pipe(
          Effect.map(Option.some),
          Effect.catchIf((error) => error.status === 404, () => Effect.succeed(Option.none<FlyApi.Machine>())),
          Effect.option
        )
        if (Option.isNone(machine) || live.busy > 0 || live.machineId !== machineId) return
        if (Option.isNone(machine.value) || GONE_STATES.has(machine.value.value.state)) {
          return yield* markLost(live, `its machine ${machineId} was destroyed outside kilntainers`)
        }
        if (DOWN_STATES.has(machine.value.value.state)) {
          return yield* markLost(live, `its machine ${machineId} was stopped outside kilntainers (state ${machine.value.value.state})`)
        }
      })

    // One shared watcher for every open computer: a single list call per period.
    yield* Effect.gen(function*() {
      if (registry.size === 0) return
      const machines = yield* api.list({ [META.marker]: "true" })
      const states = new Map(machines.map((machine) => [machine.id, machine.state]))
      for (const live of [...registry.values()]) {
        const state = states.get(live.machineId)
        if (state === undefined || GONE_STATES.has(state) || DOWN_STATES.has(state)) yield* checkMachine(live)
      }
    }).pipe(
      Effect.catchAll((error) => Effect.logDebug(`fly backend: watcher: ${error.description}`)),
      Effect.repeat(Schedule.spaced(Duration.millis(tuning.watchIntervalMs))),
      Effect.forkScoped
    )

    // Lease renewal of open temporary machines.
    yield* Effect.suspend(() =>
      Effect.forEach(
        [...registry.values()].filter((live) => live.spec.temporary && live.gone === undefined && live.busy === 0),
        (live) =>
          api.setMetadata(live.machineId, META.expires, expiry()).pipe(
            Effect.catchAll((error) => Effect.logDebug(`fly backend: lease of ${live.spec.id}: ${error.description}`))
          ),
        { discard: true }
      )
    ).pipe(
      Effect.delay(Duration.millis(tuning.leaseTtlMs / 3)),
      Effect.forever,
      Effect.forkScoped
    )

    // ---- reaper ------------------------------------------------------------------------------------
    const temporaries = yield* api.list({ [META.marker]: "true", [META.temporary]: "true" }).pipe(
      Effect.mapError((error) => fail(`cannot list the machines of app ${options.app}: ${error.description}`))
    )
    const now = Date.now()
    for (const machine of temporaries) {
      const metadata = metadataOf(machine)
      if (metadata[META.marker] !== "true" || metadata[META.temporary] !== "true") continue
      if (metadata[META.instance] === options.instanceId || GONE_STATES.has(machine.state)) continue
      const expires = Date.parse(metadata[META.expires] ?? "")
      const created = Date.parse(machine.created_at ?? "")
      const deadline = Number.isNaN(expires) ? (Number.isNaN(created) ? Number.NaN : created + tuning.leaseTtlMs) : expires
      if (Number.isNaN(deadline) || deadline > now) continue
      yield* destroyMachine(machine.id).pipe(
        Effect.andThen(Effect.logInfo(
          `fly backend: reaped temporary machine ${machine.id} (computer ${metadata[META.computerId]}) of server instance ${
            metadata[META.instance]
          }: its lease expired at ${new Date(deadline).toISOString()}`
        )),
        Effect.catchAll((error) => Effect.logWarning(`fly backend: cannot reap machine ${machine.id}: ${error.reason}`))
      )
    }

    // ---- processes ---------------------------------------------------------------------------------
    const usable = (live: Live) =>
      Effect.suspend(() => (live.gone === undefined ? Effect.void : Effect.fail(fail(`computer ${live.spec.id} is gone: ${live.gone}`))))

    /** An exec of one of our scripts; a non-zero exit is an error with the script's stderr. */
    const script = (live: Live, what: string, argv: ReadonlyArray<string>, stdin?: string) =>
      api.exec(live.machineId, argv, tuning.execTimeoutSeconds, stdin).pipe(
        Effect.tapError((error) =>
          error.status === 404 || error.status === 409 || error.status === 412 ? checkMachine(live) : Effect.void
        ),
        Effect.mapError((error) => fail(`${what}: ${error.description}`)),
        Effect.flatMap((result) =>
          result.exit_code === 0
            ? Effect.succeed(result.stdout ?? "")
            : Effect.fail(fail(`${what}: ${(result.stderr ?? "").trim() || `exit code ${result.exit_code}`}`))
        )
      )

    const wake = (live: Live) => Queue.unsafeOffer(live.wake, undefined)

    const poll = (live: Live) =>
      Effect.gen(function*() {
        const garbage = live.garbage.splice(0)
        if (garbage.length > 0) {
          yield* script(live, "remove finished processes", ["/bin/sh", "-c", Scripts.CLEANUP, "kt", ...garbage]).pipe(
            Effect.catchAll((error) => Effect.logDebug(`fly backend: ${error.reason}`))
          )
        }
        const generation = live.generation
        const targets = [...live.followed.values()].filter((process) =>
          !process.ended && process.generation === generation && process.pendingBytes < HOLD_BYTES
        )
        if (targets.length === 0 || live.busy > 0 || live.gone !== undefined) return false
        const args = targets.flatMap((process) => [process.dir, String(process.outOffset), String(process.errOffset)])
        const stdout = yield* script(live, "poll processes", ["/bin/sh", "-c", Scripts.POLL, "kt", String(READ_CAP), ...args])
        if (live.generation !== generation || live.gone !== undefined) return false
        const reports = Scripts.parseReports(stdout)
        if (reports === undefined || reports.length !== targets.length) {
          return yield* fail(`unexpected poll answer: ${stdout.slice(0, 200)}`)
        }
        let active = false
        targets.forEach((process, index) => {
          if (applyReport(process, reports[index]!)) active = true
          if (process.ended) {
            live.followed.delete(process.dir)
          }
        })
        return active
      })

    /** Follows the computer's processes: one exec per round for all of them, on a backoff schedule. */
    const poller = (live: Live) =>
      Effect.gen(function*() {
        let delay = tuning.pollMinMs
        for (;;) {
          if (live.followed.size === 0 && live.garbage.length === 0) {
            yield* Queue.take(live.wake)
            delay = tuning.pollMinMs
          }
          const active = yield* poll(live).pipe(
            Effect.catchAll((error) =>
              Effect.logDebug(`fly backend: computer ${live.spec.id}: ${error.reason}`).pipe(
                Effect.andThen(checkMachine(live)),
                Effect.as("failed" as const)
              )
            )
          )
          if (live.gone !== undefined) return
          delay = active === true ? tuning.pollMinMs : active === "failed" ? tuning.pollMaxMs : Math.min(delay * 2, tuning.pollMaxMs)
          const woken = yield* Queue.take(live.wake).pipe(Effect.timeout(Duration.millis(delay)), Effect.option)
          if (Option.isSome(woken)) {
            yield* Queue.takeAll(live.wake)
            delay = tuning.pollMinMs
          }
        }
      })

    const spawn = (live: Live) => (spec: SpawnSpec): Effect.Effect<BackendProcess, SpawnFailed | BackendError, Scope.Scope> =>
      Effect.gen(function*() {
        const command = spec.argv.join(" ")
        yield* usable(live)
        const invalid = invalidSpec(spec)
        if (invalid !== undefined) return yield* new SpawnFailed({ command, reason: invalid })
        const dir = `${Scripts.PROCESS_ROOT}/${instanceTag}-${++counter}`
        const env = Object.entries(spec.env).map(([key, value]) => `${key}=${value}`)
        const generation = live.generation
        const ticks = Math.max(0, Math.round(tuning.startWaitMs / 10))
        const stdout = yield* script(live, `cannot start '${command}'`, [
          "/bin/sh", "-c", Scripts.START, "kt", Scripts.RUNNER, dir, String(ticks), String(READ_CAP),
          spec.cwd, String(env.length), ...env, ...spec.argv
        ])
        const reports = stdout.trim() === "X" ? [] : Scripts.parseReports(stdout)
        if (reports === undefined) return yield* fail(`cannot start '${command}': unexpected answer ${stdout.slice(0, 200)}`)
        const first = reports[0]
        if (first?.fail !== undefined) {
          live.garbage.push(dir)
          wake(live)
          return yield* new SpawnFailed({ command, reason: first.fail })
        }
        const queue = yield* Queue.unbounded<Take.Take<ProcessEvent>>()
        const process: Followed = {
          dir,
          generation,
          queue,
          outOffset: 0,
          errOffset: 0,
          pid: null,
          pgid: undefined,
          exited: false,
          ended: false,
          stdinOffset: 0,
          stdinClosed: false,
          pendingBytes: 0,
          delivered: new Set(),
          lastSignal: undefined
        }
        const current = () => live.generation === generation && live.gone === undefined
        yield* Effect.acquireRelease(
          Effect.sync(() => {
            live.followed.set(dir, process)
            if (first !== undefined) applyReport(process, first)
            if (process.ended) live.followed.delete(dir)
            wake(live)
          }),
          () =>
            Effect.gen(function*() {
              const running = !process.ended
              live.followed.delete(dir)
              endStream(process)
              if (!current()) return
              if (running) {
                // SIGKILL what is left at once; the directory goes with it.
                yield* script(live, "kill the process", ["/bin/sh", "-c", Scripts.CLEANUP, "kt", dir]).pipe(
                  Effect.interruptible,
                  Effect.timeout(Duration.seconds(tuning.execTimeoutSeconds + 5)),
                  Effect.catchAll((error) =>
                    Effect.logWarning(`fly backend: cannot kill process ${process.pid ?? dir}: ${"reason" in error ? error.reason : "timed out"}`)
                  )
                )
              } else {
                live.garbage.push(dir)
                wake(live)
              }
            })
        )

        const stillThere = (what: string) =>
          Effect.suspend(() =>
            process.exited || process.ended || !current() ? Effect.fail(fail(`cannot ${what}: the process has ended`)) : Effect.void
          )
        const write = (data: Uint8Array) =>
          Effect.gen(function*() {
            yield* stillThere("write to stdin")
            if (process.stdinClosed) return yield* fail("cannot write to stdin: it is closed")
            for (let at = 0; at < data.byteLength; at += WRITE_CHUNK) {
              const chunk = Buffer.from(data.buffer, data.byteOffset + at, Math.min(WRITE_CHUNK, data.byteLength - at))
              yield* script(live, "cannot write to stdin", ["/bin/sh", "-c", Scripts.WRITE, "kt", `${dir}/in`, String(process.stdinOffset)], chunk.toString("base64"))
              process.stdinOffset += chunk.byteLength
            }
            wake(live)
          })
        const closeStdin = Effect.gen(function*() {
          if (process.stdinClosed || process.exited || process.ended || !current()) return
          process.stdinClosed = true
          yield* script(live, "cannot close stdin", ["/bin/sh", "-c", Scripts.CLOSE_STDIN, "kt", dir])
          wake(live)
        })
        const signal = (name: string) =>
          Effect.gen(function*() {
            const canonical = normalizeSignal(name)
            if (Either.isLeft(canonical)) return yield* fail(canonical.left)
            if (process.exited || process.ended || !current()) return
            if (process.pgid === undefined) return yield* fail("cannot signal the process: its process group is not known yet")
            const n = signalNumber(canonical.right)
            if (n !== undefined) process.delivered.add(n)
            process.lastSignal = canonical.right
            yield* script(live, `cannot deliver ${canonical.right}`, [
              "/bin/sh", "-c", Scripts.SIGNAL, "kt", canonical.right.replace(/^SIG/, ""), String(process.pgid)
            ])
            wake(live)
          })
        const events = Stream.fromQueue(queue).pipe(
          Stream.flattenTake,
          Stream.mapChunks((chunk) => {
            for (const event of chunk) if (event._tag !== "Exit") process.pendingBytes -= event.data.byteLength
            if (process.pendingBytes < HOLD_BYTES) wake(live)
            return chunk
          })
        )
        const result: BackendProcess = {
          get pid() {
            return process.pid
          },
          events,
          write,
          closeStdin,
          signal,
          resize: () => Effect.fail(new Unsupported({ backend: NAME, feature: "resize (no terminals: the Machines exec API has no TTY)" }))
        }
        return result
      })

    // ---- computers ---------------------------------------------------------------------------------
    const busy = <A, E>(live: Live, effect: Effect.Effect<A, E>) =>
      Effect.acquireUseRelease(
        Effect.sync(() => {
          live.busy++
          live.generation++
        }),
        () => effect,
        () => Effect.sync(() => live.busy--)
      )

    const open = Effect.fn("FlyBackend.open")(function*(spec: ComputerSpec) {
      if (!COMPUTER_ID.test(spec.id)) return yield* fail(`invalid computer id '${spec.id}'`)
      const { machineId, image } = yield* attachOrCreate(spec)
      const live: Live = {
        spec,
        machineId,
        image,
        generation: 0,
        busy: 0,
        gone: undefined,
        destroyed: false,
        followed: new Map(),
        garbage: [],
        wake: yield* Queue.sliding<void>(1),
        lost: yield* Deferred.make<string>()
      }
      registry.set(machineId, live)
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          registry.delete(live.machineId)
          yield* dropProcesses(live)
          if (live.destroyed) return
          if (!spec.temporary) {
            const garbage = live.garbage.splice(0)
            if (garbage.length === 0 || live.gone !== undefined) return
            return yield* script(live, "remove finished processes", ["/bin/sh", "-c", Scripts.CLEANUP, "kt", ...garbage]).pipe(
              Effect.interruptible,
              Effect.timeout(Duration.seconds(tuning.execTimeoutSeconds + 5)),
              Effect.ignore
            )
          }
          live.gone ??= "closed"
          yield* destroyMachine(live.machineId).pipe(
            Effect.interruptible,
            Effect.timeout(Duration.seconds(60)),
            Effect.catchAll((error) =>
              Effect.logWarning(`fly backend: cannot destroy the temporary machine ${live.machineId}: ${"reason" in error ? error.reason : "timed out"}`)
            )
          )
        })
      )
      // Forked after the finalizer above, so it is interrupted before the machine goes.
      yield* poller(live).pipe(Effect.forkScoped)

      const restart = usable(live).pipe(
        Effect.andThen(busy(live, Effect.gen(function*() {
          yield* dropProcesses(live)
          yield* api.restart(live.machineId).pipe(Effect.mapError(fromApi))
          yield* waitState(live.machineId, "started")
          yield* prepare(live.machineId)
        }))),
        Effect.tapError((error) => (error._tag === "BackendError" ? Effect.sync(() => (live.gone ??= `restart failed: ${error.reason}`)) : Effect.void))
      )
      const factoryReset = usable(live).pipe(
        Effect.andThen(busy(live, Effect.gen(function*() {
          yield* dropProcesses(live)
          const old = live.machineId
          registry.delete(old)
          yield* destroyMachine(old)
          yield* waitState(old, "destroyed")
          const created = yield* create(spec, live.image)
          if (Either.isLeft(created)) return yield* fail(`factory reset of ${spec.id}: the name ${machineName(spec.id)} was taken meanwhile`)
          live.machineId = created.right.id
          registry.set(live.machineId, live)
          yield* waitState(live.machineId, "started")
          yield* prepare(live.machineId)
          yield* Effect.logInfo(`fly backend: factory reset ${spec.id}: machine ${old} replaced by ${live.machineId} from ${live.image}`)
        }))),
        Effect.tapError((error) => Effect.sync(() => (live.gone ??= `factory reset failed: ${error.reason}`)))
      )
      const destroy = Effect.gen(function*() {
        if (live.destroyed) return
        live.destroyed = true
        live.gone ??= "it was deleted"
        registry.delete(live.machineId)
        yield* dropProcesses(live)
        yield* destroyMachine(live.machineId)
      })
      const computer: BackendComputer = {
        get providerId() {
          return live.machineId
        },
        home: HOME,
        get image() {
          return live.image
        },
        spawn: spawn(live),
        restart,
        factoryReset,
        destroy,
        lost: Deferred.await(live.lost)
      }
      return computer
    })

    const list = api.list({ [META.marker]: "true" }).pipe(
      Effect.mapError(fromApi),
      Effect.map((machines) =>
        machines.flatMap((machine): Array<ProviderComputer> => {
          const metadata = metadataOf(machine)
          const id = metadata[META.computerId]
          if (metadata[META.marker] !== "true" || id === undefined || GONE_STATES.has(machine.state)) return []
          return [{
            id,
            temporary: metadata[META.temporary] === "true",
            providerId: machine.id,
            image: metadata[META.image] ?? machine.config?.image ?? "",
            createdAt: machine.created_at ?? "",
            state: machine.state
          }]
        })
      )
    )

    return Backend.of({ name: NAME, capabilities, open, list })
  })

/** The Fly backend as a Layer (its watcher and lease renewal live as long as the layer). */
export const layer = (options: FlyBackendOptions): Layer.Layer<Backend, BackendError> =>
  Layer.scoped(Backend, make(options)).pipe(Layer.provide(NodeHttpClient.layerUndici))
