/**
 * A failed call to E2B, wrapped once at the edge into the kernel's `ProviderError`: which operation
 * (a verb phrase: "create the sandbox"), a typed reason, the provider's own words scrubbed of the
 * API key, and the foreign error as the cause. The E2B-specific wording lives here:
 *   401 on the control plane   Denied, "E2B rejected the API key"
 *   401/403 from envd          Denied, the sandbox's own refusal (old envd without a user)
 *   400 "Max instance length exceeded" / "Timeout cannot be greater than N hours"
 *                              Quota: the plan's maximum runtime (RuntimeCap.ts)
 *   409                        Conflict: the sandbox is changing state (pausing, resuming)
 *   400 on header rules        Denied (the team lacks the feature) or Invalid (the template's envd
 *                              is older than 0.5.13), said as what --egress-header needs
 *   501                        Invalid: this sandbox's envd or the service does not offer it
 */
import { AuthenticationError, NotFoundError, RateLimitError, SandboxNotFoundError, ServiceBusyError, TimeoutError } from "e2b"
import { ProviderError, providerError, type ProviderFailure } from "../../../domain/Errors.js"

export const BACKEND = "e2b"

/** A failure of ours (not the SDK's), in the same shape. */
export const e2bError = (operation: string, reason: ProviderFailure, detail: string, cause?: unknown): ProviderError =>
  providerError(BACKEND, operation, reason, detail, cause)

/** The plan's maximum runtime is reached: E2B refuses to extend or keep the sandbox running. */
export const isRuntimeCap = (error: ProviderError) => error.reason === "Quota"

/** Worth another try for an idempotent call. */
export const isTransient = (error: ProviderError) =>
  error.reason === "Unavailable" || error.reason === "RateLimited" || error.reason === "Timeout"

/** The HTTP status behind an SDK error, when there is one. */
export const statusOf = (error: unknown): number | undefined => {
  if (error instanceof AuthenticationError) return 401
  if (error instanceof RateLimitError) return 429
  if (error instanceof ServiceBusyError) return 503
  if (error instanceof SandboxNotFoundError || error instanceof NotFoundError) return 404
  const code = (error as { statusCode?: unknown } | null)?.statusCode
  if (typeof code === "number") return code
  const leading = error instanceof Error ? /^(\d{3}):/.exec(error.message) : null
  return leading ? Number(leading[1]) : undefined
}

/** Our own request timeout (the SDK's abort), not E2B's TimeoutError for a dead sandbox. */
const isRequestTimeout = (error: unknown) =>
  error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError") && !(error instanceof TimeoutError)

const isTransportFailure = (error: unknown) =>
  error instanceof TypeError && /fetch failed|terminated|socket|ECONNRE/i.test(error.message)

export interface Classify {
  /** What we were doing, as a verb phrase: "create the sandbox". */
  readonly operation: string
  /** "api": the control plane (401 is the key); "envd": a sandbox (401 is envd's own check). */
  readonly plane: "api" | "envd"
  readonly requestTimeoutMs: number
  /** Removes secrets from provider text. */
  readonly scrub: (text: string) => string
}

/**
 * E2B's 400 for the header rules of a create (infra's validateNetworkRules), in the words of the
 * flag that asked for them; undefined for any other failure.
 */
export const headerRulesRefusal = (error: ProviderError): ProviderError | undefined => {
  if (error.reason !== "Invalid") return undefined
  if (/transform rules are not available for your team/i.test(error.detail)) {
    return e2bError(
      error.operation,
      "Denied",
      "--egress-header needs E2B's header rules, which are not enabled for this team (E2B turns them on per team: ask E2B, or drop --egress-header)",
      error
    )
  }
  const old = /envd version is ([0-9][^,\s]*), must be at least ([0-9][^\s)]*)/i.exec(error.detail)
  if (old !== null) {
    return e2bError(
      error.operation,
      "Invalid",
      `--egress-header needs a template whose envd is ${old[2]!.replace(/\.$/, "")} or newer (this one has ${old[1]}): rebuild it with a current E2B CLI, or drop --egress-header`,
      error
    )
  }
  return undefined
}

/** Wraps a foreign error (SDK, fetch, Connect) once. */
export const fromSdk = (context: Classify, error: unknown): ProviderError => {
  if (error instanceof ProviderError) return error
  const status = statusOf(error)
  const said = context.scrub(error instanceof Error ? error.message : String(error))
  const make = (reason: ProviderFailure, detail = said) => e2bError(context.operation, reason, detail, error)
  if (isRequestTimeout(error)) return make("Timeout", `E2B did not answer within ${context.requestTimeoutMs} ms`)
  if (status === undefined) return make(isTransportFailure(error) ? "Unavailable" : "Failed")
  if (status === 401 && context.plane === "api") return make("Denied", "E2B rejected the API key (--e2b-api-key / E2B_API_KEY)")
  if (status === 401 || status === 403) return make("Denied", `the sandbox refused the request (${said})`)
  if (status === 404 || status === 410) return make("NotFound")
  if (status === 409) return make("Conflict")
  if (status === 429) return make("RateLimited")
  if (status === 400 && /max instance length|cannot be greater than/i.test(said)) {
    return make("Quota", `the sandbox is at the end of the maximum runtime of the E2B plan (${said})`)
  }
  if (status === 400) return make("Invalid")
  if (status === 501) return make("Invalid", `not offered by this sandbox or service (${said})`)
  if (status >= 500) return make("Unavailable", `the E2B service failed (${said})`)
  return make("Failed")
}
