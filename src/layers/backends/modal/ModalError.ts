/**
 * Modal's failures as ProviderErrors: what the SDK threw, read into a typed reason.
 *
 * The SDK throws its own error classes for what it recognises (NotFoundError, AlreadyExistsError,
 * InvalidError, …) and lets gRPC `ClientError`s through for the rest; both are read here, by class
 * and by gRPC status code, so that a name taken (`Conflict`) or a sandbox not there (`NotFound`)
 * is told from real failures without matching message text. The user's message is made by
 * ProviderError itself; what is Modal's own to say (which flags hold the credentials, what to do
 * when Modal is out of capacity) is added to the detail here.
 */
import {
  AlreadyExistsError,
  ClientClosedError,
  ConflictError,
  InvalidError,
  NotFoundError,
  ResourceExhaustedError,
  SandboxTimeoutError,
  TimeoutError
} from "modal"
import { type ProviderError, providerError, type ProviderFailure } from "../../../domain/Errors.js"

/** The backend's name, as errors and logs say it. */
export const BACKEND = "modal"

/** A failed Modal call. */
export const modalError = (operation: string, reason: ProviderFailure, detail: string, cause?: unknown): ProviderError =>
  providerError(BACKEND, operation, reason, detail, cause)

/** gRPC status codes (the SDK's ClientError carries them as `code`). */
const GRPC: Record<number, ProviderFailure> = {
  3: "Invalid", // INVALID_ARGUMENT
  4: "Timeout", // DEADLINE_EXCEEDED
  5: "NotFound",
  6: "Conflict", // ALREADY_EXISTS
  7: "Denied", // PERMISSION_DENIED
  8: "Quota", // RESOURCE_EXHAUSTED
  9: "Conflict", // FAILED_PRECONDITION
  14: "Unavailable",
  16: "Denied" // UNAUTHENTICATED
}

const reasonOf = (error: unknown): ProviderFailure => {
  if (error instanceof NotFoundError) return "NotFound"
  if (error instanceof AlreadyExistsError || error instanceof ConflictError) return "Conflict"
  if (error instanceof InvalidError) return "Invalid"
  if (error instanceof ResourceExhaustedError) return "Quota"
  if (error instanceof SandboxTimeoutError || error instanceof TimeoutError) return "Timeout"
  if (error instanceof ClientClosedError) return "Unavailable"
  const code = (error as { readonly code?: unknown } | null)?.code
  if (error instanceof Error && error.name === "ClientError" && typeof code === "number") return GRPC[code] ?? "Failed"
  if (error instanceof Error && /missing credentials/i.test(error.message)) return "Denied"
  return "Failed"
}

/** Never echo anything that looks like a Modal token back. */
export const redact = (text: string) => text.replace(/\b(a[sk]-[A-Za-z0-9]{4})[A-Za-z0-9_-]+/g, "$1…")

/** What Modal's words mean for this program's user. */
const ADVICE: Partial<Record<ProviderFailure, string>> = {
  Denied: "; the credentials are --modal-token-id and --modal-token-secret (MODAL_TOKEN_ID, MODAL_TOKEN_SECRET)",
  Quota: "; Modal is out of capacity or the workspace reached a limit: try again later, or another --region or --gpu"
}

const detailOf = (error: unknown): string => {
  const details = (error as { readonly details?: unknown } | null)?.details
  const message = typeof details === "string" && details !== "" ? details : error instanceof Error ? error.message : String(error)
  return redact(message.split("\n")[0]!).trim() || "unknown error"
}

/** Wraps whatever the SDK threw. */
export const fromSdkError = (operation: string) => (error: unknown): ProviderError => {
  const reason = reasonOf(error)
  return modalError(operation, reason, `${detailOf(error)}${ADVICE[reason] ?? ""}`, error)
}

/** The same failure, named after what the caller was doing. */
export const during = (operation: string) => (error: ProviderError): ProviderError =>
  error.operation === operation ? error : modalError(operation, error.reason, error.detail, error.cause)
