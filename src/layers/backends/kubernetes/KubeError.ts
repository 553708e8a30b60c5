/**
 * A failed call to the Kubernetes API, wrapped once into the kernel's ProviderError: the API's own
 * Status (its `message`, its `reason`) and the HTTP status read into a typed reason:
 *
 *   401, 403            Denied (who the kubeconfig says we are may not do it: RBAC)
 *   404                 NotFound
 *   409                 Conflict (AlreadyExists: a taken name; Conflict: a stale resourceVersion)
 *   410                 Conflict (Expired: a watch from too old a resourceVersion)
 *   422, 400, 415       Invalid (a field the schema or the server refuses)
 *   429                 RateLimited (the API's priority and fairness)
 *   5xx                 Unavailable
 */
import { type ProviderError, providerError, type ProviderFailure } from "../../../domain/Errors.js"

export const BACKEND = "kubernetes"

export const kubeError = (operation: string, reason: ProviderFailure, detail: string, cause?: unknown): ProviderError =>
  providerError(BACKEND, operation, reason, detail, cause)

const reasonOf = (status: number): ProviderFailure => {
  if (status === 401 || status === 403) return "Denied"
  if (status === 404) return "NotFound"
  if (status === 409 || status === 410) return "Conflict"
  if (status === 429) return "RateLimited"
  if (status === 400 || status === 415 || status === 422) return "Invalid"
  if (status >= 500) return "Unavailable"
  return "Failed"
}

/** The API's Status reason ("AlreadyExists", "Conflict", "Invalid", …), when the body is a Status. */
export const statusReason = (error: ProviderError): string | undefined => {
  const cause = error.cause as { readonly statusReason?: unknown } | undefined
  return typeof cause?.statusReason === "string" ? cause.statusReason : undefined
}

/** An error answer: the Status's message when it is one, else the body's first bytes. */
export const fromStatus = (operation: string, status: number, body: unknown, text: string): ProviderError => {
  const parsed = body as { readonly kind?: unknown; readonly message?: unknown; readonly reason?: unknown } | undefined
  const message = typeof parsed?.message === "string" ? parsed.message : text.trim().slice(0, 500) || `HTTP ${status}`
  const reason = typeof parsed?.reason === "string" ? parsed.reason : undefined
  const detail = status === 403 ? `${message} (the RBAC of the server's service account or user does not allow it)` : message
  return kubeError(operation, reasonOf(status), detail, { status, statusReason: reason })
}
