import * as Context from "effect/Context"
import type * as Redacted from "effect/Redacted"
import { emptyPolicy, type FilesystemPolicy } from "../domain/Mounts.js"

/** Fly Machines backend settings (--fly-*). */
export interface FlySettings {
  /** --fly-app / FLY_APP_NAME */
  readonly app: string | undefined
  /** --fly-token / FLY_API_TOKEN or FLY_TOKEN; never in argv, never logged. */
  readonly token: Redacted.Redacted<string> | undefined
  /** --fly-image, default debian:bookworm-slim */
  readonly image: string
  /** --fly-region */
  readonly region: string | undefined
  /** --fly-cpu-kind, default shared */
  readonly cpuKind: "shared" | "performance"
  /** --fly-cpus, default 1 */
  readonly cpus: number
  /** --fly-memory (MB), default 512, a multiple of 256 */
  readonly memoryMb: number
  /** --fly-rootfs-size (GB) */
  readonly rootfsSizeGb: number | undefined
  /** --fly-preview-port: ports inside new machines that Fly's proxy serves (machine services), for preview URLs. */
  readonly previewPorts?: ReadonlyArray<number> | undefined
  /** default https://api.machines.dev */
  readonly apiUrl: string
  /** --fly-rate-limit / --fly-rate-burst: requests per second and burst per action and machine that we allow ourselves (Fly documents 1 and 3). */
  readonly rateLimit: { readonly perSecond: number; readonly burst: number }
}

/** E2B backend settings (--e2b-*). */
export interface E2BSettings {
  readonly apiKey: Redacted.Redacted<string> | undefined
  readonly template: string
  readonly sandboxTimeoutSec: number
  /** The plan's maximum continuous runtime of a sandbox, seconds: 3600 on Base, 86400 on Pro. */
  readonly maxRuntimeSec: number
  readonly metadata: Readonly<Record<string, string>>
  readonly envs: Readonly<Record<string, string>>
  readonly apiUrl: string | undefined
  readonly sandboxUrl: string | undefined
  readonly domain: string | undefined
  readonly home: string | undefined
}

/** Kubernetes backend settings (--k8s-*): agent-sandbox Sandboxes through SandboxClaims. */
export interface KubernetesSettings {
  /** --k8s-kubeconfig / KUBECONFIG; undefined: ~/.kube/config or the pod's service account. */
  readonly kubeconfig: string | undefined
  readonly context: string | undefined
  /** --k8s-namespace; undefined: the context's. */
  readonly namespace: string | undefined
  /** --k8s-template: an existing SandboxTemplate; undefined: kilntainers makes its own. */
  readonly template: string | undefined
  readonly image: string
  readonly runtimeClass: string | undefined
  readonly cpu: string | undefined
  readonly memory: string | undefined
  readonly nodeSelector: Readonly<Record<string, string>>
  /** --k8s-warm-pool: replicas of a SandboxWarmPool of the template (0: none). */
  readonly warmPool: number
}

/** Modal backend settings (--modal-*, --gpu, --region, --sandbox-timeout). */
export interface ModalSettings {
  /** --modal-token-id (needed unless a gateway or client is given). */
  readonly tokenId: Redacted.Redacted<string> | undefined
  /** --modal-token-secret (needed unless a gateway or client is given). */
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
  /** --modal-preview-port: ports served by Modal tunnels (declared at sandbox creation), for preview URLs. */
  readonly previewPorts?: ReadonlyArray<number> | undefined
  /** --sandbox-timeout in seconds, default 3600, at most 86400: the sandbox's whole lifetime. */
  readonly sandboxTimeoutSec: number
}

/** Traces (--otel-*): exported with OTLP over HTTP only when an endpoint is set. */
export interface OtelSettings {
  /** The collector's base URL (spans go to `<endpoint>/v1/traces`); undefined: no traces, no exporter loaded. */
  readonly endpoint: string | undefined
  /** `service.name` of the spans. */
  readonly serviceName: string
}

/** A header added to requests to matching hosts: the rule as written and the secret read for it. */
export interface EgressHeaderSetting {
  /** `PATTERN:Header-Name=ENV_VAR` as given to --egress-header. */
  readonly rule: string
  /** The value of ENV_VAR in the server's environment, read once at startup. */
  readonly value: Redacted.Redacted<string>
}

/**
 * Egress through the server's proxy (--allow-host, --egress-*; see `layers/egress`). With an empty
 * allowlist there is no proxy and `--network` alone decides.
 */
