import { Command, Options } from "@effect/cli"
import { Config, Effect, Logger, LogLevel, Option, Redacted } from "effect"
import { randomUUID } from "node:crypto"
import { homedir } from "node:os"
import { join } from "node:path"
import { serveHttpForever } from "../layers/mcp/HttpServer.js"
import { serverInfo, serveStdio } from "../layers/mcp/McpServer.js"
import * as Main from "../layers/Main.js"
import { defaultSettings, type SettingsShape } from "../services/Settings.js"

const wasmFuelUnsupported =
  "--wasm-fuel is not supported: Node.js has no WebAssembly instruction metering; use --wasm-timeout-ms (wall clock) instead"

const env = (name: string) => `KILNTAINERS_${name.toUpperCase().replace(/-/g, "_")}`

const int = (name: string, fallback: number, description: string) =>
  Options.integer(name).pipe(
    Options.withFallbackConfig(Config.integer(env(name))),
    Options.withDefault(fallback),
    Options.withDescription(`${description} (default ${fallback}; env ${env(name)})`)
  )

const flag = (name: string, description: string) =>
  Options.boolean(name).pipe(
    Options.withFallbackConfig(Config.boolean(env(name)).pipe(Config.withDefault(false))),
    Options.withDescription(`${description} (env ${env(name)}=true)`)
  )

const text = (name: string, description: string) =>
  Options.text(name).pipe(
    Options.withFallbackConfig(Config.string(env(name))),
    Options.optional,
    Options.withDescription(`${description} (env ${env(name)})`)
  )

const defaultStateDir = Config.string("XDG_STATE_HOME").pipe(
  Config.map((dir) => join(dir, "kilntainers")),
  Config.orElse(() => Config.string("HOME").pipe(Config.map((home) => join(home, ".local", "state", "kilntainers")))),
  Config.orElse(() => Config.succeed(join(homedir(), ".local", "state", "kilntainers")))
)

