/**
 * The host backend: a computer is a workspace directory on this machine,
 * `<stateDir>/computers/<id>/home`, and its processes run in one bubblewrap sandbox per computer.
 *
 * The sandbox is set up once, when the computer opens: bwrap starts `kt-agent`, which then forks
 * every process of the computer on request (see AgentClient.ts, native/kt-agent.c), so a spawn
 * costs a fork+exec, not a new sandbox. TTY processes run on a node-pty terminal through
 * `kt-exec`, which hands the terminal to the agent over `<computer>/run/agent.sock`. The agent's
 * frames come back over a FIFO (created as `<computer>/agent.fifo`, unlinked once open, never
 * mounted in the sandbox) read into one reused buffer; see EventSink for the aliasing rule.
 *
 * `<computer>/computer.json` records the id, `temporary`, `createdAt`, the image and the owning
 * server (pid + start time): `list` reads it, and a new server removes temporary computers whose
 * owner is dead.
 *
 * Sandbox layout (what a process sees):
 *   /home/agent      the workspace, read-write; HOME and the default working directory
 *   /usr             read-only; /bin /lib /lib64 /sbin (/lib32 /libx32) as on the host — symlinks
 *                    into /usr on merged-usr systems, read-only binds otherwise
 *   /etc             read-only, with /etc/shadow, /etc/gshadow (and their `-` backups) replaced by
 *                    /dev/null and /etc/ssh, /etc/ssl/private hidden under empty tmpfs
 *   /opt             read-only, when the host has it
 *   /proc /dev       a new procfs (own pid namespace) and a minimal /dev with its own devpts
 *   /tmp /var/tmp    private tmpfs
 *   /run/kilntainers the computer's run directory (the agent's socket); /run/kt-agent the agent
 *   nothing else: no /root, /home/*, /var, /srv, /mnt, /media, /sys, no host /run
 * Namespaces: pid, ipc, uts (hostname = computer id), cgroup when possible, and net unless the
 * network is on (then the host's network is shared). All capabilities are dropped (this matters
 * when the server runs as root), the sandbox gets a new session (no TIOCSTI into the server's
 * terminal) and dies with the server. The server's environment is never passed in: bwrap starts
 * with an empty one and every process gets exactly `SpawnSpec.env`.
 *
 * `sandbox: "none"` runs the agent directly on the host (NOT isolated): cwd and HOME are the
 * workspace directory itself.
 */
import { Deferred, Effect, ExecutionStrategy, Exit, Layer, Option, Schema, Scope } from "effect"
import { execFile } from "node:child_process"
import { existsSync, lstatSync, readlinkSync } from "node:fs"
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises"
import { join, resolve } from "node:path"
import * as pty from "node-pty"
import { BackendError } from "../../domain/Errors.js"
import type {
  BackendComputer,
  BackendProcess,
  Capabilities,
  ComputerSpec,
  ExitInfo,
  ProviderComputer,
  SpawnSpec
} from "../../services/Backend.js"
import { Backend } from "../../services/Backend.js"
import * as AgentClient from "./AgentClient.js"
import * as AgentProcesses from "./AgentProcesses.js"
import * as NativeBinaries from "./NativeBinaries.js"
import { processStartTime } from "./ProcessOwner.js"

export interface HostBackendOptions {
  /** Computers live in `<stateDir>/computers/<id>`. */
  readonly stateDir: string
  /** false → the sandbox has only a loopback interface. */
  readonly network: boolean
  /** "none" = explicit unsandboxed mode: processes run directly on the host, NOT isolated. */
  readonly sandbox: "bwrap" | "none"
  /** Path of bwrap; found in /usr/bin, /usr/local/bin or /bin when absent. */
  readonly bwrap?: string | undefined
}

const NAME = "host"
/** A host computer's base image: an empty home. */
const IMAGE = "host"
const SANDBOX_HOME = "/home/agent"
const SANDBOX_RUN = "/run/kilntainers"
const SANDBOX_AGENT = "/run/kt-agent"
const TERMINATE_GRACE = "2 seconds"
/** How long the last bytes of a finished TTY process may be late before its terminal is released. */
const TTY_STALL_MS = 1000
const COMPUTER_ID = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/
const MINIMAL_ENV = { PATH: "/usr/local/bin:/usr/bin:/bin" }

