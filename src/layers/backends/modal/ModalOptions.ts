/**
 * The Modal backend's options (from --modal-* and friends), their defaults, and the checks made at
 * startup so that a bad value is reported before any sandbox is asked for.
 */
import type { ModalSettings } from "../../../services/Settings.js"
import type { ModalClientLike } from "./ModalSdk.js"
import type { ModalGatewayService } from "./ModalGateway.js"
import { validObjectName } from "./SandboxIdentity.js"
import type { ModalOutbound } from "../../egress/CloudEgress.js"

export interface ModalBackendOptions extends ModalSettings {
  /** false → the sandbox has no network (blockNetwork), unless `outbound` allows some. */
  readonly network: boolean
  /** The egress allowlist (--allow-host, CloudEgress.ts): only these names and addresses are reachable. */
  readonly outbound?: ModalOutbound | undefined
  /** A Modal SDK client to use instead of one made from the tokens (tests point one at the fake). */
  readonly client?: ModalClientLike | undefined
  /** A gateway to use instead of the SDK adapter (unit tests of the backend's own logic). */
  readonly gateway?: ModalGatewayService | undefined
  /** Bound on each Modal call (default 120 s; creating includes pulling the image). */
  readonly callTimeoutMs?: number | undefined
  /** How often a connected sandbox is asked whether it still runs (default 5 s). */
  readonly watchIntervalMs?: number | undefined
  /** Output each sandbox's agent keeps per stream on its disk (--retain-bytes; the agent's default 32 MiB). */
  readonly retainBytes?: number | undefined
  /** Finished process records each sandbox's agent keeps (--max-finished; the agent's default 100). */
  readonly maxFinished?: number | undefined
}

export const DEFAULT_IMAGE = "debian:bookworm-slim"
export const DEFAULT_APP_NAME = "kilntainers"
export const DEFAULT_CPU = 1
export const DEFAULT_MEMORY_MB = 512
export const DEFAULT_SANDBOX_TIMEOUT_SEC = 3600
export const MAX_SANDBOX_TIMEOUT_SEC = 86400
export const DEFAULT_CALL_TIMEOUT_MS = 120_000
export const DEFAULT_WATCH_INTERVAL_MS = 5_000

/** A reason why the options cannot work, or undefined. */
export const invalidOptions = (options: ModalBackendOptions): string | undefined => {
  if (!validObjectName(options.appName)) {
    return `--modal-app-name must be 1 to 64 characters of letters, digits, '-', '_' and '.' (Modal's rule for names), got '${options.appName}'`
  }
  if (options.image.trim() === "") return "--modal-image must not be empty"
  if (!(Number.isFinite(options.cpu) && options.cpu > 0)) return `--modal-cpu must be a positive number, got ${options.cpu}`
  if (!(Number.isInteger(options.memoryMb) && options.memoryMb > 0)) {
    return `--modal-memory must be a positive whole number of MiB, got ${options.memoryMb}`
  }
  if (
    !(Number.isInteger(options.sandboxTimeoutSec) && options.sandboxTimeoutSec >= 1 &&
      options.sandboxTimeoutSec <= MAX_SANDBOX_TIMEOUT_SEC)
  ) {
    return `--sandbox-timeout must be a whole number of seconds from 1 to ${MAX_SANDBOX_TIMEOUT_SEC} (24 h, Modal's limit), got ${options.sandboxTimeoutSec}`
  }
  return undefined
}