const options = {
  backend: Options.choice("backend", ["auto", "host", "docker", "fly", "e2b", "modal", "wasm", "toolset", "go_busybox"]).pipe(
    Options.withFallbackConfig(Config.literal("auto", "host", "docker", "fly", "e2b", "modal", "wasm", "toolset", "go_busybox")(env("backend"))),
    Options.withDefault("auto" as const),
    Options.withDescription(
      "Where computers run: docker (a container per computer; also podman and remote engines), host (a bubblewrap " +
        "sandbox per computer), fly (Fly Machines), e2b (E2B sandboxes), modal (Modal sandboxes), toolset (alias " +
        "go_busybox: text tools as WebAssembly, no engine, no network), wasm (your WASI module, --wasm-path), or auto " +
        "(default: docker when an engine answers, else host) (env KILNTAINERS_BACKEND)"
    )
  ),
  engine: Options.choice("engine", ["docker", "podman"]).pipe(
    Options.withFallbackConfig(Config.literal("docker", "podman")(env("engine"))),
    Options.withDefault("docker" as const),
    Options.withDescription("Container engine: docker, or podman through its Docker-compatible socket (env KILNTAINERS_ENGINE)")
  ),
  dockerHost: text("docker-host", "Engine address: unix:///path, tcp://host:port or ssh://user@host (default: the local socket)"),
  image: Options.text("image").pipe(
    Options.withFallbackConfig(Config.string(env("image"))),
    Options.withDefault(defaultSettings.image),
    Options.withDescription(`Docker image of new computers (default ${defaultSettings.image}; env ${env("image")})`)
  ),
  cpu: Options.float("cpu").pipe(
    Options.withFallbackConfig(Config.number(env("cpu"))),
    Options.optional,
    Options.withDescription(`CPUs per container (default 1; env ${env("cpu")})`)
  ),
  memory: text("memory", "Memory per container, e.g. 512m or 2g (default 1g)"),
  pidsLimit: int("pids-limit", defaultSettings.pidsLimit, "Most processes per container"),
  dockerRunFlag: Options.text("docker-run-flag").pipe(
    Options.repeated,
    Options.withDescription(
      "Extra container option in docker-run syntax, repeatable (supported: --cap-add, --env, --volume, --read-only, " +
        "--tmpfs, --user, --shm-size, --ulimit, --add-host, --dns)"
    )
  ),
  transport: Options.choice("transport", ["stdio", "http"]).pipe(
    Options.withFallbackConfig(Config.literal("stdio", "http")(env("transport"))),
    Options.withDefault("stdio" as const),
    Options.withDescription("MCP transport: stdio (default) or http (env KILNTAINERS_TRANSPORT)")
  ),
  host: Options.text("host").pipe(
    Options.withFallbackConfig(Config.string(env("host"))),
    Options.withDefault("127.0.0.1"),
    Options.withDescription("HTTP: address to bind (default 127.0.0.1; env KILNTAINERS_HOST)")
  ),
  port: int("port", 8435, "HTTP: port (0 picks a free one)"),
  sessionTimeout: int("session-timeout", 300, "HTTP: seconds without a request after which an MCP session is closed and its temporary computers removed"),
  authToken: Options.redacted("auth-token").pipe(
    Options.withFallbackConfig(Config.redacted(env("auth-token"))),
    Options.optional,
    Options.withDescription("HTTP: bearer token required on /mcp (env KILNTAINERS_AUTH_TOKEN; prefer the variable: flags show in ps)")
  ),
  allowUnauthenticatedHttp: flag("allow-unauthenticated-http", "HTTP: allow a non-loopback --host without --auth-token"),
  maxSessions: int("max-sessions", 100, "HTTP: most concurrent MCP sessions"),
  // Fly Machines
  flyApp: Options.text("fly-app").pipe(
    Options.withFallbackConfig(Config.string("FLY_APP_NAME")),
    Options.optional,
    Options.withDescription("fly: the Fly app whose machines are the computers (env FLY_APP_NAME)")
  ),
  flyToken: Options.redacted("fly-token").pipe(
    Options.withFallbackConfig(Config.redacted("FLY_API_TOKEN").pipe(Config.orElse(() => Config.redacted("FLY_TOKEN")))),
    Options.optional,
    Options.withDescription("fly: API token (prefer env FLY_API_TOKEN or FLY_TOKEN: flags show in ps)")
  ),
  flyImage: Options.text("fly-image").pipe(Options.withDefault("debian:bookworm-slim"), Options.withDescription("fly: machine image (default debian:bookworm-slim)")),
  flyRegion: Options.text("fly-region").pipe(
    Options.withFallbackConfig(Config.string("FLY_REGION")),
    Options.optional,
    Options.withDescription("fly: region (env FLY_REGION)")
  ),
  flyCpuKind: Options.choice("fly-cpu-kind", ["shared", "performance"]).pipe(Options.withDefault("shared" as const), Options.withDescription("fly: CPU kind (default shared)")),
  flyCpus: Options.integer("fly-cpus").pipe(Options.withDefault(1), Options.withDescription("fly: CPUs per machine (default 1)")),
  flyMemory: Options.integer("fly-memory").pipe(Options.withDefault(512), Options.withDescription("fly: memory per machine, MB (default 512, >= 256)")),
  flyRootfsSize: Options.integer("fly-rootfs-size").pipe(Options.optional, Options.withDescription("fly: root filesystem size, GB")),
  flyApiUrl: Options.text("fly-api-url").pipe(Options.withDefault("https://api.machines.dev"), Options.withDescription("fly: Machines API URL")),
  // E2B
  e2bApiKey: Options.redacted("e2b-api-key").pipe(
    Options.withFallbackConfig(Config.redacted("E2B_API_KEY")),
    Options.optional,
    Options.withDescription("e2b: API key (prefer env E2B_API_KEY)")
  ),
  e2bTemplate: Options.text("e2b-template").pipe(Options.withDefault("base"), Options.withDescription("e2b: sandbox template (default base)")),
  e2bSandboxTimeout: Options.integer("e2b-sandbox-timeout").pipe(Options.withDefault(3600), Options.withDescription("e2b: sandbox lifetime, seconds, renewed while in use (default 3600)")),
  e2bMetadata: Options.keyValueMap("e2b-metadata").pipe(Options.optional, Options.withDescription("e2b: k=v metadata on sandboxes (repeatable)")),
  e2bEnv: Options.keyValueMap("e2b-env").pipe(Options.optional, Options.withDescription("e2b: k=v sandbox environment (repeatable)")),
  e2bApiUrl: Options.text("e2b-api-url").pipe(Options.optional, Options.withDescription("e2b: control-plane API URL (the SDK's apiUrl)")),
  e2bSandboxUrl: Options.text("e2b-sandbox-url").pipe(Options.optional, Options.withDescription("e2b: sandbox (envd) URL (the SDK's sandboxUrl)")),
  e2bDomain: Options.text("e2b-domain").pipe(Options.optional, Options.withDescription("e2b: E2B domain")),
  e2bHome: Options.text("e2b-home").pipe(Options.optional, Options.withDescription("e2b: home directory in the template (default /home/user)")),
  // Modal
  modalTokenId: Options.redacted("modal-token-id").pipe(
    Options.withFallbackConfig(Config.redacted("MODAL_TOKEN_ID")),
    Options.optional,
    Options.withDescription("modal: token id (env MODAL_TOKEN_ID)")
  ),
  modalTokenSecret: Options.redacted("modal-token-secret").pipe(
    Options.withFallbackConfig(Config.redacted("MODAL_TOKEN_SECRET")),
    Options.optional,
    Options.withDescription("modal: token secret (env MODAL_TOKEN_SECRET)")
  ),
  modalAppName: Options.text("modal-app-name").pipe(Options.withDefault("kilntainers"), Options.withDescription("modal: app name (default kilntainers)")),
  modalImage: Options.text("modal-image").pipe(Options.withDefault("debian:bookworm-slim"), Options.withDescription("modal: registry image (default debian:bookworm-slim)")),
  modalCpu: Options.float("modal-cpu").pipe(Options.withDefault(1), Options.withDescription("modal: CPUs (default 1.0)")),
  modalMemory: Options.integer("modal-memory").pipe(Options.withDefault(512), Options.withDescription("modal: memory, MiB (default 512)")),
  gpu: Options.text("gpu").pipe(Options.optional, Options.withDescription("modal: GPU, e.g. T4 or A100-80GB:2")),
  region: Options.text("region").pipe(Options.optional, Options.withDescription("modal: region, e.g. us-east")),
  sandboxTimeout: Options.integer("sandbox-timeout").pipe(Options.withDefault(3600), Options.withDescription("modal: sandbox lifetime, seconds (default 3600, max 86400)")),
  wasmPath: text("wasm-path", "wasm: the WASI module every process runs"),
  wasmMaxMemory: int("wasm-max-memory", defaultSettings.wasmMaxMemoryMb, "wasm/toolset: memory cap per module, MiB"),
  wasmTimeoutMs: int("wasm-timeout-ms", defaultSettings.wasmTimeoutMs, "wasm/toolset: wall clock per process, ms (0: only the tools' timeouts)"),
  wasmFuel: Options.integer("wasm-fuel").pipe(Options.optional, Options.withDescription("wasm: instruction budget — NOT supported (Node has no metering); use --wasm-timeout-ms")),
  timeout: int("timeout", defaultSettings.timeout, "sandbox_exec default timeout, seconds (>= 1)"),
  outputLimit: int("output-limit", defaultSettings.outputLimit, "Most bytes of output one sandbox_exec result carries (>= 1)"),
  shell: Options.text("shell").pipe(
    Options.withFallbackConfig(Config.string(env("shell"))),
    Options.withDefault(defaultSettings.shell),
    Options.withDescription(`Shell that runs command strings (default ${defaultSettings.shell}; env ${env("shell")})`)
  ),
  network: flag("network", "Give computers network access (off by default)"),
  toolInstructionOverride: text("tool-instruction-override", "Replace the sandbox_exec tool description"),
  extendedToolInstruction: text("extended-tool-instruction", "Append to the sandbox_exec tool description"),
  stateDir: text("state-dir", "Where computers' workspaces live (default $XDG_STATE_HOME/kilntainers or ~/.local/state/kilntainers)"),
  unsafeNoSandbox: flag(
    "unsafe-no-sandbox",
    "DANGEROUS: run host processes without bubblewrap isolation, with full access to your files"
  ),
  bwrapPath: text("bwrap-path", "bubblewrap executable (default: found in /usr/bin, /usr/local/bin, /bin)"),
  spawnTimeoutMs: int("spawn-timeout-ms", defaultSettings.spawnTimeoutMs, "spawn: default wait before a process moves to the background, ms"),
  maxTimeoutMs: int("max-timeout-ms", defaultSettings.maxTimeoutMs, "spawn/wait: longest wait a call may ask for, ms"),
  maxFinished: int("max-finished", defaultSettings.maxFinished, "Finished processes kept listable (oldest evicted first)"),
  headBytes: int("head-bytes", defaultSettings.headBytes, "Output kept from the start of each stream, bytes"),
  tailBytes: int("tail-bytes", defaultSettings.tailBytes, "Output kept from the end of each stream, bytes"),
  cols: int("cols", defaultSettings.cols, "Default terminal columns of TTY processes"),
  rows: int("rows", defaultSettings.rows, "Default terminal rows of TTY processes"),
  killGraceMs: int("kill-grace-ms", defaultSettings.killGraceMs, "Grace between SIGTERM and SIGKILL at shutdown, ms"),
  env: Options.keyValueMap("env").pipe(
    Options.optional,
    Options.withDescription("NAME=VALUE set in every process's environment (repeatable)")
  ),
  logLevel: Options.choice("log-level", ["debug", "info", "warning", "error", "none"]).pipe(
    Options.withFallbackConfig(Config.literal("debug", "info", "warning", "error", "none")(env("log-level"))),
    Options.withDefault("info" as const),
    Options.withDescription("Logging to stderr (default info; env KILNTAINERS_LOG_LEVEL)")
  )
}