export interface EgressSettings {
  /** Host patterns (`example.com`, `*.example.com`, `:port`, `*`). */
  readonly allowHosts: ReadonlyArray<string>
  /** `NAME=IP` pins, resolved by the proxy instead of DNS. */
  readonly resolve: ReadonlyArray<string>
  readonly headers: ReadonlyArray<EgressHeaderSetting>
  /** PEM files of CAs the proxy trusts for upstreams besides the system's (internal services, tests). */
  readonly upstreamCaFiles: ReadonlyArray<string>
  /** The loopback port inside each computer where its processes find the proxy. */
  readonly relayPort: number
  /** Most proxy connections open at once per computer. */
  readonly maxConnections: number
  /** A proxy connection with no byte either way for this long is closed, ms. */
  readonly idleTimeoutMs: number
}

/** The audit log (--audit-log*). */
export interface AuditLogSettings {
  /** JSON lines file; undefined: no file (recent entries are still kept in memory). */
  readonly path: string | undefined
  /** Rotated before it grows past this many bytes. */
  readonly maxBytes: number
  /** Rotated files kept. */
  readonly keep: number
}

/** Preview URLs (--preview-host, --preview-port): served on their own listener, never on /mcp's origin. */
export interface PreviewSettings {
  /** Address of the preview listener. */
  readonly host: string
  /** Its port (0: a free one); undefined: no previews. */
  readonly port: number | undefined
  /** A preview's life when computer_expose does not say, and the most it may ask for, seconds. */
  readonly defaultLifetimeSec: number
  readonly maxLifetimeSec: number
  /** Most connections open at once through one preview (a WebSocket holds one). */
  readonly maxConnections: number
  /** Largest request body through a preview, bytes. */
  readonly maxBodyBytes: number
}

/** The resolved configuration of a kilntainers server (from CLI flags, KILNTAINERS_* variables, defaults). */
export interface SettingsShape {
  /** Where computers run; `auto` = docker when an engine answers, else host. */
  readonly backend: "auto" | "host" | "docker" | "fly" | "e2b" | "modal" | "kubernetes" | "wasm" | "toolset"
  readonly transport: "stdio" | "http"
  /** sandbox_exec default timeout, seconds. */
  readonly timeout: number
  /** Inline output limit of one tool result, bytes. */
  readonly outputLimit: number
  readonly shell: string
  readonly network: boolean
  readonly toolInstructionOverride: string | undefined
  readonly extendedToolInstruction: string | undefined
  readonly stateDir: string
  readonly unsafeNoSandbox: boolean
  /** bubblewrap executable; found in the usual places when undefined. */
  readonly bwrapPath: string | undefined
  /** spawn: default and maximum wait before a process goes to the background, ms. */
  readonly spawnTimeoutMs: number
  /** The longest a call may wait while the client listens to progress notifications, ms. */
  readonly maxTimeoutMs: number
  /**
   * The longest a call waits when the client does not ask for progress, ms: safely under common
   * client request timeouts (60 s in the MCP SDK). A longer wait asked for is capped, and the
   * result says so.
   */
  readonly maxCallMs: number
  /** The most output bytes one tool result carries inline (both streams together). */
  readonly inlineBytes: number
  /** stdin: how long to wait for the output that follows the input, by default, ms. */
  readonly stdinYieldMs: number
  /** ps: finished processes listed by default (running ones always are). */
  readonly psFinished: number
  /** Computers prepared ahead and handed out to new temporary computers (0: none). */
  readonly warmPool: number
  /** Checkpoints one session may hold at once (0: checkpoints off). */
  readonly maxCheckpoints: number
  /** How many finished processes stay listable. */
  readonly maxFinished: number
  /**
   * Output retention per stream in the server: first headBytes and last tailBytes (the whole of it
   * where the computer does not hold its processes; a window where it does).
   */
  readonly headBytes: number
  readonly tailBytes: number
  /**
   * Output a computer that holds its processes keeps per stream on its own disk (a quarter from the
   * start, the rest from the end); any of it is readable by cursor.
   */
  readonly retainBytes: number
  readonly cols: number
  readonly rows: number
  /** Time between SIGTERM and SIGKILL when processes are stopped by shutdown. */
  readonly killGraceMs: number
  /** Capacity of each process actor's mailbox. */
  readonly mailboxCapacity: number
  /** Extra environment given to every process (NAME=value from --env). */
  readonly env: Readonly<Record<string, string>>
  /** Docker backend: engine flavour, engine address, base image and limits. */
  readonly engine: "docker" | "podman"
  readonly dockerHost: string | undefined
  readonly image: string
  readonly cpu: number | undefined
  readonly memory: string | undefined
  readonly pidsLimit: number
  readonly dockerRunFlags: ReadonlyArray<string>
  readonly fly: FlySettings
  readonly e2b: E2BSettings
  readonly modal: ModalSettings
  readonly kubernetes: KubernetesSettings
  /**
   * WASM backends: the user's module (--backend wasm), memory cap and wall clock per process, and
   * the size of one computer's filesystem (contents plus 1 KiB per file or directory).
   */
  readonly wasmPath: string | undefined
  readonly wasmMaxMemoryMb: number
  readonly wasmTimeoutMs: number
  readonly wasmMaxDiskBytes: number
  readonly otel: OtelSettings
  readonly egress: EgressSettings
  readonly auditLog: AuditLogSettings
  readonly preview: PreviewSettings
  /** The user's own files in host and Docker computers (--mount, --deny-read, --allow-write, --deny-write). */
  readonly filesystem: FilesystemPolicy
  /** Default working directory of processes inside computers; undefined: the computer's home. */
  readonly workdir: string | undefined
  /** Docker: an existing container (not ours) adopted as a permanent computer, never removed. */
  readonly dockerContainer: string | undefined
}

