import * as Schema from "effect/Schema"

/** The input of a tool or library call is invalid. */
export class InvalidInput extends Schema.TaggedError<InvalidInput>()("InvalidInput", {
  message: Schema.String
}) {}

/** No process with this id is known (never existed, or evicted from the finished list). */
export class ProcessNotFound extends Schema.TaggedError<ProcessNotFound>()("ProcessNotFound", {
  id: Schema.String
}) {
  override get message() {
    return `no process with id '${this.id}' (see ps for the known ones)`
  }
}

/** The process has already finished, so the requested operation cannot apply. */
export class ProcessExited extends Schema.TaggedError<ProcessExited>()("ProcessExited", {
  id: Schema.String,
  status: Schema.String
}) {
  override get message() {
    return `process '${this.id}' has already finished (status: ${this.status})`
  }
}

/** Stdin of the process was closed earlier (eof was sent). */
export class StdinClosed extends Schema.TaggedError<StdinClosed>()("StdinClosed", {
  id: Schema.String
}) {
  override get message() {
    return `stdin of process '${this.id}' is already closed`
  }
}

/** The process could not be started. */
export class SpawnFailed extends Schema.TaggedError<SpawnFailed>()("SpawnFailed", {
  command: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `could not start '${this.command}': ${this.reason}`
  }
}

/** The process actor's mailbox is full: the process is not keeping up with requests. */
export class MailboxFull extends Schema.TaggedError<MailboxFull>()("MailboxFull", {
  id: Schema.String
}) {
  override get message() {
    return `process '${this.id}' has too many pending requests; try again`
  }
}

/**
 * What went wrong at a provider (a container engine, a cloud API, the in-computer agent), as the
 * kernel and the user need to know it. The provider's own words go in `detail`, its error in `cause`.
 */
export const ProviderFailure = Schema.Literal(
  /** The engine, API or computer does not answer or refuses to work (down, not installed, misconfigured). */
  "Unavailable",
  /** What we asked about is gone at the provider. */
  "NotFound",
  /** The name is taken, or the computer is changing state. */
  "Conflict",
  /** The provider asks us to slow down. */
  "RateLimited",
  /** A plan, runtime, size or disk limit of the provider. */
  "Quota",
  /** No answer in time. */
  "Timeout",
  /** An answer we cannot understand — a provider's, or a hostile agent's frames. */
  "Protocol",
  /** Credentials or permissions are missing or wrong. */
  "Denied",
  /** The provider refused the request as invalid (bad image, bad size). */
  "Invalid",
  /** Anything else. */
  "Failed"
)
export type ProviderFailure = typeof ProviderFailure.Type

const failureHint: Record<ProviderFailure, string> = {
  Unavailable: "",
  NotFound: "",
  Conflict: " (try again in a moment)",
  RateLimited: " (the provider is rate-limiting; try again shortly)",
  Quota: "",
  Timeout: " (no answer in time)",
  Protocol: "",
  Denied: " (check the credentials)",
  Invalid: "",
  Failed: ""
}

/** A provider call failed. The one place its message for the user is made. */
export class ProviderError extends Schema.TaggedError<ProviderError>()("ProviderError", {
  backend: Schema.String,
  /** What we were doing, as a verb phrase: "create the container", "start the agent". */
  operation: Schema.String,
  reason: ProviderFailure,
  /** What the provider said. */
  detail: Schema.String,
  cause: Schema.optional(Schema.Unknown)
}) {
  override get message() {
    return `${this.backend} backend: cannot ${this.operation}: ${this.detail}${failureHint[this.reason]}`
  }
}

/** Builds a ProviderError (the cause is kept for logs, never shown to the client). */
export const providerError = (
  backend: string,
  operation: string,
  reason: ProviderFailure,
  detail: string,
  cause?: unknown
): ProviderError => new ProviderError({ backend, operation, reason, detail, ...(cause === undefined ? {} : { cause }) })

/**
 * A failure of an agent-backed provider's call as a ProviderError (Unavailable, with its `reason` or
 * its message as the detail); a ProviderError passes through unchanged. Docker and Kubernetes map
 * their agents' failures with it.
 */
export const asProviderError = (backend: string, operation: string) => (error: { readonly message: string }): ProviderError =>
  error instanceof ProviderError
    ? error
    : providerError(backend, operation, "Unavailable", "reason" in error && typeof error.reason === "string" ? error.reason : error.message, error)

/** The computer exists but cannot run anything now (being restarted, lost, deleted). */
export class ComputerUnavailable extends Schema.TaggedError<ComputerUnavailable>()("ComputerUnavailable", {
  id: Schema.String,
  state: Schema.String,
  why: Schema.optional(Schema.String)
}) {
  override get message() {
    return this.state === "lost"
      ? `computer '${this.id}' was lost (${this.why ?? "its provider reported it gone"}); restart or delete it`
      : `computer '${this.id}' is ${this.state}${this.why === undefined ? "" : `: ${this.why}`}`
  }
}

/** The calling session may not use this computer or process. */
export class AccessDenied extends Schema.TaggedError<AccessDenied>()("AccessDenied", {
  what: Schema.String,
  why: Schema.String
}) {
  override get message() {
    return `${this.what}: ${this.why}`
  }
}

/** A path inside a computer does not exist (or is not what the call needs). */
export class FileNotFound extends Schema.TaggedError<FileNotFound>()("FileNotFound", {
  path: Schema.String,
  why: Schema.String
}) {
  override get message() {
    return `${this.why}: ${this.path}`
  }
}

/** No computer with this id exists. */
export class ComputerNotFound extends Schema.TaggedError<ComputerNotFound>()("ComputerNotFound", {
  id: Schema.String
}) {
  override get message() {
    return `no computer with id '${this.id}'`
  }
}

/** No checkpoint with this id (never made, deleted, or ended with the session that made it). */
export class CheckpointNotFound extends Schema.TaggedError<CheckpointNotFound>()("CheckpointNotFound", {
  id: Schema.String
}) {
  override get message() {
    return `no checkpoint with id '${this.id}'`
  }
}

/** A quota of this server is used up (the message says which, and what frees it). */
export class QuotaExceeded extends Schema.TaggedError<QuotaExceeded>()("QuotaExceeded", {
  message: Schema.String
}) {}

/** The backend does not offer the requested capability. */
export class Unsupported extends Schema.TaggedError<Unsupported>()("Unsupported", {
  backend: Schema.String,
  feature: Schema.String
}) {
  override get message() {
    return `the ${this.backend} backend does not support ${this.feature}`
  }
}

/** Everything a process operation can fail with. */
export type ProcessError =
  | InvalidInput
  | ProcessNotFound
  | ProcessExited
  | StdinClosed
  | SpawnFailed
  | MailboxFull
  | ComputerNotFound
  | ComputerUnavailable
  | AccessDenied
  | FileNotFound
  | ProviderError
  | Unsupported