type Parsed = Command.Command.ParseConfig<typeof options>

const levels = {
  debug: LogLevel.Debug,
  info: LogLevel.Info,
  warning: LogLevel.Warning,
  error: LogLevel.Error,
  none: LogLevel.None
} as const

/** Turns parsed flags into settings, rejecting values out of range with a clear message. */
export const toSettings = (parsed: Parsed) =>
  Effect.gen(function*() {
    const positive = (name: string, value: number, min = 1) =>
      value >= min ? Effect.void : Effect.fail(`--${name} must be >= ${min} (got ${value})`)
    yield* positive("timeout", parsed.timeout)
    yield* positive("output-limit", parsed.outputLimit)
    yield* positive("spawn-timeout-ms", parsed.spawnTimeoutMs, 0)
    yield* positive("max-timeout-ms", parsed.maxTimeoutMs)
    yield* positive("max-finished", parsed.maxFinished, 0)
    yield* positive("head-bytes", parsed.headBytes, 0)
    yield* positive("tail-bytes", parsed.tailBytes, 1)
    yield* positive("cols", parsed.cols, 2)
    yield* positive("rows", parsed.rows, 2)
    yield* positive("kill-grace-ms", parsed.killGraceMs, 0)
    yield* positive("pids-limit", parsed.pidsLimit, 16)
    yield* positive("port", parsed.port, 0)
    yield* positive("session-timeout", parsed.sessionTimeout, 1)
    yield* positive("max-sessions", parsed.maxSessions, 1)
    yield* positive("fly-cpus", parsed.flyCpus, 1)
    yield* positive("fly-memory", parsed.flyMemory, 256)
    yield* positive("e2b-sandbox-timeout", parsed.e2bSandboxTimeout, 1)
    yield* positive("modal-memory", parsed.modalMemory, 1)
    yield* positive("sandbox-timeout", parsed.sandboxTimeout, 1)
    if (parsed.sandboxTimeout > 86_400) return yield* Effect.fail("--sandbox-timeout must be at most 86400")
    if (!(parsed.modalCpu > 0)) return yield* Effect.fail("--modal-cpu must be > 0")
    yield* positive("wasm-max-memory", parsed.wasmMaxMemory, 1)
    yield* positive("wasm-timeout-ms", parsed.wasmTimeoutMs, 0)
    if (Option.isSome(parsed.wasmFuel)) return yield* Effect.fail(wasmFuelUnsupported)
    if (Option.isSome(parsed.cpu) && !(parsed.cpu.value > 0)) return yield* Effect.fail("--cpu must be > 0")
    if (Option.isSome(parsed.memory) && !/^\d+(\.\d+)?[bkmg]?$/i.test(parsed.memory.value)) {
      return yield* Effect.fail("--memory must look like 512m or 2g")
    }
    if (Option.isSome(parsed.toolInstructionOverride) && Option.isSome(parsed.extendedToolInstruction)) {
      return yield* Effect.fail("--tool-instruction-override and --extended-tool-instruction cannot be used together")
    }
    const stateDir = Option.isSome(parsed.stateDir) ? parsed.stateDir.value : yield* defaultStateDir
    const settings: SettingsShape = {
      ...defaultSettings,
      backend: parsed.backend === "go_busybox" ? "toolset" : parsed.backend,
      wasmPath: Option.getOrUndefined(parsed.wasmPath),
      wasmMaxMemoryMb: parsed.wasmMaxMemory,
      wasmTimeoutMs: parsed.wasmTimeoutMs,
      engine: parsed.engine,
      dockerHost: Option.getOrUndefined(parsed.dockerHost),
      image: parsed.image,
      cpu: Option.getOrUndefined(parsed.cpu),
      memory: Option.getOrUndefined(parsed.memory),
      pidsLimit: parsed.pidsLimit,
      dockerRunFlags: parsed.dockerRunFlag,
      fly: {
        app: Option.getOrUndefined(parsed.flyApp),
        token: Option.getOrUndefined(parsed.flyToken),
        image: parsed.flyImage,
        region: Option.getOrUndefined(parsed.flyRegion),
        cpuKind: parsed.flyCpuKind,
        cpus: parsed.flyCpus,
        memoryMb: parsed.flyMemory,
        rootfsSizeGb: Option.getOrUndefined(parsed.flyRootfsSize),
        apiUrl: parsed.flyApiUrl
      },
      e2b: {
        apiKey: Option.getOrUndefined(parsed.e2bApiKey),
        template: parsed.e2bTemplate,
        sandboxTimeoutSec: parsed.e2bSandboxTimeout,
        metadata: Option.match(parsed.e2bMetadata, { onNone: () => ({}), onSome: (map) => Object.fromEntries(map) }),
        envs: Option.match(parsed.e2bEnv, { onNone: () => ({}), onSome: (map) => Object.fromEntries(map) }),
        apiUrl: Option.getOrUndefined(parsed.e2bApiUrl),
        sandboxUrl: Option.getOrUndefined(parsed.e2bSandboxUrl),
        domain: Option.getOrUndefined(parsed.e2bDomain),
        home: Option.getOrUndefined(parsed.e2bHome)
      },
      modal: {
        tokenId: Option.getOrUndefined(parsed.modalTokenId),
        tokenSecret: Option.getOrUndefined(parsed.modalTokenSecret),
        appName: parsed.modalAppName,
        image: parsed.modalImage,
        cpu: parsed.modalCpu,
        memoryMb: parsed.modalMemory,
        gpu: Option.getOrUndefined(parsed.gpu),
        region: Option.getOrUndefined(parsed.region),
        sandboxTimeoutSec: parsed.sandboxTimeout
      },
      transport: parsed.transport,
      timeout: parsed.timeout,
      outputLimit: parsed.outputLimit,
      shell: parsed.shell,
      network: parsed.network,
      toolInstructionOverride: Option.getOrUndefined(parsed.toolInstructionOverride),
      extendedToolInstruction: Option.getOrUndefined(parsed.extendedToolInstruction),
      stateDir,
      unsafeNoSandbox: parsed.unsafeNoSandbox,
      bwrapPath: Option.getOrUndefined(parsed.bwrapPath),
      spawnTimeoutMs: Math.min(parsed.spawnTimeoutMs, parsed.maxTimeoutMs),
      maxTimeoutMs: parsed.maxTimeoutMs,
      maxFinished: parsed.maxFinished,
      headBytes: parsed.headBytes,
      tailBytes: parsed.tailBytes,
      cols: parsed.cols,
      rows: parsed.rows,
      killGraceMs: parsed.killGraceMs,
      env: Option.match(parsed.env, { onNone: () => ({}), onSome: (map) => Object.fromEntries(map) })
    }
    return settings
  })

