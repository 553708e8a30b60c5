import { Schema } from "effect"

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

/** The backend failed or is unavailable (sandbox missing, engine down, provider error). */
export class BackendError extends Schema.TaggedError<BackendError>()("BackendError", {
  backend: Schema.String,
  reason: Schema.String
}) {
  override get message() {
    return `${this.backend} backend: ${this.reason}`
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
  | BackendError
  | ComputerNotFound
  | Unsupported
