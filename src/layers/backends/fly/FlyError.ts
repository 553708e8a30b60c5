/**
 * A failed call to the Fly Machines API, typed: what was attempted (`operation`), why in one word
 * (`reason`, the provider contract's own words, for code to decide on), the HTTP status when there
 * was one, the API's own words (`detail`) and the underlying `cause` (a transport error, a decode
 * error). The token never appears in any of them: requests are described by operation, never by
 * headers.
 *
 * FlyError lives inside FlyApi (its retry policy needs the status and Retry-After); everything the
 * kernel sees is a ProviderError, made from it in one place: `toProviderError`.
 */
import * as Schema from "effect/Schema"
import { type ProviderError, providerError, ProviderFailure } from "../../../domain/Errors.js"

export const NAME = "fly"

export class FlyError extends Schema.TaggedError<FlyError>()("FlyError", {
  reason: ProviderFailure,
  operation: Schema.String,
  status: Schema.optional(Schema.Number),
  detail: Schema.String,
  /** The wait the API asked for (Retry-After), when it said one. */
  retryAfterMs: Schema.optional(Schema.Number),
  cause: Schema.optional(Schema.Defect)
}) {
  override get message(): string {
    return `${this.operation}: ${this.said}`
  }

  /** The API's words with the status they came with. */
  get said(): string {
    return `${this.status === undefined ? "" : `HTTP ${this.status}: `}${this.detail}`
  }

  /** Worth another attempt: rate limited, unavailable. A timeout is not (the caller gets a clear error at once). */
  get retryable(): boolean {
    return this.reason === "RateLimited" || this.reason === "Unavailable"
  }
}

/** The reason of an HTTP status the API answered with (`said` is the API's error text). */
export const reasonOfStatus = (status: number, said: string): ProviderFailure => {
  if (status === 401 || status === 403) return "Denied"
  if (status === 404) return "NotFound"
  if (status === 408) return "Timeout"
  if (status === 429) return "RateLimited"
  if (/insufficient_capacity|capacity/i.test(said) && status >= 400) return "Quota"
  if (status === 409 || status === 412 || status === 422 || /already_exists|already in use|failed_precondition/i.test(said)) {
    return "Conflict"
  }
  if (status >= 500) return "Unavailable"
  return "Invalid"
}

/** The kernel's error for a failed Fly call: one place, one shape (`context` replaces the operation). */
export const toProviderError = (error: FlyError, context?: string): ProviderError =>
  providerError(NAME, context ?? error.operation, error.reason, error.said, error)

/** A ProviderError of the fly backend with a sentence of ours (a broken invariant of the machine, a setting). */
export const flyError = (operation: string, reason: ProviderFailure, detail: string, cause?: unknown): ProviderError =>
  providerError(NAME, operation, reason, detail, cause)