const serve = (parsed: Parsed) =>
  Effect.gen(function*() {
    const settings = yield* toSettings(parsed)
    if (settings.transport === "stdio") {
      const httpOnly = [
        parsed.host !== "127.0.0.1" && "--host",
        parsed.port !== 8435 && "--port",
        parsed.sessionTimeout !== 300 && "--session-timeout"
      ].filter((flag): flag is string => typeof flag === "string")
      if (httpOnly.length > 0) return yield* Effect.fail(`${httpOnly.join(", ")} only apply with --transport http`)
    }
    if (settings.unsafeNoSandbox) {
      yield* Effect.logWarning("--unsafe-no-sandbox: processes run on this host WITHOUT isolation and can read and change your files")
    }
    const instanceId = randomUUID()
    yield* Effect.logInfo(`kilntainers ${serverInfo.version}: transport ${settings.transport}, state ${settings.stateDir}, instance ${instanceId}`)
    if (settings.transport === "http") {
      yield* serveHttpForever({
        host: parsed.host,
        port: parsed.port,
        sessionTimeoutMs: parsed.sessionTimeout * 1000,
        authToken: Option.getOrUndefined(Option.map(parsed.authToken, Redacted.value)),
        allowUnauthenticated: parsed.allowUnauthenticatedHttp,
        maxSessions: parsed.maxSessions,
        maxBodyBytes: 32 * 1024 * 1024
      }).pipe(Effect.provide(Main.layer(settings, instanceId)))
    } else {
      yield* serveStdio.pipe(Effect.provide(Main.layer(settings, instanceId)))
    }
  }).pipe(Logger.withMinimumLogLevel(levels[parsed.logLevel]))

export const command = Command.make("kilntainers", options, serve).pipe(
  Command.withDescription(
    "Isolated Linux computers and full process control for AI agents, served over MCP (stdio by default)."
  )
)

export const run = Command.run(command, { name: "kilntainers", version: serverInfo.version })