const NO_SANDBOX_HINT = "or start with --unsafe-no-sandbox to run unsandboxed (NOT isolated)"

/** The capabilities of the host backend. */
export const capabilities: Capabilities = {
  pty: true,
  stdin: true,
  signals: true,
  restart: true,
  factoryReset: true,
  persistence: true,
  files: true,
  networkControl: true
}

const fail = (reason: string) => new BackendError({ backend: NAME, reason })

const findBwrap = (configured: string | undefined): string | undefined =>
  configured ?? ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"].find((path) => existsSync(path))

/** bwrap arguments for the filesystem layout and namespaces, without the computer's own mounts. */
export const sandboxArgs = (options: { readonly hostname: string; readonly network: boolean }): Array<string> => {
  const args = ["--ro-bind", "/usr", "/usr"]
  for (const name of ["bin", "lib", "lib64", "sbin", "lib32", "libx32"]) {
    const path = `/${name}`
    try {
      const stat = lstatSync(path)
      if (stat.isSymbolicLink()) args.push("--symlink", readlinkSync(path), path)
      else if (stat.isDirectory()) args.push("--ro-bind", path, path)
    } catch {
      // absent on this host
    }
  }
  args.push("--ro-bind", "/etc", "/etc")
  for (const secret of ["/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-"]) {
    if (existsSync(secret)) args.push("--ro-bind", "/dev/null", secret)
  }
  for (const secretDir of ["/etc/ssh", "/etc/ssl/private"]) {
    if (existsSync(secretDir)) args.push("--tmpfs", secretDir)
  }
  if (existsSync("/opt")) args.push("--ro-bind", "/opt", "/opt")
  args.push(
    "--proc", "/proc",
    "--dev", "/dev",
    "--tmpfs", "/tmp",
    "--tmpfs", "/var/tmp",
    "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
    ...(options.network ? [] : ["--unshare-net"]),
    "--die-with-parent",
    "--new-session",
    "--cap-drop", "ALL",
    "--hostname", options.hostname,
    "--clearenv"
  )
  return args
}

