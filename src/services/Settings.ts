import { Context } from "effect"

/** The resolved configuration of a kilntainers server (from CLI flags, KILNTAINERS_* variables, defaults). */
export interface SettingsShape {
  /** Where computers run; `auto` = docker when an engine answers, else host. */
  readonly backend: "auto" | "host" | "docker"
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
  dockerRunFlags: []
}

/** The server's settings, provided once at the composition root. */
export class Settings extends Context.Tag("kilntainers/services/Settings")<Settings, SettingsShape>() {
  static readonly make = (overrides: Partial<SettingsShape> = {}): SettingsShape => ({ ...defaultSettings, ...overrides })
}
