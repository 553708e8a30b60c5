import { Context, type Redacted } from "effect"

/** Fly Machines backend settings (--fly-*). */
export interface FlySettings {
  readonly app: string | undefined
  readonly token: Redacted.Redacted<string> | undefined
  readonly image: string
  readonly region: string | undefined
  readonly cpuKind: "shared" | "performance"
  readonly cpus: number
  readonly memoryMb: number
  readonly rootfsSizeGb: number | undefined
  readonly apiUrl: string
}

/** E2B backend settings (--e2b-*). */
export interface E2BSettings {
  readonly apiKey: Redacted.Redacted<string> | undefined
  readonly template: string
  readonly sandboxTimeoutSec: number
  readonly metadata: Readonly<Record<string, string>>
  readonly envs: Readonly<Record<string, string>>
  readonly apiUrl: string | undefined
  readonly sandboxUrl: string | undefined
  readonly domain: string | undefined
  readonly home: string | undefined
}

/** Modal backend settings (--modal-*, --gpu, --region, --sandbox-timeout). */
export interface ModalSettings {
  readonly tokenId: Redacted.Redacted<string> | undefined
  readonly tokenSecret: Redacted.Redacted<string> | undefined
  readonly appName: string
  readonly image: string
  readonly cpu: number
  readonly memoryMb: number
  readonly gpu: string | undefined
  readonly region: string | undefined
  readonly sandboxTimeoutSec: number
}

/** The resolved configuration of a kilntainers server (from CLI flags, KILNTAINERS_* variables, defaults). */
export interface SettingsShape {
  /** Where computers run; `auto` = docker when an engine answers, else host. */
  readonly backend: "auto" | "host" | "docker" | "fly" | "e2b" | "modal" | "wasm" | "toolset"
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
  readonly maxTimeoutMs: number
  /** How many finished processes stay listable. */
  readonly maxFinished: number
  /** Output retention per stream: first headBytes and last tailBytes. */
  readonly headBytes: number
  readonly tailBytes: number
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
  /** WASM backends: the user's module (--backend wasm), memory cap and wall clock per process. */
  readonly wasmPath: string | undefined
  readonly wasmMaxMemoryMb: number
  readonly wasmTimeoutMs: number
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
  maxTimeoutMs: 60_000,
  maxFinished: 100,
  headBytes: 64 * 1024,
  tailBytes: 1024 * 1024,
  cols: 120,
  rows: 30,
  killGraceMs: 2_000,
  mailboxCapacity: 64,
  env: {},
  engine: "docker",
  dockerHost: undefined,
  image: "debian:bookworm-slim",
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
    apiUrl: "https://api.machines.dev"
  },
  e2b: {
    apiKey: undefined,
    template: "base",
    sandboxTimeoutSec: 3600,
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
  wasmPath: undefined,
  wasmMaxMemoryMb: 256,
  wasmTimeoutMs: 0
}

/** The server's settings, provided once at the composition root. */
export class Settings extends Context.Tag("kilntainers/services/Settings")<Settings, SettingsShape>() {
  static readonly make = (overrides: Partial<SettingsShape> = {}): SettingsShape => ({ ...defaultSettings, ...overrides })
}