const run = (file: string, args: ReadonlyArray<string>) =>
  Effect.async<{ readonly code: number | null; readonly stderr: string; readonly message: string; readonly notFound: boolean }>((resume) => {
    const child = execFile(file, [...args], { env: MINIMAL_ENV, timeout: 20_000 }, (error, _stdout, stderr) => {
      const code = error ? (typeof error.code === "number" ? error.code : null) : 0
      resume(Effect.succeed({ code, stderr, message: error?.message ?? "", notFound: error?.code === "ENOENT" }))
    })
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/** Runs a trivial sandbox once and explains how to fix the host when it does not work. */
const checkBwrap = (bwrap: string | undefined, network: boolean) =>
  Effect.gen(function*() {
    if (bwrap === undefined) {
      return yield* fail(
        `bubblewrap (bwrap) is not installed, so processes cannot be isolated. Install it with 'sudo apt-get install bubblewrap' (dnf/pacman: package 'bubblewrap'), ${NO_SANDBOX_HINT}.`
      )
    }
    const result = yield* run(bwrap, [...sandboxArgs({ hostname: "kilntainers-check", network }), "--", "true"])
    if (result.notFound) {
      return yield* fail(`bwrap was not found at ${bwrap}. Install it with 'sudo apt-get install bubblewrap', ${NO_SANDBOX_HINT}.`)
    }
    if (result.code === 0) return
    const said = result.stderr.trim() || result.message || `exit code ${result.code}`
    if (/namespace|uid map|Operation not permitted|Permission denied/i.test(said)) {
      return yield* fail(
        `bwrap cannot create a sandbox here (${said}). Unprivileged user namespaces are probably disabled: enable them with 'sudo sysctl -w kernel.unprivileged_userns_clone=1' (Debian) or 'sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0' (Ubuntu 23.10+), or allow them in the container runtime, ${NO_SANDBOX_HINT}.`
      )
    }
    return yield* fail(`bwrap does not work on this host (${said}); ${NO_SANDBOX_HINT}.`)
  })

interface Computer {
  readonly client: AgentClient.AgentClient
  readonly binaries: NativeBinaries.NativeBinaries
  /** The agent socket as seen from the host. */
  readonly socket: string
  readonly runDir: string
}

const killOnClose = (computer: Computer, id: number, sink: AgentProcesses.EventSink) =>
  AgentProcesses.killOnClose(computer.client, id, sink)

const agentAlive = (computer: Computer) => AgentProcesses.agentAlive(NAME, computer.client)

const signalProcess = (computer: Computer, id: number) => AgentProcesses.signalProcess(NAME, computer.client, id)

const spawnPipes = (computer: Computer, spec: SpawnSpec) => AgentProcesses.spawnPipes(NAME, computer.client, spec)

const spawnTty = (computer: Computer, spec: SpawnSpec, size: { readonly cols: number; readonly rows: number }) =>
  Effect.gen(function*() {
    const sink = new AgentProcesses.EventSink()
    const { client } = computer
    let term: pty.IPty | undefined
    sink.hold = (hold) => (hold ? term?.pause() : term?.resume())
    let ptyDone = false
    let started = false
    let received = 0
    let agentExit: { readonly exit: ExitInfo; readonly bytes: number } | undefined
    let closedAt: number | undefined
    let released = false
    let early = ""
    // The agent counts the bytes it relays to the terminal: Exit is emitted once that many arrived,
    // and the terminal is released (kt-exec exits, the pty reaches EOF) once all of them arrived.
    // Rarely the host terminal holds back the last bytes until it is closed: when they have not
    // come a while after the exit, the terminal is released anyway (closing it delivers them).
    let stalled: ReturnType<typeof setTimeout> | undefined
    let lastReceived = -1
    const watchStall = () => {
      if (stalled !== undefined || released) return
      stalled = setTimeout(() => {
        stalled = undefined
        if (released || agentExit === undefined || received >= agentExit.bytes) return
        if (received !== lastReceived) {
          lastReceived = received
          return watchStall()
        }
        released = true
        client.release(id)
      }, TTY_STALL_MS)
      stalled.unref()
    }
    const settle = () => {
      if (agentExit !== undefined && (received >= agentExit.bytes || ptyDone)) sink.exit(agentExit.exit)
      else if (agentExit !== undefined) watchStall()
      if (closedAt !== undefined && (received >= closedAt || ptyDone)) {
        if (!released) {
          released = true
          client.release(id)
        }
        sink.end()
      } else if (released && ptyDone) {
        // Released early (see watchStall): the agent reports nothing more, the terminal is gone.
        sink.end()
      }
    }
    let id = -1
    const env = spec.env["TERM"] === undefined ? { ...spec.env, TERM: "xterm-256color" } : spec.env
    const { pid } = yield* Effect.acquireRelease(
      client.spawnTty({ argv: spec.argv, cwd: spec.cwd, env }, {
        onStdout: sink.data,
        onStderr: sink.stderr,
        onExit: (exit, bytes) => {
          agentExit = { exit, bytes: bytes ?? 0 }
          settle()
        },
        onClosed: (bytes) => {
          // Undefined: the agent died; nothing more will be relayed.
          closedAt = bytes ?? 0
          if (bytes === undefined) ptyDone = true
          settle()
        }
      }, (agentId, nonce) => {
        id = agentId
        try {
          term = pty.spawn(computer.binaries.exec, [computer.socket, String(id), nonce], {
            name: env["TERM"] ?? "xterm-256color",
            cols: size.cols,
            rows: size.rows,
            cwd: computer.runDir,
            env: {},
            encoding: null
          })
        } catch (error) {
          client.abandon(id, `cannot open a terminal: ${String(error)}`)
          return
        }
        term.onData((data) => {
          const bytes = data as unknown as Buffer
          if (!started) early += bytes.toString("utf8")
          received += bytes.byteLength
          sink.data(bytes)
          settle()
        })
        term.onExit(() => {
          ptyDone = true
          client.abandon(id, `the terminal helper ended before the process started${early.trim() ? `: ${early.trim()}` : ""}`)
          settle()
        })
      }),
      () =>
        Effect.sync(() => {
          if (!ptyDone) term?.kill("SIGKILL")
        }).pipe(Effect.andThen(killOnClose(computer, id, sink)))
    )
    started = true
    const live = Effect.suspend(() =>
      term === undefined || ptyDone ? Effect.fail(fail("the terminal is closed")) : agentAlive(computer).pipe(Effect.as(term))
    )
    const process: BackendProcess = {
      pid,
      events: sink.events,
      write: (data) =>
        live.pipe(Effect.andThen((t) => t.write(Buffer.from(data.buffer, data.byteOffset, data.byteLength)))),
      closeStdin: live.pipe(Effect.andThen((t) => t.write("\x04"))),
      signal: signalProcess(computer, id),
      resize: (cols, rows) =>
        Number.isInteger(cols) && Number.isInteger(rows) && cols > 0 && rows > 0 && cols <= 65535 && rows <= 65535
          ? live.pipe(Effect.andThen((t) => t.resize(cols, rows)))
          : Effect.fail(fail(`invalid terminal size ${cols}x${rows}`))
    }
    return process
  })

/** Ends every process of the computer: SIGTERM to each group, SIGKILL after a short grace. */
const terminateAll = (client: AgentClient.AgentClient) =>
  Effect.gen(function*() {
    if (client.failure !== undefined || client.liveCount() === 0) {
      client.signalAll("SIGKILL")
      return
    }
    client.signalAll("SIGTERM")
    // Finalizers are uninterruptible: the wait must be made interruptible or the timeout would hang.
    yield* client.awaitIdle.pipe(Effect.interruptible, Effect.timeout(TERMINATE_GRACE), Effect.ignore)
    client.signalAll("SIGKILL")
  })

const removeDir = (path: string) =>
  Effect.tryPromise(() => rm(path, { recursive: true, force: true, maxRetries: 3 })).pipe(
    Effect.catchAll((error) => Effect.logWarning(`host backend: cannot remove ${path}: ${String(error.error)}`))
  )

/** What `<computer>/computer.json` records. `owner` is the server that opened it last (a live one keeps it). */
const Metadata = Schema.Struct({
  id: Schema.String,
  temporary: Schema.Boolean,
  createdAt: Schema.String,
  image: Schema.String,
  owner: Schema.optional(Schema.Struct({ pid: Schema.Number, startTime: Schema.String }))
})
type Metadata = typeof Metadata.Type
const decodeMetadata = Schema.decodeUnknownOption(Schema.parseJson(Metadata))
const METADATA = "computer.json"

export { processStartTime } from "./ProcessOwner.js"

const ownerAlive = (owner: NonNullable<Metadata["owner"]>) => processStartTime(owner.pid) === owner.startTime

const readMetadata = (computerDir: string) =>
  Effect.promise(() => readFile(join(computerDir, METADATA), "utf8").catch(() => undefined)).pipe(
    Effect.map((text) => (text === undefined ? Option.none<Metadata>() : decodeMetadata(text)))
  )

const writeMetadata = (computerDir: string, metadata: Metadata) =>
  Effect.tryPromise({
    try: async () => {
      const tmp = join(computerDir, `.${METADATA}.${process.pid}`)
      await writeFile(tmp, JSON.stringify(metadata) + "\n")
      await rename(tmp, join(computerDir, METADATA))
    },
    catch: (error) => fail(`cannot record the computer in ${computerDir}: ${String(error)}`)
  })

/** Computer directories open in this process (a second agent would take over the first one's socket). */
const openHere = new Set<string>()

/**
 * Runs `effect` in a new child Scope of `parent`, closed at once when the effect fails (so a failed
 * step releases what it acquired without waiting for the parent), else with the parent or by hand.
 */
const inChildScope = <A, E>(parent: Scope.Scope, effect: Effect.Effect<A, E, Scope.Scope>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.fork(parent, ExecutionStrategy.sequential)
    const value = yield* effect.pipe(
      Scope.extend(scope),
      Effect.onExit((exit) => (Exit.isFailure(exit) ? Scope.close(scope, exit) : Effect.void))
    )
    return { value, scope }
  })

interface RunningAgent extends Computer {
  /** Set before a restart/destroy stops the agent: kill at once instead of SIGTERM + grace. */
  immediate: boolean
}

/** The host backend: bubblewrap sandboxes (or, explicitly, none) around workspace directories. */
export const make = (options: HostBackendOptions) =>
  Effect.gen(function*() {
    const binaries = yield* NativeBinaries.locate(NAME)
    const sandboxed = options.sandbox === "bwrap"
    const bwrap = sandboxed ? findBwrap(options.bwrap) : undefined
    if (sandboxed) yield* checkBwrap(bwrap, options.network)
    else yield* Effect.logWarning("host backend: running WITHOUT a sandbox; processes are NOT isolated from this machine")

    const computersDir = resolve(options.stateDir, "computers")
    const self = { pid: process.pid, startTime: processStartTime(process.pid) ?? "" }

    const computerDirs = Effect.promise(() =>
      readdir(computersDir, { withFileTypes: true }).then(
        (entries) => entries.filter((entry) => entry.isDirectory() && COMPUTER_ID.test(entry.name)).map((entry) => entry.name),
        () => []
      )
    )

    // Temporary computers of servers that died without cleaning up (crash, SIGKILL).
    for (const id of yield* computerDirs) {
      const dir = join(computersDir, id)
      const metadata = yield* readMetadata(dir)
      if (Option.isNone(metadata) || !metadata.value.temporary) continue
      const owner = metadata.value.owner
      if (owner === undefined || ownerAlive(owner) || openHere.has(dir)) continue
      yield* Effect.logInfo(`host backend: removing temporary computer '${id}' left behind by server pid ${owner.pid}`)
      yield* removeDir(dir)
    }

    const list = Effect.gen(function*() {
      const found: Array<ProviderComputer> = []
      for (const id of yield* computerDirs) {
        const dir = join(computersDir, id)
        const metadata = yield* readMetadata(dir)
        if (Option.isNone(metadata) || metadata.value.id !== id) continue
        found.push({
          id,
          temporary: metadata.value.temporary,
          providerId: join(dir, "home"),
          image: metadata.value.image,
          createdAt: metadata.value.createdAt,
          state: openHere.has(dir) ? "running" : "stopped"
        })
      }
      return found as ReadonlyArray<ProviderComputer>
    })

    /** Checks and records the computer in computer.json: a new one, or ours to re-attach. */
    const attach = (spec: ComputerSpec, computerDir: string) =>
      Effect.gen(function*() {
        const existing = yield* readMetadata(computerDir)
        if (Option.isSome(existing)) {
          const recorded = existing.value
          if (recorded.temporary !== spec.temporary) {
            return yield* fail(
              `computer '${spec.id}' exists and is ${recorded.temporary ? "temporary" : "permanent"}; open it with temporary: ${recorded.temporary}, or use another id`
            )
          }
          const owner = recorded.owner
          if (owner !== undefined && owner.pid !== self.pid && ownerAlive(owner)) {
            return yield* fail(`computer '${spec.id}' is in use by another kilntainers server (pid ${owner.pid})`)
          }
        }
        const createdAt = Option.isSome(existing) ? existing.value.createdAt : new Date().toISOString()
        yield* Effect.tryPromise({
          try: () => mkdir(join(computerDir, "run"), { recursive: true }),
          catch: (error) => fail(`cannot create the computer directory ${computerDir}: ${String(error)}`)
        })
        const metadata: Metadata = { id: spec.id, temporary: spec.temporary, createdAt, image: IMAGE }
        yield* writeMetadata(computerDir, { ...metadata, owner: self })
        return metadata
      })

    const makeHome = (homeDir: string) =>
      Effect.tryPromise({
        try: () => mkdir(homeDir, { recursive: true }),
        catch: (error) => fail(`cannot create the workspace ${homeDir}: ${String(error)}`)
      })

    // Whatever a failed open acquired is released at once, not with the caller's Scope.
    const open = (spec: ComputerSpec) =>
      Effect.scope.pipe(
        Effect.flatMap((scope) => inChildScope(scope, openIn(spec))),
        Effect.map(({ value }) => value),
        Effect.withSpan("HostBackend.open")
      )

    const openIn = Effect.fnUntraced(
      function*(spec: ComputerSpec) {
        if (!COMPUTER_ID.test(spec.id)) return yield* fail(`invalid computer id '${spec.id}'`)
        const computerDir = join(computersDir, spec.id)
        const homeDir = join(computerDir, "home")
        const runDir = join(computerDir, "run")
        yield* Effect.acquireRelease(
          Effect.suspend(() => {
            if (openHere.has(computerDir)) return fail(`computer '${spec.id}' is already open`)
            openHere.add(computerDir)
            return Effect.void
          }),
          () => Effect.sync(() => openHere.delete(computerDir))
        )
        const metadata = yield* attach(spec, computerDir)
        let destroyed = false
        // Added before the agent so they run after the agent is gone.
        if (spec.temporary) yield* Effect.addFinalizer(() => removeDir(computerDir))
        else {
          // Released: another server may open it now.
          yield* Effect.addFinalizer(() =>
            destroyed ? Effect.void : writeMetadata(computerDir, metadata).pipe(Effect.ignore)
          )
        }
        yield* makeHome(homeDir)

        const parent = yield* Effect.scope
        const lost = yield* Deferred.make<string>()
        const onLost = (reason: string) =>
          Deferred.unsafeDone(lost, Exit.succeed(`computer '${spec.id}' was lost: ${reason}`))
        // Outside the sandbox's mounts: processes inside cannot reach the agent's output channel.
        const channel = join(computerDir, "agent.fifo")
        const command: AgentClient.AgentCommand = sandboxed && bwrap !== undefined
          ? {
            file: bwrap,
            args: [
              ...sandboxArgs({ hostname: spec.id, network: options.network }),
              "--bind", homeDir, SANDBOX_HOME,
              "--bind", runDir, SANDBOX_RUN,
              "--ro-bind", binaries.agent, SANDBOX_AGENT,
              "--chdir", SANDBOX_HOME,
              "--", SANDBOX_AGENT, "--socket", `${SANDBOX_RUN}/agent.sock`
            ],
            cwd: homeDir,
            env: MINIMAL_ENV,
            channel
          }
          : { file: binaries.agent, args: ["--socket", join(runDir, "agent.sock")], cwd: homeDir, env: MINIMAL_ENV, channel }

        const startAgent = inChildScope(parent, Effect.gen(function*() {
          const client = yield* AgentClient.make(NAME, command, onLost)
          const agent: RunningAgent = { client, binaries, socket: join(runDir, "agent.sock"), runDir, immediate: false }
          yield* Effect.addFinalizer(() =>
            agent.immediate ? Effect.sync(() => client.signalAll("SIGKILL")) : terminateAll(client)
          )
          return agent
        }))

        let agent = yield* startAgent
        const stopAgent = Effect.suspend(() => {
          agent.value.immediate = true
          return Scope.close(agent.scope, Exit.void)
        })
        // restart, factoryReset and destroy one at a time.
        const lifecycle = yield* Effect.makeSemaphore(1)
        const usable = Effect.suspend(() => destroyed ? fail(`computer '${spec.id}' was destroyed`) : Effect.void)
        const recreate = (erase: boolean) =>
          lifecycle.withPermits(1)(Effect.gen(function*() {
            yield* usable
            yield* stopAgent
            if (erase) {
              yield* Effect.tryPromise({
                try: () => rm(homeDir, { recursive: true, force: true, maxRetries: 3 }),
                catch: (error) => fail(`cannot erase the workspace ${homeDir}: ${String(error)}`)
              })
            }
            yield* makeHome(homeDir)
            agent = yield* startAgent
          }))

        const backendComputer: BackendComputer = {
          providerId: homeDir,
          home: sandboxed ? SANDBOX_HOME : homeDir,
          image: IMAGE,
          spawn: (spec) =>
            Effect.suspend(() => {
              if (destroyed) return fail(`the computer was destroyed`)
              const computer = agent.value
              return spec.tty ? spawnTty(computer, spec, spec.tty) : spawnPipes(computer, spec)
            }),
          restart: recreate(false),
          factoryReset: recreate(true),
          destroy: lifecycle.withPermits(1)(Effect.gen(function*() {
            if (destroyed) return
            destroyed = true
            yield* stopAgent
            yield* Effect.tryPromise({
              try: () => rm(computerDir, { recursive: true, force: true, maxRetries: 3 }),
              catch: (error) => fail(`cannot remove ${computerDir}: ${String(error)}`)
            })
          })),
          lost: Deferred.await(lost)
        }
        return backendComputer
      }
    )

    return Backend.of({ name: NAME, capabilities, open, list })
  })

/** The host backend as a Layer; fails when the sandbox cannot work here, saying how to fix it. */
export const layer = (options: HostBackendOptions): Layer.Layer<Backend, BackendError> => Layer.effect(Backend, make(options))