export const defaultSettings: SettingsShape = {
  backend: "auto",
  transport: "stdio",
  timeout: 120,
  outputLimit: 2 * 1024 * 1024,
  shell: "/bin/bash",
  network: false,
  toolInstructionOverride: undefined,
  extendedToolInstruction: undefined,
  stateDir: ".kilntainers-state",
  unsafeNoSandbox: false,
  bwrapPath: undefined,
  spawnTimeoutMs: 10_000,
  maxTimeoutMs: 600_000,
  maxCallMs: 50_000,
  inlineBytes: 24 * 1024,
  stdinYieldMs: 300,
  psFinished: 5,
  warmPool: 0,
  maxCheckpoints: 10,
  maxFinished: 100,
  headBytes: 64 * 1024,
  tailBytes: 1024 * 1024,
  retainBytes: 32 * 1024 * 1024,
  cols: 120,
  rows: 30,
  killGraceMs: 2_000,
  mailboxCapacity: 64,
  env: {},
  engine: "docker",
  dockerHost: undefined,
  // The computer image (images/computer), built on first use when the engine lacks it.
  image: "kilntainers-computer:bookworm",
  cpu: undefined,
  memory: undefined,
  pidsLimit: 512,
  dockerRunFlags: [],
  fly: {
    app: undefined,
    token: undefined,
    image: "debian:bookworm-slim",
    region: undefined,
    cpuKind: "shared",
    cpus: 1,
    memoryMb: 512,
    rootfsSizeGb: undefined,
    apiUrl: "https://api.machines.dev",
    rateLimit: { perSecond: 1, burst: 3 }
  },
  e2b: {
    apiKey: undefined,
    template: "base",
    sandboxTimeoutSec: 3600,
    maxRuntimeSec: 3600,
    metadata: {},
    envs: {},
    apiUrl: undefined,
    sandboxUrl: undefined,
    domain: undefined,
    home: undefined
  },
  modal: {
    tokenId: undefined,
    tokenSecret: undefined,
    appName: "kilntainers",
    image: "debian:bookworm-slim",
    cpu: 1,
    memoryMb: 512,
    gpu: undefined,
    region: undefined,
    sandboxTimeoutSec: 3600
  },
  kubernetes: {
    kubeconfig: undefined,
    context: undefined,
    namespace: undefined,
    template: undefined,
    image: "debian:bookworm-slim",
    runtimeClass: undefined,
    cpu: undefined,
    memory: undefined,
    nodeSelector: {},
    warmPool: 0
  },
  wasmPath: undefined,
  wasmMaxMemoryMb: 256,
  wasmTimeoutMs: 0,
  wasmMaxDiskBytes: 256 * 1024 * 1024,
  otel: { endpoint: undefined, serviceName: "kilntainers" },
  egress: {
    allowHosts: [],
    resolve: [],
    headers: [],
    upstreamCaFiles: [],
    relayPort: 3128,
    maxConnections: 64,
    idleTimeoutMs: 300_000
  },
  auditLog: { path: undefined, maxBytes: 16 * 1024 * 1024, keep: 3 },
  preview: { host: "127.0.0.1", port: undefined, defaultLifetimeSec: 3600, maxLifetimeSec: 86400, maxConnections: 32, maxBodyBytes: 32 * 1024 * 1024 },
  filesystem: emptyPolicy,
  workdir: undefined,
  dockerContainer: undefined
}

/** The server's settings, provided once at the composition root. */
export class Settings extends Context.Tag("kilntainers/services/Settings")<Settings, SettingsShape>() {
  static readonly make = (overrides: Partial<SettingsShape> = {}): SettingsShape => ({ ...defaultSettings, ...overrides })
}
